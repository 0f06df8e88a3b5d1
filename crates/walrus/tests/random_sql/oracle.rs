//! Running a statement on both servers through both protocols, and judging the answers.

use std::time::Duration;

use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// How long one statement may take before it counts as an answer of its own ("timeout").
/// Generous: walrus runs correlated subqueries row by row and some generated queries take
/// it 5–20 s on a loaded machine where PostgreSQL needs milliseconds (a speed matter the
/// test does not judge); a hang still fails.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// SQLSTATE of a refusal: `feature_not_supported`.
pub const REFUSED: &str = "0A000";

/// One protocol's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Column names, type OIDs (extended protocol only; 0 in the simple one), and rows
    /// (text cells joined by `|` in the simple protocol, hex of the binary values in the
    /// extended one).
    Rows {
        names: Vec<String>,
        oids: Vec<u32>,
        rows: Vec<String>,
    },
    Error {
        code: String,
        message: String,
    },
}

impl Outcome {
    fn error(code: &str, message: impl Into<String>) -> Outcome {
        Outcome::Error {
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> Option<&str> {
        match self {
            Outcome::Error { code, .. } => Some(code),
            Outcome::Rows { .. } => None,
        }
    }
}

/// A statement's answers through the simple and the extended protocol.
#[derive(Clone, Debug)]
pub struct Answer {
    pub simple: Outcome,
    pub ext: Outcome,
}

/// A value in the slt text form (see slt.rs).
pub fn cell(v: Option<&str>) -> String {
    match v {
        None => "NULL".into(),
        Some("") => "(empty)".into(),
        Some(s) => s
            .replace('\\', "\\\\")
            .replace('\n', "\\n")
            .replace('\r', "\\r"),
    }
}

/// Any value, as its raw binary bytes.
struct Raw(Option<Vec<u8>>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw.to_vec())))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn db_error(e: tokio_postgres::Error) -> Outcome {
    match e.as_db_error() {
        Some(db) => Outcome::error(db.code().code(), db.message()),
        None => Outcome::error("connection", e.to_string()),
    }
}

async fn simple(client: &Client, sql: &str) -> Outcome {
    let r = tokio::time::timeout(STATEMENT_TIMEOUT, client.simple_query(sql)).await;
    let messages = match r {
        Err(_) => return Outcome::error("timeout", "no answer in time"),
        Ok(Err(e)) => return db_error(e),
        Ok(Ok(m)) => m,
    };
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for m in messages {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                names = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(row) => {
                let cells: Vec<String> = (0..row.len()).map(|i| cell(row.get(i))).collect();
                rows.push(cells.join("|"));
            }
            _ => {}
        }
    }
    Outcome::Rows {
        oids: vec![0; names.len()],
        names,
        rows,
    }
}

async fn extended(client: &Client, sql: &str) -> Outcome {
    let work = async {
        let stmt = client.prepare(sql).await.map_err(db_error)?;
        let names = stmt
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        let oids = stmt.columns().iter().map(|c| c.type_().oid()).collect();
        let rows = client.query(&stmt, &[]).await.map_err(db_error)?;
        let rows = rows
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| match r.try_get::<_, Raw>(i) {
                        Ok(Raw(Some(b))) => hex(&b),
                        Ok(Raw(None)) => "NULL".into(),
                        Err(e) => format!("<{e}>"),
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        Ok(Outcome::Rows { names, oids, rows })
    };
    match tokio::time::timeout(STATEMENT_TIMEOUT, work).await {
        Err(_) => Outcome::error("timeout", "no answer in time"),
        Ok(Err(o)) | Ok(Ok(o)) => o,
    }
}

async fn both(client: &Client, sql: &str) -> Answer {
    let simple = simple(client, sql).await;
    let ext = extended(client, sql).await;
    Answer { simple, ext }
}

/// Connections to PostgreSQL and walrus, queried side by side.
pub struct Pair {
    rt: tokio::runtime::Runtime,
    dsns: [String; 2],
    clients: [Option<Client>; 2],
}

impl Pair {
    pub fn connect(pg: &str, walrus: &str, limit: Duration) -> Result<Pair, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let mut p = Pair {
            rt,
            dsns: [pg.into(), walrus.into()],
            clients: [None, None],
        };
        for i in 0..2 {
            p.reconnect(i, limit)?;
        }
        Ok(p)
    }

    fn reconnect(&mut self, i: usize, limit: Duration) -> Result<(), String> {
        let start = std::time::Instant::now();
        loop {
            let dsn = self.dsns[i].clone();
            let r = self.rt.block_on(async move {
                let (client, conn) = tokio_postgres::connect(&dsn, NoTls).await?;
                tokio::spawn(conn);
                client.simple_query("SET TimeZone = 'UTC'").await?;
                if i == 0 {
                    // PostgreSQL would JIT-compile the queries over its unanalysed tables
                    // (estimated large): hundreds of milliseconds each, same answers.
                    client.simple_query("SET jit = off").await?;
                }
                Ok::<_, tokio_postgres::Error>(client)
            });
            match r {
                Ok(c) => {
                    self.clients[i] = Some(c);
                    return Ok(());
                }
                Err(e) if start.elapsed() > limit => {
                    return Err(format!("connect {}: {e}", self.dsns[i]))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Re-makes closed sessions (after a timeout or a server-side disconnect).
    fn ensure(&mut self) -> Result<(), String> {
        for i in 0..2 {
            if self.clients[i].as_ref().is_none_or(|c| c.is_closed()) {
                self.reconnect(i, Duration::from_secs(10))?;
            }
        }
        Ok(())
    }

    /// One statement on both servers, both protocols: [PostgreSQL, walrus].
    pub fn run(&mut self, sql: &str) -> Result<[Answer; 2], String> {
        self.ensure()?;
        let [Some(pg), Some(w)] = &self.clients else {
            unreachable!("connected")
        };
        let (a, b) = self
            .rt
            .block_on(async { tokio::join!(both(pg, sql), both(w, sql)) });
        for (i, ans) in [&a, &b].into_iter().enumerate() {
            if [&ans.simple, &ans.ext]
                .iter()
                .any(|o| o.code() == Some("timeout"))
            {
                // A late reply must not be read as the next answer.
                self.clients[i] = None;
            }
        }
        Ok([a, b])
    }

    /// One statement on walrus alone, simple protocol.
    pub fn walrus_simple(&mut self, sql: &str) -> Result<Outcome, String> {
        self.ensure()?;
        let Some(w) = &self.clients[1] else {
            unreachable!("connected")
        };
        Ok(self.rt.block_on(simple(w, sql)))
    }

    /// Simple-protocol statement on both servers (setup); errors if either fails.
    pub fn exec_both(&mut self, sql: &str) -> Result<(), String> {
        self.ensure()?;
        let [Some(pg), Some(w)] = &self.clients else {
            unreachable!("connected")
        };
        let (a, b) = self
            .rt
            .block_on(async { tokio::join!(simple(pg, sql), simple(w, sql)) });
        for (who, o) in [("PostgreSQL", a), ("walrus", b)] {
            if let Outcome::Error { code, message } = o {
                return Err(format!("{who}: {code} {message}\n  {sql}"));
            }
        }
        Ok(())
    }
}

/// How the comparison came out.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Same,
    /// walrus refused (0A000); the message with literals cut off.
    Refused(String),
    /// A data-dependent error on one side only, or different ones, where the generator
    /// confirms the order of evaluation may differ.
    EvalOrder,
    /// A different answer: category, detail, and a signature (the category and the
    /// error messages cut at their first literal) the minimizer keeps constant.
    Wrong(String, String, String),
}

/// Whether a SQLSTATE is a data-dependent run-time error. PostgreSQL also raises
/// 0A000 for some values (`cannot convert infinity to bigint`); walrus's 0A000 is a
/// refusal and never gets here.
fn data_error(code: &str) -> bool {
    code.starts_with("22") || code == "21000" || code == REFUSED
}

/// The refusal message reduced to its feature: up to the first literal or argument list.
pub fn refusal_feature(message: &str) -> String {
    let cut = message.find(['\'', '(', '"']).unwrap_or(message.len());
    let mut s = message[..cut].trim().to_string();
    if s.len() > 70 {
        let mut end = 70;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// How rows compare: as an ordered list, as a multiset, or only by count (LIMIT without
/// a total order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowOrder {
    Ordered,
    Multiset,
    CountOnly,
}

fn rows_equal(a: &[String], b: &[String], order: RowOrder) -> bool {
    match order {
        RowOrder::Ordered => a == b,
        RowOrder::CountOnly => a.len() == b.len(),
        RowOrder::Multiset => {
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            a.sort();
            b.sort();
            a == b
        }
    }
}

/// What the comparison may ignore.
#[derive(Clone, Debug)]
pub struct Lenience {
    /// Result column types walrus declares `text` in the extended protocol where
    /// PostgreSQL declares another (the `describe_text_fallback` switch off).
    pub describe_text_fallback: bool,
    /// Columns (simple protocol) holding numeric or float8 values where the query picks
    /// one of several equal values: compared by value (0 = 0.000 = -0).
    pub by_value: Vec<bool>,
    /// Columns (simple protocol) of float8 compared by their parsed value, not their
    /// text (the `float_text_format` switch off; the extended protocol's binary values
    /// still compare bit for bit).
    pub float_value: Vec<bool>,
}

/// A float8 in text as the value it parses to (its text when it does not parse).
fn canonical_float(s: &str) -> String {
    match s.parse::<f64>() {
        Ok(v) => format!("{v:e}"),
        Err(_) => s.to_string(),
    }
}

/// A numeric or float8 value in text, canonical: no trailing fraction zeros, no -0.
fn canonical_number(s: &str) -> String {
    let body = s.strip_prefix('-').unwrap_or(s);
    if body.is_empty() || !body.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return s.to_string();
    }
    let mut t = s.to_string();
    if t.contains('.') {
        while t.ends_with('0') {
            t.pop();
        }
        if t.ends_with('.') {
            t.pop();
        }
    }
    if t == "-0" {
        t = "0".into();
    }
    t
}

/// The same for a binary cell (hex) of a numeric (dscale dropped) or float8 (-0 as 0).
fn canonical_binary(hex: &str, oid: u32) -> String {
    if oid == Type::FLOAT8.oid() && hex == "8000000000000000" {
        return "0000000000000000".into();
    }
    if oid == Type::NUMERIC.oid() && hex.len() >= 16 {
        return format!("{}0000{}", &hex[..12], &hex[16..]);
    }
    hex.to_string()
}

/// Rows with the `by_value` cells canonical (`binary`: cells are hex of `oids`).
fn by_value(
    rows: &[String],
    cols: &[bool],
    floats: &[bool],
    binary: Option<&[u32]>,
) -> Vec<String> {
    rows.iter()
        .map(|r| {
            r.split('|')
                .enumerate()
                .map(|(i, c)| match binary {
                    Some(oids) if cols.iter().any(|b| *b) => {
                        canonical_binary(c, oids.get(i).copied().unwrap_or(0))
                    }
                    None => {
                        let float = floats.get(i).copied().unwrap_or(false);
                        let mut c = if float {
                            canonical_float(c)
                        } else {
                            c.to_string()
                        };
                        if cols.get(i).copied().unwrap_or(false) {
                            c = if float {
                                c.replace("-0e0", "0e0")
                            } else {
                                canonical_number(&c)
                            };
                        }
                        c
                    }
                    _ => c.to_string(),
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

fn message_of(o: &Outcome) -> String {
    match o {
        Outcome::Error { message, .. } => refusal_feature(message),
        Outcome::Rows { .. } => String::new(),
    }
}

/// Keeps the cells of each `|`-joined row whose column is not in `skip`.
fn mask(rows: &[String], skip: &[usize]) -> Vec<String> {
    if skip.is_empty() {
        return rows.to_vec();
    }
    rows.iter()
        .map(|r| {
            r.split('|')
                .enumerate()
                .filter(|(i, _)| !skip.contains(i))
                .map(|(_, c)| c)
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

fn compare(
    protocol: &str,
    pg: &Outcome,
    w: &Outcome,
    order: RowOrder,
    order_dependent: bool,
    lenience: &Lenience,
) -> Verdict {
    let sig = format!("{}|{}", message_of(pg), message_of(w));
    let wrong = |cat: String, detail: String| {
        let cat = format!("{protocol}{cat}");
        Verdict::Wrong(cat.clone(), detail, format!("{cat}|{sig}"))
    };
    match (pg, w) {
        (_, Outcome::Error { code, message }) if code == REFUSED && pg.code() != Some(REFUSED) => {
            Verdict::Refused(refusal_feature(message))
        }
        (
            Outcome::Error {
                code: a,
                message: ma,
            },
            Outcome::Error {
                code: b,
                message: mb,
            },
        ) => {
            if a == b {
                Verdict::Same
            } else if data_error(a) && data_error(b) && order_dependent {
                Verdict::EvalOrder
            } else {
                wrong(
                    format!("error {a} vs {b}"),
                    format!("PostgreSQL: {a} {ma}\nwalrus:     {b} {mb}"),
                )
            }
        }
        (Outcome::Error { code, message }, Outcome::Rows { rows, .. }) => {
            if data_error(code) && order_dependent {
                Verdict::EvalOrder
            } else {
                wrong(
                    format!("PostgreSQL error {code}, walrus rows"),
                    format!(
                        "PostgreSQL: {code} {message}\nwalrus:     {} rows: {}",
                        rows.len(),
                        preview(rows)
                    ),
                )
            }
        }
        (Outcome::Rows { rows, .. }, Outcome::Error { code, message }) => {
            if data_error(code) && order_dependent {
                Verdict::EvalOrder
            } else {
                wrong(
                    format!("walrus error {code}, PostgreSQL rows"),
                    format!(
                        "PostgreSQL: {} rows: {}\nwalrus:     {code} {message}",
                        rows.len(),
                        preview(rows)
                    ),
                )
            }
        }
        (
            Outcome::Rows {
                names: na,
                oids: oa,
                rows: ra,
            },
            Outcome::Rows {
                names: nb,
                oids: ob,
                rows: rb,
            },
        ) => {
            // Columns whose declared types differ: compared as a difference, or (text
            // fallback allowed) left out of the row comparison.
            let mut skip = Vec::new();
            let mut differs = false;
            for (i, (x, y)) in oa.iter().zip(ob).enumerate() {
                if x != y {
                    skip.push(i);
                    differs |= !(lenience.describe_text_fallback && *y == Type::TEXT.oid());
                }
            }
            if differs || oa.len() != ob.len() {
                let first = oa.iter().zip(ob).position(|(x, y)| x != y).unwrap_or(0);
                return wrong(
                    "column types".into(),
                    format!(
                        "PostgreSQL: {}\nwalrus:     {}",
                        type_list(oa),
                        type_list(ob)
                    ) + &format!("  (first difference: column {})", first + 1),
                );
            }
            if na != nb {
                return wrong(
                    "column names".into(),
                    format!("PostgreSQL: {na:?}\nwalrus:     {nb:?}"),
                );
            }
            let (ra, rb) = if lenience
                .by_value
                .iter()
                .chain(&lenience.float_value)
                .any(|b| *b)
            {
                let binary = (!protocol.is_empty()).then_some(oa.as_slice());
                let (v, f) = (&lenience.by_value, &lenience.float_value);
                (by_value(ra, v, f, binary), by_value(rb, v, f, binary))
            } else {
                (ra.clone(), rb.clone())
            };
            let (ra, rb) = (&mask(&ra, &skip), &mask(&rb, &skip));
            if !rows_equal(ra, rb, order) {
                let cat = if order == RowOrder::Ordered && rows_equal(ra, rb, RowOrder::Multiset) {
                    "row order"
                } else {
                    "rows"
                };
                return wrong(
                    cat.into(),
                    format!("PostgreSQL: {}\nwalrus:     {}", preview(ra), preview(rb)),
                );
            }
            Verdict::Same
        }
    }
}

fn preview(rows: &[String]) -> String {
    let mut v: Vec<&String> = rows.iter().take(12).collect();
    v.sort();
    let mut s = v
        .iter()
        .map(|r| format!("[{r}]"))
        .collect::<Vec<_>>()
        .join(" ");
    if rows.len() > 12 {
        s.push_str(&format!(" ... ({} rows)", rows.len()));
    }
    s
}

fn type_list(oids: &[u32]) -> String {
    oids.iter()
        .map(|o| match Type::from_oid(*o) {
            Some(t) => t.name().to_string(),
            None => o.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Judges walrus's answer against PostgreSQL's: the simple protocol first, then the
/// extended one (whose row values are binary).
pub fn judge(
    pg: &Answer,
    w: &Answer,
    order: RowOrder,
    order_dependent: bool,
    lenience: &Lenience,
) -> Verdict {
    match compare("", &pg.simple, &w.simple, order, order_dependent, lenience) {
        Verdict::Same => {}
        other => return other,
    }
    compare(
        "extended: ",
        &pg.ext,
        &w.ext,
        order,
        order_dependent,
        lenience,
    )
}
