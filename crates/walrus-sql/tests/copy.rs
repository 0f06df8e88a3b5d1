//! COPY through the session, as the server drives it: data in arbitrary pieces, errors
//! with PostgreSQL's CONTEXT, nothing kept from a failed COPY, COPY TO in every format,
//! and binary data written by COPY TO read back by COPY FROM. (Byte-for-byte
//! comparisons with PostgreSQL 15 through psql and psycopg are in
//! `crates/walrus/tests/drivers.rs`.)

mod common;

use common::{engine, err, ok};
use walrus_sql::{CopyIn, CopyOut, Outcome, Session, SqlError};

fn copy_in(s: &mut Session, sql: &str) -> CopyIn {
    match s.execute(sql, &[]).pop().unwrap() {
        Ok(Outcome::CopyIn(c)) => *c,
        other => panic!("{sql}: {other:?}"),
    }
}

fn copy_out(s: &mut Session, sql: &str) -> CopyOut {
    match s.execute(sql, &[]).pop().unwrap() {
        Ok(Outcome::CopyOut(c)) => *c,
        other => panic!("{sql}: {other:?}"),
    }
}

/// Loads `data` in pieces of `step` bytes; the `COPY n` tag or the error.
fn load(s: &mut Session, sql: &str, data: &[u8], step: usize) -> Result<String, SqlError> {
    let mut c = copy_in(s, sql);
    for piece in data.chunks(step) {
        s.copy_data(&mut c, piece);
    }
    s.copy_done(c).map(|q| q.tag)
}

fn all_out(c: &CopyOut) -> Vec<u8> {
    c.messages().flat_map(|m| m.unwrap()).collect()
}

fn text_rows(s: &mut Session, sql: &str) -> String {
    String::from_utf8(all_out(&copy_out(s, sql))).unwrap()
}

#[test]
fn csv_records_span_pieces_and_errors_keep_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table t (id int primary key, note text, v varchar(3))",
    );
    let csv = b"id,note,v\n1,\"a,\nb \"\"q\"\"\",x\n2,,\"\"\n3,\\.,\n";
    for step in [1, 2, 5, 1000] {
        ok(&mut s, "delete from t");
        assert_eq!(
            load(&mut s, "copy t from stdin with csv header", csv, step).unwrap(),
            "COPY 3",
            "step {step}"
        );
    }
    assert_eq!(
        text_rows(&mut s, "copy t to stdout"),
        "1\ta,\\nb \"q\"\tx\n2\t\\N\t\n3\t\\\\.\t\\N\n"
    );
    assert_eq!(
        text_rows(&mut s, "copy (select id, note from t where id < 3 order by id) to stdout (format csv, header, force_quote *)"),
        "id,note\n\"1\",\"a,\nb \"\"q\"\"\"\n\"2\",\n"
    );

    // A conversion error names the line and column; nothing of the COPY stays.
    let e1 = load(
        &mut s,
        "copy t from stdin",
        b"10\tok\tx\n11\tok\ttoo long\n",
        4,
    )
    .unwrap_err();
    assert_eq!(e1.sqlstate, "22001");
    assert_eq!(
        e1.context.as_deref(),
        Some("COPY t, line 2, column v: \"too long\"")
    );
    let e2 = load(&mut s, "copy t from stdin", b"12\tx\n", 100).unwrap_err();
    assert_eq!(
        (e2.sqlstate, e2.message.as_str(), e2.context.as_deref()),
        (
            "22P04",
            "missing data for column \"v\"",
            Some("COPY t, line 1: \"12\tx\"")
        )
    );
    // A duplicate key is found by the insert: the line, without its text.
    let e3 = load(&mut s, "copy t (id) from stdin", b"20\n1\n", 100).unwrap_err();
    assert_eq!(
        (e3.sqlstate, e3.context.as_deref()),
        ("23505", Some("COPY t, line 2"))
    );
    assert_eq!(
        text_rows(&mut s, "copy (select count(*) from t) to stdout"),
        "3\n"
    );

    assert_eq!(err(&mut s, "copy t (nosuch) from stdin"), "42703");
    assert_eq!(
        err(&mut s, "copy t from stdin (format csv, force_quote *)"),
        "0A000"
    );
    // In a block, a failed COPY aborts the block.
    ok(&mut s, "begin");
    assert!(load(&mut s, "copy t (id) from stdin", b"x\n", 100).is_err());
    assert_eq!(s.transaction_status(), b'E');
    ok(&mut s, "rollback");
    drop(s);
    e.shutdown().unwrap();
}

#[test]
fn binary_copy_out_reads_back_in() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table a (id int, s smallint, b bigint, f float8, n numeric(8,3), t text, \
         c char(3), ok boolean, d date, ts timestamp, tz timestamptz, by bytea, u uuid)",
    );
    ok(
        &mut s,
        "insert into a values (1, -2, 1099511627776, -1.5, 12.5, 'tab\there', 'x', true, \
         '2024-02-29', '2024-01-02 03:04:05.6', '2024-01-02 03:04:05+02', '\\x00ff', \
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'), \
         (2, null, null, null, null, null, null, null, null, null, null, null, null)",
    );
    let out = copy_out(&mut s, "copy a to stdout (format binary)");
    assert!(out.binary());
    assert_eq!(out.tag(), "COPY 2");
    let bytes = all_out(&out);
    assert!(bytes.starts_with(b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0"));
    assert!(bytes.ends_with(&[0xff, 0xff]));
    ok(
        &mut s,
        "create table b (id int, s smallint, b bigint, f float8, n numeric(8,3), t text, \
         c char(3), ok boolean, d date, ts timestamp, tz timestamptz, by bytea, u uuid)",
    );
    // Fed in 3-byte pieces: tuples and the header cross CopyData boundaries.
    assert_eq!(
        load(&mut s, "copy b from stdin with binary", &bytes, 3).unwrap(),
        "COPY 2"
    );
    assert_eq!(
        text_rows(&mut s, "copy (select * from a order by id) to stdout"),
        text_rows(&mut s, "copy (select * from b order by id) to stdout")
    );
    // Malformed binary data: PostgreSQL's 22P04s.
    let e1 = load(
        &mut s,
        "copy b from stdin (format binary)",
        b"PGCOPY\nxx",
        100,
    )
    .unwrap_err();
    assert_eq!(
        (e1.sqlstate, e1.message.as_str()),
        ("22P04", "COPY file signature not recognized")
    );
    let short = bytes[..bytes.len() - 7].to_vec();
    let e2 = load(&mut s, "copy b from stdin (format binary)", &short, 100).unwrap_err();
    assert_eq!(e2.message, "unexpected EOF in COPY data");
    // A 4-byte int4 field given 2 bytes: 22P03, naming the column.
    let mut wrong = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0".to_vec();
    wrong.extend_from_slice(&1i16.to_be_bytes());
    wrong.extend_from_slice(&2i32.to_be_bytes());
    wrong.extend_from_slice(&[0, 1]);
    wrong.extend_from_slice(&(-1i16).to_be_bytes());
    let e3 = load(
        &mut s,
        "copy b (id) from stdin (format binary)",
        &wrong,
        100,
    )
    .unwrap_err();
    assert_eq!(
        (e3.sqlstate, e3.context.as_deref()),
        ("22P03", Some("COPY b, line 1, column id"))
    );
    assert_eq!(
        text_rows(&mut s, "copy (select count(*) from b) to stdout"),
        "2\n"
    );
    drop(s);
    e.shutdown().unwrap();
}

/// COPY FREEZE as PostgreSQL 15 takes it: only into a table created or truncated in the
/// same transaction (55000 otherwise, before any data moves); there the rows load
/// (frozen, which the engine's tests check on the pages) and behave like any others;
/// `FREEZE false` and COPY TO with FREEZE are plain COPYs.
#[test]
fn copy_freeze_needs_a_table_of_this_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table f (a int primary key, b text)");
    assert_eq!(err(&mut s, "copy f from stdin with (freeze)"), "55000");
    assert_eq!(
        load(&mut s, "copy f from stdin (freeze false)", b"1\ta\n", 3).unwrap(),
        "COPY 1"
    );
    assert_eq!(text_rows(&mut s, "copy f to stdout (freeze)"), "1\ta\n");

    ok(&mut s, "begin");
    ok(&mut s, "truncate f");
    assert_eq!(
        load(&mut s, "copy f from stdin (freeze on)", b"2\tb\n3\tc\n", 5).unwrap(),
        "COPY 2"
    );
    assert_eq!(text_rows(&mut s, "copy f to stdout"), "2\tb\n3\tc\n");
    // Another session cannot read the table until the truncation ends (its
    // AccessExclusive lock), as in PostgreSQL.
    let mut other = Session::new(e.clone());
    ok(&mut other, "set lock_timeout = '50ms'");
    assert_eq!(err(&mut other, "copy f to stdout"), "55P03");
    ok(&mut s, "commit");
    assert_eq!(text_rows(&mut other, "copy f to stdout"), "2\tb\n3\tc\n");

    ok(&mut s, "begin");
    ok(&mut s, "create table g (a int)");
    assert_eq!(
        load(&mut s, "copy g from stdin (freeze)", b"7\n", 1).unwrap(),
        "COPY 1"
    );
    ok(&mut s, "rollback");
    assert_eq!(err(&mut s, "copy g to stdout"), "42P01");
}

/// A text/CSV COPY of every column in table order writes fields straight into the row
/// encoding (integers parsed from the bytes, text copied, `char(n)` padded); a COPY
/// naming its columns in another order goes through the input functions and assignment
/// rules. Both must load the same values and fail with the same errors, on inputs at
/// the edges of what the direct path takes: signs, blanks, range limits, 18 and 19
/// digits, multibyte characters against `char(n)` / `varchar(n)` limits, trailing
/// blanks, NULL in a NOT NULL column, escapes.
#[test]
fn direct_encoding_loads_what_the_input_functions_load() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    let cases: &[(&str, &[&str])] = &[
        (
            "int",
            &[
                "0",
                "-0",
                "+5",
                " 7",
                "7 ",
                "007",
                "2147483647",
                "2147483648",
                "-2147483648",
                "-2147483649",
                "12a",
                "",
                "-",
                "999999999999999999",
                "1_000",
                "\\N",
                "1\\x30",
            ],
        ),
        (
            "smallint",
            &["32767", "32768", "-32768", "-32769", "x", "\\N"],
        ),
        (
            "bigint",
            &[
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "123456789012345678",
                "1234567890123456789",
                "-999999999999999999",
                " 1",
            ],
        ),
        (
            "char(3)",
            &[
                "", "a", "abc", "abcd", "ab  ", "abc  ", "é", "éé€", "éééé", "ab\\t", "\\N",
            ],
        ),
        (
            "varchar(3)",
            &["", "abc", "abcd", "abc ", "éé€", "éé€x", "\\101"],
        ),
        ("text", &["", "x y", "\\\\N", "é\\n", "\\N"]),
        ("numeric(5,2)", &["1.005", "123.4", "1234.5", "x"]),
        ("int not null", &["\\N", "1"]),
        ("char(2) not null", &["\\N", "a"]),
    ];
    let mut id = 0;
    for (ty, inputs) in cases {
        ok(&mut s, &format!("create table direct (id int, v {ty})"));
        ok(&mut s, &format!("create table via (v {ty}, id int)"));
        for input in *inputs {
            id += 1;
            let data = format!("{id}\t{input}\n");
            let direct = load(&mut s, "copy direct from stdin", data.as_bytes(), 3);
            let via = load(&mut s, "copy via (id, v) from stdin", data.as_bytes(), 3);
            match (direct, via) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{ty} {input:?}"),
                (Err(a), Err(b)) => {
                    // The relation's name differs; everything else must not.
                    let a_message = a.message.replace("\"direct\"", "\"t\"");
                    let b_message = b.message.replace("\"via\"", "\"t\"");
                    assert_eq!(
                        (a.sqlstate, &a_message, &a.detail),
                        (b.sqlstate, &b_message, &b.detail),
                        "{ty} {input:?}"
                    );
                    assert_eq!(
                        a.context.map(|c| c.replace("COPY direct", "COPY t")),
                        b.context.map(|c| c.replace("COPY via", "COPY t")),
                        "{ty} {input:?}"
                    );
                }
                (a, b) => panic!("{ty} {input:?}: direct {a:?}, via the input functions {b:?}"),
            }
        }
        assert_eq!(
            text_rows(
                &mut s,
                "copy (select id, v from direct order by id) to stdout"
            ),
            text_rows(&mut s, "copy (select id, v from via order by id) to stdout"),
            "{ty}"
        );
        ok(&mut s, "drop table direct");
        ok(&mut s, "drop table via");
    }
    // The two paths are not vacuously equal: the direct one loaded these.
    ok(
        &mut s,
        "create table direct (a int, b bigint, c char(4), d varchar(2), e text)",
    );
    assert_eq!(
        load(
            &mut s,
            "copy direct from stdin (format csv)",
            b"-12,9223372036854775807,ab,\"\xc3\xa9\",\"x,y\"\n",
            2
        )
        .unwrap(),
        "COPY 1"
    );
    assert_eq!(
        text_rows(&mut s, "copy direct to stdout (format csv)"),
        "-12,9223372036854775807,ab  ,\u{e9},\"x,y\"\n"
    );
    drop(s);
    e.shutdown().unwrap();
}

/// Many rows in one batch through the direct path, with a primary key: every row is
/// indexed, a duplicate names its line, and the failed COPY keeps nothing.
#[test]
fn direct_encoding_batches_index_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table acc (aid int primary key, bid int, filler char(84))",
    );
    let mut data = String::new();
    for i in 1..=5000 {
        data.push_str(&format!("{i}\t{}\t\n", i % 7));
    }
    assert_eq!(
        load(&mut s, "copy acc from stdin", data.as_bytes(), 4096).unwrap(),
        "COPY 5000"
    );
    assert_eq!(
        text_rows(
            &mut s,
            "copy (select count(*), sum(bid) from acc) to stdout"
        ),
        "5000\t14997\n"
    );
    assert_eq!(
        text_rows(
            &mut s,
            "copy (select aid, bid from acc where aid = 4321) to stdout"
        ),
        "4321\t2\n"
    );
    let mut dup = String::new();
    for i in 5001..=6000 {
        dup.push_str(&format!("{i}\t0\tx\n"));
    }
    dup.push_str("17\t0\tx\n");
    let e1 = load(&mut s, "copy acc from stdin", dup.as_bytes(), 999).unwrap_err();
    assert_eq!(
        (e1.sqlstate, e1.context.as_deref()),
        ("23505", Some("COPY acc, line 1001"))
    );
    assert_eq!(
        text_rows(&mut s, "copy (select count(*) from acc) to stdout"),
        "5000\n"
    );
    drop(s);
    e.shutdown().unwrap();
}
