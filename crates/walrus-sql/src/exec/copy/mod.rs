//! COPY data: loading (`COPY ... FROM STDIN`, [`CopyIn`]) and unloading (`COPY ... TO
//! STDOUT`, [`CopyOut`]) in the text, CSV and binary formats, as PostgreSQL 15 does.
//!
//! Loading is incremental: the connection hands over each CopyData message's bytes
//! ([`CopyIn::feed`]); complete records are decoded (`text.rs`, `binary.rs`),
//! converted to the columns' types with PostgreSQL's assignment rules, checked for
//! NOT NULL, held in a batch of up to `COPY_BATCH_ROWS` rows across messages and
//! written by [`load_rows`] (the engine's batch insert); an incomplete record waits for
//! the next message. Errors name their place the way PostgreSQL's CONTEXT does
//! (`COPY t, line 3, column a: "x"`). A failed COPY writes nothing: the session ends
//! the statement as failed, which rolls back its transaction (or aborts the block).

mod binary;
mod text;

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{DeclaredType, TableDef};
use walrus_engine::engine::Transaction;

use self::binary::BinaryNext;
use self::text::{Next, Splitter};
use crate::error::{SqlError, SqlResult};
use crate::expr::assign;
use crate::result::{Column, QueryResult};
use crate::utility::{CopyFormat, CopyOptions, ForceQuote, HeaderChoice};
use crate::value::{format_text, parse_text};

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
pub(crate) fn load_rows(
    t: &mut Transaction,
    def: &TableDef,
    rows: &[Vec<Datum>],
    freeze: bool,
) -> Result<u64, LoadFailure> {
    let inserted = if freeze {
        t.insert_batch_frozen(def, rows)
    } else {
        t.insert_batch(def, rows)
    };
    match inserted {
        Ok(tids) => Ok(tids.len() as u64),
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
    /// Rows decoded but not yet written, with their line numbers (for CONTEXT).
    batch: Vec<Vec<Datum>>,
    batch_lines: Vec<u64>,
    /// The end-of-data marker (text/CSV `\.`, the binary trailer) has been read.
    ended: bool,
    /// The error that ended loading; the data that follows is read and dropped.
    failed: Option<SqlError>,
}

impl CopyIn {
    /// Checks the columns and options against the table; nothing is read yet.
    pub(crate) fn begin(def: TableDef, columns: &[String], opts: CopyOptions) -> SqlResult<CopyIn> {
        let targets = target_columns(&def, columns)?;
        let force_not_null = forced(&def, &targets, &opts.force_not_null, "FORCE_NOT_NULL")?;
        let force_null = forced(&def, &targets, &opts.force_null, "FORCE_NULL")?;
        let csv = (opts.format == CopyFormat::Csv).then_some((opts.quote, opts.escape));
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
            batch: Vec::new(),
            batch_lines: Vec::new(),
            ended: false,
            failed: None,
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
        format!("COPY {}, line {}", self.def.name, self.lineno)
    }

    fn line_context(&self, line: &[u8]) -> String {
        format!("{}: \"{}\"", self.context(), shown(line))
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
        let mut rows = Vec::new();
        let mut lines = Vec::new();
        let decoded = if self.binary() {
            self.decode_binary(at_end, &mut rows, &mut lines)
        } else {
            self.decode_text(at_end, &mut rows, &mut lines)
        };
        self.batch.append(&mut rows);
        self.batch_lines.append(&mut lines);
        // Rows decoded before a bad record are written first: their errors come first,
        // as in a row-by-row load.
        if decoded.is_err() || at_end || self.ended || self.batch.len() >= COPY_BATCH_ROWS {
            if let Err(e) = self.flush(t) {
                self.fail(e);
                return;
            }
        }
        if let Err(e) = decoded {
            self.fail(e);
        }
    }

    /// Writes the rows held in the batch.
    fn flush(&mut self, t: &mut Transaction) -> Result<(), SqlError> {
        let rows = std::mem::take(&mut self.batch);
        let lines = std::mem::take(&mut self.batch_lines);
        match load_rows(t, &self.def, &rows, self.opts.freeze) {
            Ok(n) => {
                self.loaded += n;
                Ok(())
            }
            Err(LoadFailure { row, error }) => {
                let context = match row {
                    Some(i) => format!("COPY {}, line {}", self.def.name, lines[i]),
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

    /// Text and CSV: the complete records in `pending`.
    fn decode_text(
        &mut self,
        at_end: bool,
        rows: &mut Vec<Vec<Datum>>,
        lines: &mut Vec<u64>,
    ) -> SqlResult<()> {
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
            if self.lineno == 1 && self.opts.header != HeaderChoice::Absent {
                if let Err(e) = self.check_header(line) {
                    break Err(e);
                }
            } else {
                match self.text_row(line) {
                    Ok(row) => {
                        rows.push(row);
                        lines.push(self.lineno);
                    }
                    Err(e) => break Err(e),
                }
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

    /// The record's fields (text or CSV), with the CSV FORCE options applied.
    fn fields(&self, line: &[u8]) -> SqlResult<Vec<Option<String>>> {
        let o = &self.opts;
        let null = o.null.as_bytes();
        let fields = if o.format == CopyFormat::Csv {
            text::csv_fields(line, o.delimiter, o.quote, o.escape, null)?
                .into_iter()
                .enumerate()
                .map(|(i, (v, quoted))| match v {
                    None if self.force_not_null.get(i) == Some(&true) => Some(o.null.clone()),
                    Some(s) if quoted && self.force_null.get(i) == Some(&true) && s == o.null => {
                        None
                    }
                    v => v,
                })
                .collect()
        } else {
            text::text_fields(line, o.delimiter, null)?
        };
        Ok(fields)
    }

    /// `HEADER`: skip the first line, or with `MATCH` check it names the columns.
    fn check_header(&self, line: &[u8]) -> SqlResult<()> {
        let ctx = |e: SqlError| e.with_context(self.line_context(line));
        let fields = self.fields(line).map_err(ctx)?;
        if self.opts.header != HeaderChoice::Match {
            return Ok(());
        }
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

    /// One text/CSV record as a table row, with PostgreSQL's errors and their context.
    fn text_row(&self, line: &[u8]) -> SqlResult<Vec<Datum>> {
        let fields = self
            .fields(line)
            .map_err(|e| e.with_context(self.line_context(line)))?;
        if fields.len() > self.targets.len() {
            return Err(
                SqlError::new("22P04", "extra data after last expected column")
                    .with_context(self.line_context(line)),
            );
        }
        let mut row = vec![Datum::Null; self.def.columns.len()];
        let mut fields = fields.into_iter();
        for &ci in &self.targets {
            let col = &self.def.columns[ci];
            let Some(field) = fields.next() else {
                return Err(SqlError::new(
                    "22P04",
                    format!("missing data for column \"{}\"", col.name),
                )
                .with_context(self.line_context(line)));
            };
            let Some(text) = field else { continue };
            if col.ty == TypeId::Text && col.typmod < 4 && col.declared != DeclaredType::Char {
                // Unconstrained text: the field is the value (what parse_text and
                // assign would copy).
                row[ci] = Datum::Text(text);
            } else {
                row[ci] = parse_text(col.ty, &text)
                    .and_then(|v| assign(v, col))
                    .map_err(|e| {
                        e.with_context(format!(
                            "{}, column {}: \"{}\"",
                            self.context(),
                            col.name,
                            shown(text.as_bytes())
                        ))
                    })?;
            }
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
    fn decode_binary(
        &mut self,
        at_end: bool,
        rows: &mut Vec<Vec<Datum>>,
        lines: &mut Vec<u64>,
    ) -> SqlResult<()> {
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
                        rows.push(self.binary_row(&fields)?);
                        lines.push(self.lineno);
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
        if self.binary() {
            let values = r
                .iter()
                .map(crate::binary::encode)
                .collect::<SqlResult<Vec<_>>>()?;
            binary::write_tuple(&values, out);
            return Ok(());
        }
        let single = r.len() == 1;
        for (i, d) in r.iter().enumerate() {
            if i > 0 {
                out.push(self.opts.delimiter);
            }
            match format_text(d) {
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
