//! COPY's text and CSV formats, byte for byte as PostgreSQL 15 reads and writes them
//! (`copyfromparse.c`, `copyto.c`).
//!
//! Reading is two steps. [`Splitter`] finds where each record ends in the data
//! received so far: a line end outside CSV quotes (so a quoted CSV field may span lines
//! and CopyData messages), with the line-end style fixed by the first line as
//! PostgreSQL does (`\n`, `\r\n` or `\r`; a stray other one is 22P04), and the `\.`
//! end-of-data marker. Then [`split_text`] / [`split_csv`] split one record into
//! [`Fields`] (one reused buffer): the text format's backslash escapes and `\N`, CSV's quotes (an unquoted
//! empty field is NULL, a quoted one the empty string).

use crate::error::{SqlError, SqlResult};

/// The line-end style of the data, fixed by its first line (PostgreSQL's `eol_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Eol {
    Nl,
    CrNl,
    Cr,
}

/// What [`Splitter::next`] found at the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// A record in `buf[..end]` (line end excluded); the next starts at `next`.
    /// `extra_lines`: newlines inside its quoted CSV fields (PostgreSQL counts them
    /// in the line number once the line-end style is known).
    Record {
        end: usize,
        next: usize,
        extra_lines: u64,
    },
    /// The end-of-data marker `\.`; in text format the data before it on its line,
    /// `buf[..end]`, is a last record when not empty.
    EndMarker { end: usize },
    /// No complete record yet: wait for more data.
    NeedMore,
}

/// Finds record boundaries in a COPY text or CSV stream; keeps the line-end style
/// and, while a record is incomplete, where its scan stopped (so data that arrives in
/// many messages is scanned once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Splitter {
    /// CSV quote and escape bytes; `None` for the text format.
    csv: Option<(u8, u8)>,
    eol: Option<Eol>,
    /// Where the scan of the incomplete record at the buffer's start stopped:
    /// position, inside quotes, last byte was an escape, newlines counted.
    resume: Option<(usize, bool, bool, u64)>,
}

/// 22P04 for a line end of the wrong style (PostgreSQL's messages and hints).
fn stray_line_end(cr: bool, csv: bool) -> SqlError {
    let (msg, hint) = match (cr, csv) {
        (true, false) => (
            "literal carriage return found in data",
            "Use \"\\r\" to represent carriage return.",
        ),
        (true, true) => (
            "unquoted carriage return found in data",
            "Use quoted CSV field to represent carriage return.",
        ),
        (false, false) => (
            "literal newline found in data",
            "Use \"\\n\" to represent newline.",
        ),
        (false, true) => (
            "unquoted newline found in data",
            "Use quoted CSV field to represent newline.",
        ),
    };
    SqlError::new("22P04", msg).with_hint(hint)
}

impl Splitter {
    pub(super) fn new(csv: Option<(u8, u8)>) -> Splitter {
        Splitter {
            csv,
            eol: None,
            resume: None,
        }
    }

    /// How many bytes at the start of `rest` the record scan passes over without a
    /// change of state: none of them is a line end, nor a backslash (text format; in
    /// CSV a backslash matters only at a line's start, `at_line_start`), nor the CSV
    /// quote or escape byte.
    fn plain_run(&self, rest: &[u8], at_line_start: bool) -> usize {
        let found = match self.csv {
            None => memchr::memchr3(b'\n', b'\r', b'\\', rest),
            Some((quote, escape)) if escape == quote => {
                if at_line_start && rest.first() == Some(&b'\\') {
                    return 0;
                }
                memchr::memchr3(b'\n', b'\r', quote, rest)
            }
            Some((quote, escape)) => {
                if at_line_start && rest.first() == Some(&b'\\') {
                    return 0;
                }
                rest.iter()
                    .position(|&b| b == b'\n' || b == b'\r' || b == quote || b == escape)
            }
        };
        found.unwrap_or(rest.len())
    }

    /// The record at the start of `buf`. `at_end`: no more data will come, so an
    /// unterminated last line is a record. Errors are 22P04 and belong to the record.
    pub(super) fn next(&mut self, buf: &[u8], at_end: bool) -> SqlResult<Next> {
        let (mut pos, mut in_quote, mut last_was_esc, mut extra_lines) =
            self.resume.take().unwrap_or((0, false, false, 0));
        let csv = self.csv.is_some();
        let need_more = |s: &mut Splitter, pos, in_quote, esc, lines| {
            s.resume = Some((pos, in_quote, esc, lines));
            Ok(Next::NeedMore)
        };
        loop {
            // Jump over a run of bytes that change nothing (most of every line) to the
            // next byte that may: a line end, a backslash (text), a quote or escape (CSV).
            let plain = self.plain_run(&buf[pos.min(buf.len())..], pos == 0);
            if plain > 0 {
                pos += plain;
                last_was_esc = false;
            }
            let Some(&c) = buf.get(pos) else {
                if !at_end {
                    return need_more(self, pos, in_quote, last_was_esc, extra_lines);
                }
                if pos == 0 {
                    return Ok(Next::EndMarker { end: 0 });
                }
                // The last line has no line end.
                return Ok(Next::Record {
                    end: pos,
                    next: pos,
                    extra_lines,
                });
            };
            if let Some((quote, escape)) = self.csv {
                // An escape equal to the quote is no escape here: the quote toggles.
                let escape = (escape != quote).then_some(escape);
                if in_quote && Some(c) == escape {
                    last_was_esc = !last_was_esc;
                }
                if c == quote && !last_was_esc {
                    in_quote = !in_quote;
                }
                if Some(c) != escape {
                    last_was_esc = false;
                }
                let embedded = match self.eol {
                    Some(Eol::Nl) => Some(b'\n'),
                    Some(_) => Some(b'\r'),
                    None => None,
                };
                if in_quote && Some(c) == embedded {
                    extra_lines += 1;
                }
            }
            if c == b'\r' && !in_quote {
                match self.eol {
                    None | Some(Eol::CrNl) => {
                        let Some(&after) = buf.get(pos + 1) else {
                            if !at_end {
                                return need_more(self, pos, in_quote, last_was_esc, extra_lines);
                            }
                            if self.eol == Some(Eol::CrNl) {
                                return Err(stray_line_end(true, csv));
                            }
                            self.eol = Some(Eol::Cr);
                            return Ok(Next::Record {
                                end: pos,
                                next: pos + 1,
                                extra_lines,
                            });
                        };
                        if after == b'\n' {
                            self.eol = Some(Eol::CrNl);
                            return Ok(Next::Record {
                                end: pos,
                                next: pos + 2,
                                extra_lines,
                            });
                        }
                        if self.eol == Some(Eol::CrNl) {
                            return Err(stray_line_end(true, csv));
                        }
                        self.eol = Some(Eol::Cr);
                    }
                    Some(Eol::Nl) => return Err(stray_line_end(true, csv)),
                    Some(Eol::Cr) => {}
                }
                return Ok(Next::Record {
                    end: pos,
                    next: pos + 1,
                    extra_lines,
                });
            }
            if c == b'\n' && !in_quote {
                if matches!(self.eol, Some(Eol::Cr | Eol::CrNl)) {
                    return Err(stray_line_end(false, csv));
                }
                self.eol = Some(Eol::Nl);
                return Ok(Next::Record {
                    end: pos,
                    next: pos + 1,
                    extra_lines,
                });
            }
            // In CSV only a `\.` alone at a line's start ends the data.
            if c == b'\\' && (!csv || pos == 0) {
                let Some(&c2) = buf.get(pos + 1) else {
                    if !at_end {
                        return need_more(self, pos, in_quote, last_was_esc, extra_lines);
                    }
                    pos += 1;
                    continue;
                };
                if c2 == b'.' {
                    match buf.get(pos + 2) {
                        None if !at_end => {
                            return need_more(self, pos, in_quote, last_was_esc, extra_lines)
                        }
                        Some(b'\r' | b'\n') => return Ok(Next::EndMarker { end: pos }),
                        // PostgreSQL 15 wants a line end after the marker.
                        None | Some(_) if !csv => {
                            return Err(SqlError::new("22P04", "end-of-copy marker corrupt"))
                        }
                        None | Some(_) => {}
                    }
                }
                if !csv {
                    // The escaped byte is data, even a line end.
                    pos += 2;
                    continue;
                }
            }
            pos += 1;
        }
    }
}

/// PostgreSQL's check of text in the database encoding (UTF8): valid UTF-8 without
/// NUL bytes; the error shows the offending character's bytes (`0xe2 0x82`).
pub(super) fn check_utf8(bytes: &[u8]) -> SqlResult<&str> {
    check_utf8_within(bytes, bytes)
}

/// [`check_utf8`] of `bytes`, a prefix of `data` ([`crate::value::check_utf8_within`],
/// shared with the server's protocol decoder).
pub(super) fn check_utf8_within<'a>(bytes: &'a [u8], data: &[u8]) -> SqlResult<&'a str> {
    crate::value::check_utf8_within(bytes, data)
}

/// One record's fields, decoded into one reused buffer: no allocation per field or
/// record once the buffers have grown to the widest record. A field is decoded into
/// `scratch` and joins `text` only once it is checked as UTF-8, so `text` is a
/// `String` and reading a field back needs no check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fields {
    /// The fields' decoded text (escapes resolved, CSV quotes removed), back to back.
    text: String,
    spans: Vec<Span>,
    /// The field being decoded (an escape can make any byte, so it is bytes until it
    /// is checked).
    scratch: Vec<u8>,
}

/// Where one field's text is in [`Fields::text`]; `None` for NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    range: Option<(usize, usize)>,
    /// CSV: the field had quotes (FORCE_NULL applies only to those).
    quoted: bool,
}

impl Fields {
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Field `i`'s text (`None`: NULL).
    pub(super) fn get(&self, i: usize) -> Option<&str> {
        let (start, end) = self.spans[i].range?;
        Some(&self.text[start..end])
    }

    pub(super) fn quoted(&self, i: usize) -> bool {
        self.spans[i].quoted
    }

    /// Makes field `i` NULL (CSV FORCE_NULL).
    pub(super) fn set_null(&mut self, i: usize) {
        self.spans[i].range = None;
    }

    /// Makes field `i` the text `value` (CSV FORCE_NOT_NULL gives a NULL field the NULL
    /// string as its value).
    pub(super) fn set_text(&mut self, i: usize, value: &str) {
        let start = self.text.len();
        self.text.push_str(value);
        self.spans[i].range = Some((start, self.text.len()));
    }

    fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.scratch.clear();
    }

    /// Ends the field decoded into `scratch`: a NULL one is dropped, any other checked
    /// as UTF-8 and appended to `text`.
    fn finish_field(&mut self, null: bool, quoted: bool) -> SqlResult<()> {
        let range = if null {
            None
        } else {
            let start = self.text.len();
            self.text.push_str(check_utf8(&self.scratch)?);
            Some((start, self.text.len()))
        };
        self.scratch.clear();
        self.spans.push(Span { range, quoted });
        Ok(())
    }

    /// The fields as owned strings (the header line, tests).
    pub(super) fn to_strings(&self) -> Vec<Option<String>> {
        (0..self.len())
            .map(|i| self.get(i).map(str::to_string))
            .collect()
    }
}

/// Splits a text-format record into fields (see [`split_text`]), as owned strings.
#[cfg(test)]
pub(super) fn text_fields(
    line: &[u8],
    delimiter: u8,
    null: &[u8],
) -> SqlResult<Vec<Option<String>>> {
    let mut fields = Fields::default();
    split_text(line, delimiter, null, &mut fields)?;
    Ok(fields.to_strings())
}

/// Splits a text-format record into `fields`: a field whose raw text is the NULL string
/// is NULL; backslash escapes (`\t`, `\n`, `\\`, octal `\ooo`, hex `\xhh`, `\b \f \r
/// \v`, any other byte itself) are resolved; a backslash ending the line is dropped.
/// Each field is checked as UTF-8 (an escape can make any byte).
pub(super) fn split_text(
    line: &[u8],
    delimiter: u8,
    null: &[u8],
    fields: &mut Fields,
) -> SqlResult<()> {
    fields.clear();
    let mut i = 0;
    loop {
        let start = i;
        let mut ended_by_delimiter = false;
        while i < line.len() {
            // Plain bytes up to the next delimiter or backslash go in as one slice.
            let plain = line[i..]
                .iter()
                .position(|&b| b == delimiter || b == b'\\')
                .unwrap_or(line.len() - i);
            fields.scratch.extend_from_slice(&line[i..i + plain]);
            i += plain;
            let Some(&c) = line.get(i) else { break };
            i += 1;
            if c == delimiter {
                ended_by_delimiter = true;
                break;
            }
            let Some(&e) = line.get(i) else { break };
            i += 1;
            let byte = match e {
                b'0'..=b'7' => {
                    let mut v = (e - b'0') as u32;
                    for _ in 0..2 {
                        match line.get(i) {
                            Some(d @ b'0'..=b'7') => {
                                v = v * 8 + (d - b'0') as u32;
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    (v & 0xff) as u8
                }
                b'x' => match line.get(i).and_then(|d| (*d as char).to_digit(16)) {
                    Some(h) => {
                        i += 1;
                        match line.get(i).and_then(|d| (*d as char).to_digit(16)) {
                            Some(l) => {
                                i += 1;
                                (h * 16 + l) as u8
                            }
                            None => h as u8,
                        }
                    }
                    None => b'x',
                },
                b'b' => 8,
                b'f' => 12,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'v' => 11,
                other => other,
            };
            fields.scratch.push(byte);
        }
        let raw_end = if ended_by_delimiter { i - 1 } else { i };
        let is_null = &line[start..raw_end] == null;
        fields.finish_field(is_null, false)?;
        if !ended_by_delimiter {
            return Ok(());
        }
    }
}

/// Splits a CSV record into fields (see [`split_csv`]), as owned strings with their
/// `(was quoted)` flag.
#[cfg(test)]
pub(super) fn csv_fields(
    line: &[u8],
    delimiter: u8,
    quote: u8,
    escape: u8,
    null: &[u8],
) -> SqlResult<Vec<(Option<String>, bool)>> {
    let mut fields = Fields::default();
    split_csv(line, delimiter, quote, escape, null, &mut fields)?;
    Ok((0..fields.len())
        .map(|i| (fields.get(i).map(str::to_string), fields.quoted(i)))
        .collect())
}

/// Splits a CSV record into `fields`, each with the `(was quoted)` flag FORCE_NULL
/// needs: inside quotes the escape byte before a quote or an escape stands for that
/// byte; an unquoted field equal to the NULL string is NULL. Each field is checked as
/// UTF-8.
pub(super) fn split_csv(
    line: &[u8],
    delimiter: u8,
    quote: u8,
    escape: u8,
    null: &[u8],
    fields: &mut Fields,
) -> SqlResult<()> {
    fields.clear();
    let mut i = 0;
    loop {
        let start = i;
        let mut saw_quote = false;
        let mut ended_by_delimiter = false;
        'field: while i < line.len() {
            let c = line[i];
            i += 1;
            if c == delimiter {
                ended_by_delimiter = true;
                break;
            }
            if c != quote {
                fields.scratch.push(c);
                continue;
            }
            saw_quote = true;
            loop {
                let Some(&c) = line.get(i) else {
                    return Err(SqlError::new("22P04", "unterminated CSV quoted field"));
                };
                i += 1;
                if c == escape {
                    if let Some(&n) = line.get(i).filter(|&&n| n == escape || n == quote) {
                        fields.scratch.push(n);
                        i += 1;
                        continue;
                    }
                }
                if c == quote {
                    continue 'field;
                }
                fields.scratch.push(c);
            }
        }
        let raw_end = if ended_by_delimiter { i - 1 } else { i };
        let is_null = !saw_quote && &line[start..raw_end] == null;
        fields.finish_field(is_null, saw_quote)?;
        if !ended_by_delimiter {
            return Ok(());
        }
    }
}

/// Appends `value` in the text format: backslash, the delimiter and control
/// characters escaped as PostgreSQL's `CopyAttributeOutText` does.
pub(super) fn text_out(value: &str, delimiter: u8, out: &mut Vec<u8>) {
    for &c in value.as_bytes() {
        let escaped = match c {
            8 => Some(b'b'),
            12 => Some(b'f'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            11 => Some(b'v'),
            b'\\' => Some(b'\\'),
            c if c == delimiter => Some(c),
            _ => None,
        };
        match escaped {
            Some(e) => out.extend_from_slice(&[b'\\', e]),
            None => out.push(c),
        }
    }
}

/// Appends `value` as a CSV field: quoted when forced, when it equals the NULL string
/// (so it reads back as a value), when it holds the delimiter, the quote or a line
/// end, or when it is `\.` alone in a one-column row; inside quotes the quote and
/// escape bytes are preceded by the escape byte.
pub(super) fn csv_out(
    value: &str,
    force: bool,
    single_column: bool,
    opts: &crate::utility::CopyOptions,
    out: &mut Vec<u8>,
) {
    let b = value.as_bytes();
    let quote = force
        || value == opts.null
        || (single_column && value == "\\.")
        || b.iter()
            .any(|&c| c == opts.delimiter || c == opts.quote || c == b'\n' || c == b'\r');
    if !quote {
        out.extend_from_slice(b);
        return;
    }
    out.push(opts.quote);
    for &c in b {
        if c == opts.quote || c == opts.escape {
            out.push(opts.escape);
        }
        out.push(c);
    }
    out.push(opts.quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utility::copy::parse;

    /// All records of `data` given in pieces of `step` bytes, as the connection feeds
    /// CopyData messages.
    fn records(csv: Option<(u8, u8)>, data: &[u8], step: usize) -> SqlResult<Vec<Vec<u8>>> {
        let mut sp = Splitter::new(csv);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            let at_end = fed == data.len();
            match sp.next(&buf, at_end)? {
                Next::Record { end, next, .. } => {
                    out.push(buf[..end].to_vec());
                    buf.drain(..next);
                }
                Next::EndMarker { end } => {
                    if end > 0 {
                        out.push(buf[..end].to_vec());
                    }
                    return Ok(out);
                }
                Next::NeedMore => {
                    let to = (fed + step).min(data.len());
                    buf.extend_from_slice(&data[fed..to]);
                    fed = to;
                }
            }
        }
    }

    #[test]
    fn records_end_at_line_ends_outside_quotes_whatever_the_chunking() {
        let csv = Some((b'"', b'"'));
        let data = b"1,\"a\nb\"\r\n2,\"x\"\"y\"\r\n3,z";
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(
                records(csv, data, step).unwrap(),
                vec![
                    b"1,\"a\nb\"".to_vec(),
                    b"2,\"x\"\"y\"".to_vec(),
                    b"3,z".to_vec()
                ],
                "step {step}"
            );
        }
        // Text: an escaped line end is data; `\.` ends the data, after what precedes it.
        for step in [1, 4, 100] {
            assert_eq!(
                records(None, b"a\\\nb\nc\\.\nignored\n", step).unwrap(),
                vec![b"a\\\nb".to_vec(), b"c".to_vec()]
            );
        }
        // CSV: `\.` only at a line's start; elsewhere it is data.
        assert_eq!(
            records(csv, b"x\\.\n\\.\nz\n", 2).unwrap(),
            vec![b"x\\.".to_vec()]
        );
        // Bare-CR lines.
        assert_eq!(
            records(None, b"a\rb\r", 1).unwrap(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        // The style is fixed by the first line.
        let e = records(None, b"a\r\nb\nc", 100).unwrap_err();
        assert_eq!(
            (e.sqlstate, e.message.as_str()),
            ("22P04", "literal newline found in data")
        );
        let e = records(csv, b"a\nb\rc\n", 100).unwrap_err();
        assert_eq!(e.message, "unquoted carriage return found in data");
        let e = records(None, b"a\\.b\n", 100).unwrap_err();
        assert_eq!(e.message, "end-of-copy marker corrupt");
    }

    #[test]
    fn text_fields_resolve_escapes_and_null() {
        assert_eq!(
            text_fields(b"1\t\\N\ta\\tb\t\\101\\x41\\q\t", b'\t', b"\\N").unwrap(),
            vec![
                Some("1".into()),
                None,
                Some("a\tb".into()),
                Some("AAq".into()),
                Some("".into())
            ]
        );
        // An escaped delimiter is data; the NULL string is compared before unescaping.
        assert_eq!(
            text_fields(b"a\\,b,\\\\N,x", b',', b"\\N").unwrap(),
            vec![Some("a,b".into()), Some("\\N".into()), Some("x".into())]
        );
        assert_eq!(
            text_fields(b"", b'\t', b"\\N").unwrap(),
            vec![Some("".into())]
        );
        assert_eq!(
            text_fields(b"\\377", b'\t', b"\\N").unwrap_err().sqlstate,
            "22021"
        );
        // PostgreSQL's encoding errors name the bytes of the broken character.
        let msg = |b: &[u8], data: &[u8]| check_utf8_within(b, data).unwrap_err().message;
        assert_eq!(
            msg(b"a\xe2\x82", b"a\xe2\x82\n"),
            "invalid byte sequence for encoding \"UTF8\": 0xe2 0x82 0x0a"
        );
        assert_eq!(
            msg(b"a\0b", b"a\0b"),
            "invalid byte sequence for encoding \"UTF8\": 0x00"
        );
        assert_eq!(check_utf8("é".as_bytes()).unwrap(), "é");
    }

    #[test]
    fn csv_fields_follow_quotes() {
        let f = csv_fields(b"1,,\"\",\"a,\"\"b\"\"\nc\",x\"y\"z", b',', b'"', b'"', b"").unwrap();
        assert_eq!(
            f,
            vec![
                (Some("1".into()), false),
                (None, false),
                (Some("".into()), true),
                (Some("a,\"b\"\nc".into()), true),
                (Some("xyz".into()), true),
            ]
        );
        // A distinct escape only works inside quotes, before a quote or itself.
        let f = csv_fields(b"\"a\\\"b\\\\c\\d\",e\\f", b',', b'"', b'\\', b"").unwrap();
        assert_eq!(
            f,
            vec![
                (Some("a\"b\\c\\d".into()), true),
                (Some("e\\f".into()), false)
            ]
        );
        assert_eq!(
            csv_fields(b"\"abc", b',', b'"', b'"', b"")
                .unwrap_err()
                .message,
            "unterminated CSV quoted field"
        );
    }

    #[test]
    fn output_escapes_as_postgresql() {
        let mut out = Vec::new();
        text_out("a\tb\\c\nd\re\u{8}|", b'|', &mut out);
        assert_eq!(out, b"a\\tb\\\\c\\nd\\re\\b\\|");
        let opts = parse("copy t to stdout csv").unwrap().options;
        for (v, force, single, want) in [
            ("plain", false, false, "plain"),
            ("", false, false, "\"\""),
            ("a,b", false, false, "\"a,b\""),
            ("say \"hi\"", false, false, "\"say \"\"hi\"\"\""),
            ("x", true, false, "\"x\""),
            ("\\.", false, true, "\"\\.\""),
            ("\\.", false, false, "\\."),
        ] {
            let mut out = Vec::new();
            csv_out(v, force, single, &opts, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{v}");
        }
    }
}
