//! COPY data: loading (`COPY ... FROM STDIN`, [`CopyIn`]) and unloading (`COPY ... TO
//! STDOUT`, [`CopyOut`]) in the text, CSV and binary formats, as PostgreSQL 15 does.
//!
//! Loading is incremental: the connection hands over each CopyData message's bytes
//! ([`CopyIn::feed`]); complete records are decoded (`text.rs`, `binary.rs`),
//! converted to the columns' types with PostgreSQL's assignment rules, checked for
//! NOT NULL, held in a batch of up to `COPY_BATCH_ROWS` rows across messages and
//! written by the engine's batch insert; an incomplete record waits for the next
//! message. A text/CSV COPY of every column in table order writes each field straight
//! into the stored row encoding (`EncodedRows`: integers parsed from the bytes, text
//! copied as a slice, buffers reused row after row; `Transaction::insert_encoded`);
//! other fields and COPYs go through `Datum`s and [`load_rows`]. Errors name their place the way PostgreSQL's CONTEXT does
//! (`COPY t, line 3, column a: "x"`). A failed COPY writes nothing: the session ends
//! the statement as failed, which rolls back its transaction (or aborts the block).

mod binary;
mod text;

use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, EncodedRows, RowWriteError, RowWriter, TypeId};
use walrus_engine::catalog::{ColumnDef, DeclaredType, TableDef};
use walrus_engine::engine::Transaction;

use self::binary::BinaryNext;
use self::text::{Fields, Next, Splitter};
use crate::error::{SqlError, SqlResult};
use crate::expr::assign;
use crate::result::{Column, QueryResult};
use crate::utility::{CopyFormat, CopyOptions, ForceQuote, HeaderChoice};
use crate::value::{format_text_as, parse_text};

/// How much of a value or line an error's CONTEXT shows (PostgreSQL's
/// `MAX_COPY_DATA_DISPLAY`), cut at a character boundary and followed by `...`.
const CONTEXT_BYTES_MAX: usize = 100;

fn shown(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if s.len() <= CONTEXT_BYTES_MAX {
        return s.into_owned();
    }
    let mut cut = CONTEXT_BYTES_MAX;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

/// Why [`load_rows`] stopped: the error, and which row of the chunk failed when the
/// insert path can tell (the CONTEXT then names its line).
pub(crate) struct LoadFailure {
    pub(crate) row: Option<usize>,
    pub(crate) error: Box<SqlError>,
}

/// Inserts one batch of COPY rows (complete rows of the table, in column order): the one
/// place COPY writes, through the engine's batch insert (a heap page per WAL record).
/// Returns where the rows went.
pub(crate) fn load_rows(
    t: &mut Transaction,
    def: &TableDef,
    rows: &[Vec<Datum>],
    freeze: bool,
) -> Result<Vec<Tid>, LoadFailure> {
    let inserted = if freeze {
        t.insert_batch_frozen(def, rows)
    } else {
        t.insert_batch(def, rows)
    };
    match inserted {
        Ok(tids) => Ok(tids),
        Err(f) => Err(LoadFailure {
            row: Some(f.row),
            error: Box::new(SqlError::from(f.error)),
        }),
    }
}

/// Rows decoded and held for one batch insert: enough for many full pages per WAL
/// record batch even when a client sends one row per CopyData message (pgbench, psql),
/// few enough to keep a COPY's memory small.
const COPY_BATCH_ROWS: usize = 1000;

/// The table columns a COPY names (`columns` empty: all), as indexes; PostgreSQL's
/// errors for a missing or repeated one.
fn target_columns(def: &TableDef, columns: &[String]) -> SqlResult<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..def.columns.len()).collect());
    }
    let mut out: Vec<usize> = Vec::with_capacity(columns.len());
    for c in columns {
        let i = def.column_index(c).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!("column \"{c}\" of relation \"{}\" does not exist", def.name),
            )
        })?;
        if out.contains(&i) {
            return Err(SqlError::new(
                "42701",
                format!("column \"{c}\" specified more than once"),
            ));
        }
        out.push(i);
    }
    Ok(out)
}

/// For FORCE_NOT_NULL / FORCE_NULL / FORCE_QUOTE: which of the COPY's columns the
/// option names; each must be a column of the table and one the COPY moves.
fn forced(
    def: &TableDef,
    targets: &[usize],
    names: &[String],
    option: &str,
) -> SqlResult<Vec<bool>> {
    let mut flags = vec![false; targets.len()];
    for n in names {
        let ci = def.column_index(n).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!("column \"{n}\" of relation \"{}\" does not exist", def.name),
            )
        })?;
        let at = targets.iter().position(|&t| t == ci).ok_or_else(|| {
            SqlError::new(
                "42P10",
                format!("{option} column \"{n}\" not referenced by COPY"),
            )
        })?;
        flags[at] = true;
    }
    Ok(flags)
}

/// COPY table TO: the columns named and FORCE_QUOTE's must be the table's, and
/// FORCE_QUOTE's among those copied.
pub(crate) fn check_table_columns(
    def: &TableDef,
    columns: &[String],
    opts: &CopyOptions,
) -> SqlResult<()> {
    let targets = target_columns(def, columns)?;
    if let ForceQuote::Columns(names) = &opts.force_quote {
        forced(def, &targets, names, "FORCE_QUOTE")?;
    }
    Ok(())
}

/// How a text/CSV field becomes its column's stored bytes. The direct forms write the
/// field straight into the row encoding (no `Datum`, no allocation) for the inputs they
/// cover and hand anything else to `Convert`, PostgreSQL's input function and
/// assignment rules (`parse_text`, `assign`), which also gives every error: a direct
/// form never decides an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldInput {
    /// `-?[0-9]{1,18}` within the type's range; anything else converts.
    Int2,
    Int4,
    Int8,
    /// Unconstrained `text` / `varchar`: the field is the value.
    Text,
    /// `char(n)`: a field of at most `n` characters, blank-padded to `n`.
    Char(usize),
    /// `varchar(n)`: a field of at most `n` characters.
    Varchar(usize),
    Convert,
}

impl FieldInput {
    fn for_column(col: &ColumnDef) -> FieldInput {
        let limit = (col.typmod >= 4).then(|| (col.typmod - 4) as usize);
        match (col.ty, col.declared, limit) {
            (TypeId::Int2, _, _) => FieldInput::Int2,
            (TypeId::Int4, _, _) => FieldInput::Int4,
            (TypeId::Int8, _, _) => FieldInput::Int8,
            (TypeId::Text, DeclaredType::Char, Some(n)) => FieldInput::Char(n),
            (TypeId::Text, DeclaredType::Char, None) => FieldInput::Convert,
            (TypeId::Text, _, Some(n)) => FieldInput::Varchar(n),
            (TypeId::Text, _, None) => FieldInput::Text,
            _ => FieldInput::Convert,
        }
    }
}

/// A field that is an optional `-` and 1 to 18 ASCII digits, as an i64 (what Rust's
/// and PostgreSQL's integer input both read the same way); `None` for anything else.
fn plain_integer(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (d - b'0') as i64;
    }
    Some(if negative { -v } else { v })
}

/// Characters in `s` (bytes when ASCII).
fn char_count(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// Writes one field's value into the row: directly when `how` covers it, else through
/// the input function and assignment (whose error is the field's).
fn write_field(
    w: &mut RowWriter<'_>,
    how: FieldInput,
    col: &ColumnDef,
    text: &str,
) -> SqlResult<()> {
    let written = match how {
        FieldInput::Int2 => plain_integer(text.as_bytes())
            .and_then(|v| i16::try_from(v).ok())
            .map(|v| w.int2(v)),
        FieldInput::Int4 => plain_integer(text.as_bytes())
            .and_then(|v| i32::try_from(v).ok())
            .map(|v| w.int4(v)),
        FieldInput::Int8 => plain_integer(text.as_bytes()).map(|v| w.int8(v)),
        FieldInput::Text => Some(w.text(text)),
        FieldInput::Char(n) => {
            let len = char_count(text);
            (len <= n).then(|| w.text_padded(text, n - len))
        }
        FieldInput::Varchar(n) => (char_count(text) <= n).then(|| w.text(text)),
        FieldInput::Convert => None,
    };
    let written = match written {
        Some(direct) => direct,
        None => {
            let v = parse_text(col.ty, text).and_then(|v| assign(v, col))?;
            w.datum(&v)
        }
    };
    written.map_err(|e| SqlError::new("XX000", format!("COPY row encoding: {e}")))
}

/// A `COPY ... FROM STDIN` in progress: the table, the options, and the data received
/// but not yet decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyIn {
    def: TableDef,
    /// The table column each field goes to.
    targets: Vec<usize>,
    opts: CopyOptions,
    force_not_null: Vec<bool>,
    force_null: Vec<bool>,
    /// Received bytes not yet decoded (an incomplete record).
    pending: Vec<u8>,
    splitter: Splitter,
    binary_header_read: bool,
    /// The current record's line number (PostgreSQL's `cur_lineno`).
    lineno: u64,
    loaded: u64,
    /// The current text/CSV record's fields (buffers reused record after record).
    fields: Fields,
    /// Text/CSV naming every column in table order: rows are written straight into
    /// the stored encoding here (per column as `inputs` says) instead of `batch`.
    encoded: Option<EncodedRows>,
    inputs: Vec<FieldInput>,
    /// Rows decoded but not yet written (the other cases), and the line number of each
    /// row held here or in `encoded` (for CONTEXT).
    batch: Vec<Vec<Datum>>,
    batch_lines: Vec<u64>,
    /// The end-of-data marker (text/CSV `\.`, the binary trailer) has been read.
    ended: bool,
    /// The error that ended loading; the data that follows is read and dropped.
    failed: Option<SqlError>,
    /// The table's CHECK and FOREIGN KEY constraints: rows are checked before they
    /// are written, and their references when the COPY ends.
    constraints: Option<crate::exec::constraints::TableConstraints>,
    pub(crate) fk_work: crate::exec::constraints::FkWork,
    /// The statement's clock, for CHECK expressions that read it.
    now: i64,
}

/// `COPY t, line n`: PostgreSQL's CONTEXT for a record.
fn record_context(table: &str, lineno: u64) -> String {
    format!("COPY {table}, line {lineno}")
}

/// `COPY t, line n: "<line>"`.
fn line_context(table: &str, lineno: u64, line: &[u8]) -> String {
    format!("{}: \"{}\"", record_context(table, lineno), shown(line))
}

/// `COPY t, line n, column c: "<value>"`.
fn field_context(table: &str, lineno: u64, column: &str, text: &str) -> String {
    format!(
        "{}, column {column}: \"{}\"",
        record_context(table, lineno),
        shown(text.as_bytes())
    )
}

impl CopyIn {
    /// Checks the columns and options against the table; nothing is read yet.
    /// `now` is the statement's clock (CHECK constraints may read it).
    pub(crate) fn begin(
        def: TableDef,
        columns: &[String],
        opts: CopyOptions,
        now: i64,
    ) -> SqlResult<CopyIn> {
        let targets = target_columns(&def, columns)?;
        // A column COPY leaves out gets its default in PostgreSQL; walrus's COPY does not
        // evaluate defaults, so it refuses rather than write NULL there.
        if let Some(i) =
            (0..def.columns.len()).find(|i| !targets.contains(i) && def.default_of(*i).is_some())
        {
            return Err(SqlError::unsupported(format!(
                "COPY that leaves out column \"{}\", which has a default, is not supported",
                def.columns[i].name
            )));
        }
        let force_not_null = forced(&def, &targets, &opts.force_not_null, "FORCE_NOT_NULL")?;
        let force_null = forced(&def, &targets, &opts.force_null, "FORCE_NULL")?;
        let csv = (opts.format == CopyFormat::Csv).then_some((opts.quote, opts.escape));
        // Fields are converted in their order in the data; writing them straight into
        // the row encoding (column order) keeps errors in that order only when the
        // two orders are the same.
        let in_table_order = targets.iter().copied().eq(0..def.columns.len());
        // Constraints read the rows' values: the decoded path.
        let constraints = crate::exec::constraints::TableConstraints::of(&def)?;
        let encoded = (opts.format != CopyFormat::Binary
            && in_table_order
            && constraints.is_none())
        .then(|| {
            EncodedRows::new(
                def.types(),
                def.columns.iter().map(|c| c.not_null).collect(),
            )
        });
        let inputs = def.columns.iter().map(FieldInput::for_column).collect();
        Ok(CopyIn {
            def,
            targets,
            force_not_null,
            force_null,
            pending: Vec::new(),
            splitter: Splitter::new(csv),
            binary_header_read: false,
            lineno: 0,
            loaded: 0,
            fields: Fields::default(),
            encoded,
            inputs,
            batch: Vec::new(),
            batch_lines: Vec::new(),
            ended: false,
            failed: None,
            constraints,
            fk_work: Default::default(),
            now,
            opts,
        })
    }

    /// Whether the data is in the binary format (CopyInResponse says so).
    pub fn binary(&self) -> bool {
        self.opts.format == CopyFormat::Binary
    }

    /// How many columns the data carries.
    pub fn column_count(&self) -> usize {
        self.targets.len()
    }

    /// Bytes held waiting for the rest of their record.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// The error that stopped the loading, if one did.
    pub(crate) fn take_error(&mut self) -> Option<SqlError> {
        self.failed.take()
    }

    pub(crate) fn loaded(&self) -> u64 {
        self.loaded
    }

    fn context(&self) -> String {
        record_context(&self.def.name, self.lineno)
    }

    fn line_context(&self, line: &[u8]) -> String {
        line_context(&self.def.name, self.lineno, line)
    }

    /// Rows decoded and not yet written.
    fn held_rows(&self) -> usize {
        self.batch_lines.len()
    }

    /// Takes `data` (one CopyData message; `at_end`: CopyDone came, no more follows),
    /// decodes the complete records and writes them. After an error everything is
    /// dropped; [`CopyIn::take_error`] tells it.
    pub(crate) fn feed(&mut self, t: &mut Transaction, data: &[u8], at_end: bool) {
        if self.failed.is_some() {
            return;
        }
        if self.ended {
            if self.binary() && !data.is_empty() {
                self.failed = Some(
                    SqlError::new("22P04", "received copy data after EOF marker")
                        .with_context(self.context()),
                );
            }
            return;
        }
        self.pending.extend_from_slice(data);
        let decoded = if self.binary() {
            self.decode_binary(at_end)
        } else {
            self.decode_text(at_end)
        };
        // Rows decoded before a bad record are written first: their errors come first,
        // as in a row-by-row load.
        if decoded.is_err() || at_end || self.ended || self.held_rows() >= COPY_BATCH_ROWS {
            if let Err(e) = self.flush(t) {
                self.fail(e);
                return;
            }
        }
        if let Err(e) = decoded {
            self.fail(e);
        }
    }

    /// Writes the rows held.
    fn flush(&mut self, t: &mut Transaction) -> Result<(), SqlError> {
        let written = match &mut self.encoded {
            Some(rows) => {
                let written = t
                    .insert_encoded(&self.def, rows, self.opts.freeze)
                    .map_err(|f| LoadFailure {
                        row: Some(f.row),
                        error: Box::new(SqlError::from(f.error)),
                    });
                rows.clear();
                written
            }
            None => {
                let rows = std::mem::take(&mut self.batch);
                match self.constraints.take() {
                    None => load_rows(t, &self.def, &rows, self.opts.freeze)
                        .map(|tids| tids.len() as u64),
                    Some(c) => {
                        let loaded = self.load_checked(t, &c, &rows);
                        self.constraints = Some(c);
                        loaded
                    }
                }
            }
        };
        let lines = std::mem::take(&mut self.batch_lines);
        match written {
            Ok(n) => {
                self.loaded += n;
                self.batch_lines = lines;
                self.batch_lines.clear();
                Ok(())
            }
            Err(LoadFailure { row, error }) => {
                let context = match row {
                    Some(i) => record_context(&self.def.name, lines[i]),
                    None => format!("COPY {}", self.def.name),
                };
                Err(error.with_context(context))
            }
        }
    }

    pub(crate) fn fail(&mut self, e: SqlError) {
        self.failed = Some(e);
        self.pending = Vec::new();
    }

    /// A batch into a table with constraints: each row's CHECKs first, then the batch
    /// insert, and each written row's foreign keys queued for the COPY's end.
    fn load_checked(
        &mut self,
        t: &mut Transaction,
        c: &crate::exec::constraints::TableConstraints,
        rows: &[Vec<Datum>],
    ) -> Result<u64, LoadFailure> {
        let scope = crate::expr::Scope::bare(&[], None, self.now);
        for (i, r) in rows.iter().enumerate() {
            c.check_row(r, &scope).map_err(|e| LoadFailure {
                row: Some(i),
                error: Box::new(e),
            })?;
        }
        let tids = load_rows(t, &self.def, rows, self.opts.freeze)?;
        for (tid, r) in tids.iter().zip(rows) {
            c.inserted(&mut self.fk_work, *tid, r);
        }
        Ok(tids.len() as u64)
    }

    /// Text and CSV: the complete records in `pending`.
    fn decode_text(&mut self, at_end: bool) -> SqlResult<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut consumed = 0;
        let result = loop {
            let buf = &pending[consumed..];
            let (line, next) = match self.splitter.next(buf, at_end) {
                Ok(Next::NeedMore) => break Ok(()),
                Ok(Next::Record {
                    end,
                    next,
                    extra_lines,
                }) => {
                    self.lineno += 1 + extra_lines;
                    (&buf[..end], next)
                }
                Ok(Next::EndMarker { end }) => {
                    self.ended = true;
                    consumed = pending.len();
                    if end == 0 {
                        break Ok(());
                    }
                    self.lineno += 1;
                    (&buf[..end], buf.len())
                }
                Err(e) => {
                    self.lineno += 1;
                    break Err(e.with_context(self.context()));
                }
            };
            // The line is checked as text before its fields are read, as PostgreSQL
            // converts each line from the client encoding.
            if let Err(e) = text::check_utf8_within(line, buf) {
                break Err(e.with_context(self.context()));
            }
            let read = if self.lineno == 1 && self.opts.header != HeaderChoice::Absent {
                self.check_header(line)
            } else {
                self.text_row(line)
            };
            if let Err(e) = read {
                break Err(e);
            }
            if self.ended {
                break Ok(());
            }
            consumed += next;
        };
        self.pending = pending;
        self.pending.drain(..consumed.min(self.pending.len()));
        result
    }

    /// Splits the record into `self.fields` (text or CSV), with the CSV FORCE options
    /// applied.
    fn split_fields(&mut self, line: &[u8]) -> SqlResult<()> {
        let o = &self.opts;
        let null = o.null.as_bytes();
        if o.format != CopyFormat::Csv {
            return text::split_text(line, o.delimiter, null, &mut self.fields);
        }
        text::split_csv(line, o.delimiter, o.quote, o.escape, null, &mut self.fields)?;
        for i in 0..self.fields.len() {
            match self.fields.get(i) {
                None if self.force_not_null.get(i) == Some(&true) => {
                    self.fields.set_text(i, &o.null)
                }
                Some(s)
                    if self.fields.quoted(i)
                        && self.force_null.get(i) == Some(&true)
                        && s == o.null =>
                {
                    self.fields.set_null(i)
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `HEADER`: skip the first line, or with `MATCH` check it names the columns.
    fn check_header(&mut self, line: &[u8]) -> SqlResult<()> {
        self.split_fields(line)
            .map_err(|e| e.with_context(self.line_context(line)))?;
        let ctx = |e: SqlError| e.with_context(self.line_context(line));
        if self.opts.header != HeaderChoice::Match {
            return Ok(());
        }
        let fields = self.fields.to_strings();
        if fields.len() != self.targets.len() {
            return Err(ctx(SqlError::new(
                "22P04",
                format!(
                    "wrong number of fields in header line: got {}, expected {}",
                    fields.len(),
                    self.targets.len()
                ),
            )));
        }
        for (i, (f, &ci)) in fields.iter().zip(&self.targets).enumerate() {
            let expected = &self.def.columns[ci].name;
            match f {
                None => {
                    return Err(ctx(SqlError::new(
                        "22P04",
                        format!(
                            "column name mismatch in header line field {}: got null value (\"{}\"), expected \"{expected}\"",
                            i + 1,
                            self.opts.null
                        ),
                    )))
                }
                Some(name) if name != expected => {
                    return Err(ctx(SqlError::new(
                        "22P04",
                        format!(
                            "column name mismatch in header line field {}: got \"{name}\", expected \"{expected}\"",
                            i + 1
                        ),
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// One text/CSV record as a table row, held for the next batch, with PostgreSQL's
    /// errors and their context.
    fn text_row(&mut self, line: &[u8]) -> SqlResult<()> {
        self.split_fields(line)
            .map_err(|e| e.with_context(self.line_context(line)))?;
        if self.fields.len() > self.targets.len() {
            return Err(
                SqlError::new("22P04", "extra data after last expected column")
                    .with_context(self.line_context(line)),
            );
        }
        if self.encoded.is_some() {
            self.encode_row(line)?;
        } else {
            let row = self.datum_row(line)?;
            self.batch.push(row);
        }
        self.batch_lines.push(self.lineno);
        Ok(())
    }

    /// The split record written straight into the stored row encoding (the fields are
    /// every column, in table order).
    fn encode_row(&mut self, line: &[u8]) -> SqlResult<()> {
        let CopyIn {
            def,
            fields,
            encoded,
            inputs,
            lineno,
            ..
        } = self;
        let (table, lineno) = (def.name.as_str(), *lineno);
        let Some(rows) = encoded.as_mut() else {
            return Err(SqlError::new("XX000", "COPY row encoding: no row buffer"));
        };
        let mut w = rows.start_row();
        for (ci, (col, &how)) in def.columns.iter().zip(inputs.iter()).enumerate() {
            if ci >= fields.len() {
                return Err(SqlError::new(
                    "22P04",
                    format!("missing data for column \"{}\"", col.name),
                )
                .with_context(line_context(table, lineno, line)));
            }
            match fields.get(ci) {
                None => w
                    .null()
                    .map_err(|e| SqlError::new("XX000", format!("COPY row encoding: {e}")))?,
                Some(text) => write_field(&mut w, how, col, text)
                    .map_err(|e| e.with_context(field_context(table, lineno, &col.name, text)))?,
            }
        }
        w.finish().map_err(|e| {
            let error = match e {
                RowWriteError::NotNull(c) => {
                    SqlError::from(walrus_engine::Error::NotNullViolation {
                        column: def.columns[c].name.clone(),
                        table: def.name.clone(),
                    })
                }
                other => SqlError::new("XX000", format!("COPY row encoding: {other}")),
            };
            error.with_context(line_context(table, lineno, line))
        })
    }

    /// The split record as a row of `Datum`s (COPY naming some columns, or in another
    /// order).
    fn datum_row(&self, line: &[u8]) -> SqlResult<Vec<Datum>> {
        let mut row = vec![Datum::Null; self.def.columns.len()];
        for (i, &ci) in self.targets.iter().enumerate() {
            let col = &self.def.columns[ci];
            if i >= self.fields.len() {
                return Err(SqlError::new(
                    "22P04",
                    format!("missing data for column \"{}\"", col.name),
                )
                .with_context(self.line_context(line)));
            }
            let Some(text) = self.fields.get(i) else {
                continue;
            };
            row[ci] = parse_text(col.ty, text)
                .and_then(|v| assign(v, col))
                .map_err(|e| {
                    e.with_context(field_context(&self.def.name, self.lineno, &col.name, text))
                })?;
        }
        self.check_not_null(&row)
            .map_err(|e| e.with_context(self.line_context(line)))?;
        Ok(row)
    }

    /// NOT NULL, checked per row as PostgreSQL's executor does before the row is
    /// queued, so the error names the line with its text.
    fn check_not_null(&self, row: &[Datum]) -> SqlResult<()> {
        for (c, v) in self.def.columns.iter().zip(row) {
            if c.not_null && matches!(v, Datum::Null) {
                return Err(SqlError::from(walrus_engine::Error::NotNullViolation {
                    column: c.name.clone(),
                    table: self.def.name.clone(),
                }));
            }
        }
        Ok(())
    }

    /// Binary: the header once, then the complete tuples in `pending`.
    fn decode_binary(&mut self, at_end: bool) -> SqlResult<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut consumed = 0;
        let result = (|| {
            if !self.binary_header_read {
                // PostgreSQL reads the header before its error context is set: no
                // CONTEXT here.
                match binary::read_header(&pending, at_end)? {
                    None => return Ok(()),
                    Some(n) => {
                        consumed = n;
                        self.binary_header_read = true;
                    }
                }
            }
            loop {
                match binary::next_tuple(&pending[consumed..], at_end, self.targets.len()) {
                    Ok(BinaryNext::NeedMore) => return Ok(()),
                    Ok(BinaryNext::End) => {
                        self.ended = true;
                        consumed = pending.len();
                        return Ok(());
                    }
                    Ok(BinaryNext::Tuple { fields, next }) => {
                        self.lineno += 1;
                        let row = self.binary_row(&fields)?;
                        self.batch.push(row);
                        self.batch_lines.push(self.lineno);
                        consumed += next;
                    }
                    Err(e) => {
                        self.lineno += 1;
                        return Err(e.with_context(self.context()));
                    }
                }
            }
        })();
        self.pending = pending;
        self.pending.drain(..consumed.min(self.pending.len()));
        result
    }

    fn binary_row(&self, fields: &[Option<&[u8]>]) -> SqlResult<Vec<Datum>> {
        let mut row = vec![Datum::Null; self.def.columns.len()];
        for (f, &ci) in fields.iter().zip(&self.targets) {
            let col = &self.def.columns[ci];
            if let Some(bytes) = f {
                row[ci] = crate::binary::decode_type(bytes, col.ty)
                    .and_then(|v| assign(v, col))
                    .map_err(|e| {
                        e.with_context(format!("{}, column {}", self.context(), col.name))
                    })?;
            }
        }
        self.check_not_null(&row)
            .map_err(|e| e.with_context(self.context()))?;
        Ok(row)
    }
}

/// A `COPY ... TO STDOUT`: the rows, already computed, and how to write them.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyOut {
    opts: CopyOptions,
    result: QueryResult,
    force_quote: Vec<bool>,
}

impl CopyOut {
    /// `result`: the rows to write; `force_quote`: FORCE_QUOTE resolved against its
    /// columns' names (`what` names the relation in errors: `of relation "t"`, or
    /// empty for a query).
    pub(crate) fn new(opts: CopyOptions, result: QueryResult, what: &str) -> SqlResult<CopyOut> {
        let force_quote = match &opts.force_quote {
            ForceQuote::None => vec![false; result.columns.len()],
            ForceQuote::All => vec![true; result.columns.len()],
            ForceQuote::Columns(names) => {
                let mut flags = vec![false; result.columns.len()];
                for n in names {
                    let i = result
                        .columns
                        .iter()
                        .position(|c: &Column| &c.name == n)
                        .ok_or_else(|| {
                            SqlError::new("42703", format!("column \"{n}\"{what} does not exist"))
                        })?;
                    flags[i] = true;
                }
                flags
            }
        };
        Ok(CopyOut {
            opts,
            result,
            force_quote,
        })
    }

    pub fn binary(&self) -> bool {
        self.opts.format == CopyFormat::Binary
    }

    pub fn column_count(&self) -> usize {
        self.result.columns.len()
    }

    /// The `COPY n` command tag.
    pub fn tag(&self) -> String {
        format!("COPY {}", self.result.rows.len())
    }

    /// The CopyData payloads in order: the header (a line of column names, or the
    /// binary header with the first row), one per row, the binary trailer.
    pub fn messages(&self) -> impl Iterator<Item = SqlResult<Vec<u8>>> + '_ {
        let header = match self.opts.format {
            CopyFormat::Binary => None,
            _ if self.opts.header == HeaderChoice::Present => Some(Ok(self.header_line())),
            _ => None,
        };
        let rows = self.result.rows.iter().enumerate().map(|(i, r)| {
            let mut out = Vec::new();
            if self.binary() && i == 0 {
                binary::write_header(&mut out);
            }
            self.row(r, &mut out)?;
            Ok(out)
        });
        let trailer = self.binary().then(|| {
            let mut out = Vec::new();
            if self.result.rows.is_empty() {
                binary::write_header(&mut out);
            }
            binary::write_trailer(&mut out);
            Ok(out)
        });
        header.into_iter().chain(rows).chain(trailer)
    }

    fn header_line(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let single = self.result.columns.len() == 1;
        for (i, c) in self.result.columns.iter().enumerate() {
            if i > 0 {
                out.push(self.opts.delimiter);
            }
            if self.opts.format == CopyFormat::Csv {
                text::csv_out(&c.name, false, single, &self.opts, &mut out);
            } else {
                text::text_out(&c.name, self.opts.delimiter, &mut out);
            }
        }
        out.push(b'\n');
        out
    }

    fn row(&self, r: &[Datum], out: &mut Vec<u8>) -> SqlResult<()> {
        // Each value in the form of its column's described type (a catalog `oid` column
        // is 4 bytes, a `real` one prints as float4, `varchar[]` names element 1043).
        let type_oid = |i: usize| self.result.columns.get(i).map_or(0, |c| c.type_oid);
        if self.binary() {
            let values = r
                .iter()
                .enumerate()
                .map(|(i, d)| crate::binary::encode_as(d, type_oid(i)))
                .collect::<SqlResult<Vec<_>>>()?;
            binary::write_tuple(&values, out);
            return Ok(());
        }
        let single = r.len() == 1;
        for (i, d) in r.iter().enumerate() {
            if i > 0 {
                out.push(self.opts.delimiter);
            }
            match format_text_as(d, type_oid(i)) {
                None => out.extend_from_slice(self.opts.null.as_bytes()),
                Some(v) if self.opts.format == CopyFormat::Csv => {
                    text::csv_out(&v, self.force_quote[i], single, &self.opts, out)
                }
                Some(v) => text::text_out(&v, self.opts.delimiter, out),
            }
        }
        out.push(b'\n');
        Ok(())
    }
}
