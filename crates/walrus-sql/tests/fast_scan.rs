//! The per-row fast paths of a streamed scan (rows lent from one buffer, WHERE / grouping
//! keys / aggregate arguments / select items / sort keys / window keys in their prepared
//! form, reused key buffers, the top-N heap turning rows away unallocated) against the
//! general path: each query is paired with one whose expressions are wrapped in
//! `CASE WHEN true THEN ... END`, which has no fast form and goes through `eval`. Both
//! must give the same rows, or the same error, over NULLs, integer edges, updated and
//! deleted rows, another session's uncommitted changes, and an empty table.

use walrus_engine::access::datum::Datum;
mod common;

use common::{engine, err, ok};
use walrus_sql::{Outcome, Session};

/// The command tag then the rows as text, or the error's SQLSTATE.
fn answer(s: &mut Session, sql: &str) -> Result<Vec<String>, &'static str> {
    let mut r = s.execute(sql, &[]);
    assert_eq!(r.len(), 1, "{sql}");
    match r.pop().unwrap() {
        Ok(Outcome::Done(q)) => Ok(std::iter::once(q.tag.clone())
            .chain(q.rows.iter().map(|r| {
                r.iter()
                    .map(|d| match d {
                        Datum::Null => "NULL".to_string(),
                        d => walrus_engine::engine::datum_text(d),
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            }))
            .collect()),
        Ok(other) => panic!("{sql}: {other:?}"),
        Err(e) => Err(e.sqlstate),
    }
}

/// (fast, general) pairs; `E(x)` in the general one stands for `CASE WHEN true THEN x END`.
const PAIRS: &[(&str, &str)] = &[
    ("select count(*) from t", "select count(E(1)) from t"),
    (
        "select count(*), sum(a), sum(b), sum(c), min(b), max(c), count(c) from t \
         where a > 0 and b <= 1000",
        "select count(*), sum(E(a)), sum(E(b)), sum(E(c)), min(E(b)), max(E(c)), count(E(c)) \
         from t where E(a > 0 and b <= 1000)",
    ),
    (
        "select count(*) from t where c is null or b is not null and a <> 2",
        "select count(*) from t where E(c is null or b is not null and a <> 2)",
    ),
    (
        "select a % 3, count(*), sum(b), max(c) from t group by a % 3 order by 1",
        "select E(a % 3), count(*), sum(E(b)), max(E(c)) from t group by 1 order by 1",
    ),
    (
        "select b, count(*) from t where id % 4 = 1 group by b order by b nulls first",
        "select E(b), count(*) from t where E(id % 4 = 1) group by 1 order by 1 nulls first",
    ),
    (
        "select id, b, c from t order by b desc nulls last, id limit 7",
        "select id, E(b) as b, E(c) as c from t order by 2 desc nulls last, id limit 7",
    ),
    (
        "select id, a * 2 - b, c / 3 from t where b > -5 and id < 60 order by c, id \
         limit 10 offset 2",
        "select id, E(a * 2 - b), E(c / 3) from t where E(b > -5 and id < 60) order by \
         E(c), id limit 10 offset 2",
    ),
    (
        "select id, b + 2147483647 from t where b is not null",
        "select id, E(b + 2147483647) from t where b is not null",
    ),
    (
        "select count(*) from t where c + 9223372036854775807 > 0",
        "select count(*) from t where E(c + 9223372036854775807 > 0)",
    ),
    (
        "select count(*) from t where b / (a - a) > 0",
        "select count(*) from t where E(b / (a - a) > 0)",
    ),
    (
        "select t.a, count(*), sum(u.x) from t join u on t.a = u.a where u.x > 1 \
         group by t.a order by t.a",
        "select E(t.a), count(*), sum(E(u.x)) from t join u on t.a = u.a \
         where E(u.x > 1) group by 1 order by 1",
    ),
    (
        "select id, row_number() over (partition by a % 2 order by b, id) from t \
         order by id limit 30",
        "select id, row_number() over (partition by E(a % 2) order by E(b), id) from t \
         order by id limit 30",
    ),
    (
        "select count(*), sum(b), max(c) from e where b > 0",
        "select count(*), sum(E(b)), max(E(c)) from e where E(b > 0)",
    ),
    (
        "select b from e order by b limit 3",
        "select E(b) from e order by 1 limit 3",
    ),
    (
        // (rows the other session holds, id < 100, are left alone: no lock wait)
        "update t set b = b where id % 9 = 4 and c is not null and id > 100",
        "update t set b = b where E(id % 9 = 4 and c is not null and id > 100)",
    ),
];

fn general(sql: &str) -> String {
    // E(x) → CASE WHEN true THEN x END, with balanced parentheses.
    let mut out = String::new();
    let mut rest = sql;
    while let Some(at) = rest.find("E(") {
        out.push_str(&rest[..at]);
        let inner = &rest[at + 2..];
        let mut depth = 1;
        let mut end = 0;
        for (i, ch) in inner.char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&format!(
            "(case when true then {} end)",
            general(&inner[..end])
        ));
        rest = &inner[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn fast_paths_answer_as_the_general_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table t (id int primary key, a int2, b int4, c int8, d text)",
    );
    ok(
        &mut s,
        "insert into t select i, (i % 5)::int2, (i * 37 % 2001) - 1000, i::int8 * 1000003, \
         repeat('x', i % 40) from generate_series(1, 3000) as g(i)",
    );
    ok(
        &mut s,
        "insert into t values (3001, null, null, null, null), (3002, 32767, 2147483647, \
         9223372036854775807, 'max'), (3003, -32768, -2147483648, -9223372036854775808, 'min'), \
         (3004, 0, null, 5, null)",
    );
    // Dead and updated versions: some rows updated (in place and moved), some deleted.
    ok(
        &mut s,
        "update t set b = b + 1 where id % 5 = 0 and id < 3000",
    );
    ok(
        &mut s,
        "update t set d = repeat('y', 300) where id % 11 = 0 and id < 3000",
    );
    ok(&mut s, "delete from t where id % 7 = 0 and id < 3000");
    ok(&mut s, "create table u (a int4, x int8)");
    ok(
        &mut s,
        "insert into u select i % 6, i from generate_series(0, 20) as g(i)",
    );
    ok(&mut s, "insert into u values (null, 1), (2, null)");
    ok(&mut s, "create table e (b int4, c int8)");
    // Another session's uncommitted changes must stay invisible.
    let mut other = Session::new(e.clone());
    ok(&mut other, "begin");
    ok(
        &mut other,
        "insert into t values (5000, 1, 1, 1, 'uncommitted')",
    );
    ok(&mut other, "delete from t where id < 100");
    ok(&mut other, "insert into e values (1, 1)");

    let mut errors = 0;
    for (fast, reference) in PAIRS {
        let reference = general(reference);
        assert!(reference.contains("case when true"), "{reference}");
        let got = answer(&mut s, fast);
        let want = answer(&mut s, &reference);
        assert_eq!(got, want, "{fast}\n  vs {reference}");
        if got.is_err() {
            errors += 1;
        }
    }
    assert_eq!(
        errors, 3,
        "the overflow and division-by-zero pairs fail alike"
    );
    assert_eq!(
        err(
            &mut s,
            "select id, b + 2147483647 from t where b is not null"
        ),
        "22003"
    );
    assert_eq!(
        err(&mut s, "select count(*) from t where b / (a - a) > 0"),
        "22012"
    );
    // The answers are the committed ones: no uncommitted row, every deleted row gone.
    assert_eq!(
        answer(&mut s, "select count(*), min(id) from t"),
        Ok(vec!["SELECT 1".into(), format!("{}|1", 3004 - 3000 / 7)])
    );
    assert_eq!(
        answer(&mut s, "select count(*) from e"),
        Ok(vec!["SELECT 1".into(), "0".into()])
    );
    ok(&mut other, "rollback");
}
