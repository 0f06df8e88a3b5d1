//! Randomized differential SQL testing against PostgreSQL 15 (issue 51 item 1), in the
//! spirit of SQLancer and SQLsmith: a seeded generator builds a schema of small tables
//! and typed queries over it, both servers answer each query, and every difference is
//! classified, minimized and reported.
//!
//! # What is generated
//! Three tables `t1..t3` (0–12 rows, now and then a duplicated row and a non-unique
//! index) with columns drawn from int2, int4, int8, bool, float8, numeric,
//! numeric(5,2), text, varchar(5), char(3), date, timestamp, timestamptz, bytea and uuid;
//! values include NULL, integer boundaries, -0, NaN and ±Infinity for float8, empty and
//! non-ASCII strings, month-end dates (numeric NaN/Infinity only as rare query literals:
//! walrus refuses to store them). The schema is remade every [`BATCH`] queries. Queries:
//! arithmetic, comparisons, AND/OR/NOT, IS [NOT] NULL, IS [NOT] DISTINCT FROM, BETWEEN,
//! LIKE, searched and simple CASE, COALESCE, NULLIF, GREATEST/LEAST, casts, IN lists,
//! [NOT] IN and [NOT] EXISTS subqueries (correlated or not, often empty), scalar
//! subqueries, the string and math functions walrus has, aggregates (count, sum, avg,
//! min, max, bool_and/or, every, string_agg ... ORDER BY), GROUP BY/HAVING, DISTINCT,
//! inner/left/right/full/cross joins with ON or USING, derived tables, UNION/INTERSECT/
//! EXCEPT [ALL], ORDER BY/LIMIT/OFFSET. Expressions are well typed, except that about 3 %
//! of the queries get one deliberately mistyped expression (their errors are compared).
//!
//! Not covered: DML, DDL beyond the setup, parameters ($1), window functions, WITH,
//! LATERAL, NATURAL joins, intervals, arrays, json, time/timetz, LIKE ESCAPE, collations,
//! float8 sum/avg over joins (their result depends on the order rows are added in),
//! non-deterministic functions, and concurrency.
//!
//! # Oracle
//! Every query runs on both servers through the simple protocol (`simple_query`: column
//! names and the rows in text) and the extended one (`prepare` + `query`: column names,
//! column type OIDs and the rows' binary values). Rows compare as an ordered list when the
//! ORDER BY fixes the printed order (every output column ordered, none of float8 or
//! numeric, whose equal values print differently), by count alone under LIMIT/OFFSET
//! without such an order, and as multisets otherwise. Then:
//! - *same*: equal answers (equal SQLSTATEs when both fail);
//! - *refused*: walrus answers `0A000` where PostgreSQL does not (counted by feature);
//! - *evaluation-order*: one side raises a data-dependent error (SQLSTATE class 22, or
//!   21000 from a scalar subquery) and the other answers, or they raise different ones,
//!   **and** the generator confirms the order of evaluation is not fixed: the query has
//!   two or more nodes that can raise such an error (division, arithmetic, negation,
//!   casts other than to text, abs/round/trunc/ceil/floor/sqrt/ln/exp/power, substr/
//!   repeat/lpad/rpad/split_part, sum/avg, scalar subqueries), or one whose evaluation
//!   is conditional or left to the planner: under AND/OR/CASE/COALESCE/NULLIF/GREATEST/
//!   LEAST/IN-list/BETWEEN, inside any subquery or derived table, in a join's ON, in a
//!   WHERE over more than one FROM source or a derived table (PostgreSQL pushes quals
//!   down), in a select list under LIMIT/OFFSET; or one without column references
//!   (PostgreSQL folds constants at plan time, even over no rows). See
//!   `gen::eval_order_sites`;
//! - *wrong*: anything else, by category (`rows`, `row order`, `column names`, `column
//!   types`, `error X vs Y`, `PostgreSQL error X, walrus rows`, ..., prefixed
//!   `extended:` when only the extended protocol differs).
//!
//! Besides, on walrus alone, TLP (ternary logic partitioning): for a query that is a
//! plain SELECT with a WHERE `p` and no DISTINCT, grouping, aggregates or LIMIT, and
//! that both servers answered alike, the rows without the WHERE must be the multiset
//! union of those of `WHERE p`, `WHERE NOT p` and `WHERE (p) IS NULL`. An inconsistency
//! fails the test (it is printed, not minimized).
//!
//! A wrong case is minimized (greedy reductions of the query tree: a set operation to
//! one side, joins to one side, clauses and select items dropped, expressions replaced
//! by a child, NULL or a literal; then table rows dropped) while it stays wrong in the
//! same category, then printed; with `WALRUS_RANDOM_SQL_SAVE=1` it is also appended to
//! `tests/slt/random_regressions.slt` with PostgreSQL's answer (which slt.rs then checks).
//!
//! # Modes (environment)
//! - default (CI): seed [`DEFAULT_SEED`], [`DEFAULT_QUERIES`] queries, the constructs of
//!   `gen::KNOWN_OPEN` (open classes of wrong answers) turned off; any wrong answer
//!   fails the test. A missing PostgreSQL 15 fails under `CI`, is skipped elsewhere.
//! - `WALRUS_RANDOM_SQL_QUERIES=n`, `WALRUS_RANDOM_SQL_SEED=s`: a long or other run.
//! - `WALRUS_RANDOM_SQL_ALL=1`: the known-open constructs too;
//!   `WALRUS_RANDOM_SQL_ENABLE=switch,...`: only the named ones (to count one class).
//! - `WALRUS_RANDOM_SQL_ONLY=n`: only query number n of the run (to reproduce one); its
//!   schema and SQL are printed.
//! - `WALRUS_RANDOM_SQL_MINIMIZE=n`: minimize at most n cases (default 12; the rest are
//!   printed unminimized).
//! - `WALRUS_RANDOM_SQL_SAVE=1`: append minimized cases to `random_regressions.slt`.

#[path = "random_sql/ast.rs"]
mod ast;
mod common;
#[path = "random_sql/gen.rs"]
mod gen;
#[path = "random_sql/oracle.rs"]
mod oracle;
#[path = "random_sql/shrink.rs"]
mod shrink;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use ast::{Query, Ty};
use common::servers::{postgres_installed, start_postgres, start_walrus, PG_BIN, START_TIMEOUT};
use gen::{eval_order_sites, picks_representatives, Features, Gen, Schema};
use oracle::{judge, Answer, Lenience, Outcome, Pair, RowOrder, Verdict};

pub const DEFAULT_SEED: u64 = 0x51_5EED;
pub const DEFAULT_QUERIES: usize = 10_000;
/// Queries per generated schema.
pub const BATCH: usize = 250;
/// Candidate runs one minimization may spend.
const MINIMIZE_TRIES: usize = 1500;
const MINIMIZE_TIME: Duration = Duration::from_secs(60);

fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn query_rng(seed: u64, n: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ (n as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn schema_rng(seed: u64, batch: usize) -> StdRng {
    StdRng::seed_from_u64(
        seed.rotate_left(17) ^ (batch as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
    )
}

fn row_order(q: &Query) -> RowOrder {
    if q.total_order() {
        RowOrder::Ordered
    } else if q.limit.is_some() || q.offset.is_some() {
        RowOrder::CountOnly
    } else {
        RowOrder::Multiset
    }
}

/// Runs `q` on both servers and judges walrus's answer.
fn check(pair: &mut Pair, q: &Query, f: &Features) -> (Verdict, [Answer; 2]) {
    let sql = q.to_sql();
    let answers = pair
        .run(&sql)
        .unwrap_or_else(|e| panic!("lost a server: {e}\n  last query: {sql}"));
    for o in [&answers[0].simple, &answers[0].ext] {
        if let Outcome::Error { code, message } = o {
            assert!(
                code != "connection",
                "PostgreSQL connection failed: {message}\n  {sql}"
            );
        }
    }
    let od = eval_order_sites(q).order_dependent();
    let picks = picks_representatives(q);
    let lenience = Lenience {
        describe_text_fallback: !f.on("describe_text_fallback"),
        by_value: q
            .types()
            .iter()
            .map(|t| picks && matches!(t, Ty::Numeric | Ty::Float8))
            .collect(),
        float_value: q
            .types()
            .iter()
            .map(|t| *t == Ty::Float8 && !f.on("float_text_format"))
            .collect(),
    };
    (
        judge(&answers[0], &answers[1], row_order(q), od, &lenience),
        answers,
    )
}

fn setup(pair: &mut Pair, schema: &Schema) {
    for sql in schema.setup_sql() {
        pair.exec_both(&sql)
            .unwrap_or_else(|e| panic!("schema setup failed: {e}"));
    }
}

/// Ternary logic partitioning on walrus alone: for a plain SELECT with a WHERE `p` (no
/// DISTINCT, grouping, aggregates or LIMIT), the rows without the WHERE must be, as a
/// multiset, those of `WHERE p`, `WHERE NOT p` and `WHERE (p) IS NULL` together.
/// None when the query does not qualify or a part fails (an error is the differential
/// oracle's business); Some(detail) on a mismatch.
fn tlp(pair: &mut Pair, q: &Query) -> Option<Result<(), String>> {
    let ast::Body::Select(s) = &q.body else {
        return None;
    };
    let w = s.where_.as_ref()?;
    if s.distinct
        || !s.group_by.is_empty()
        || s.having.is_some()
        || q.limit.is_some()
        || q.offset.is_some()
        || s.items.iter().any(|i| gen::has_agg(&i.expr))
    {
        return None;
    }
    let with_where = |w: Option<ast::Expr>| {
        let mut v = q.clone();
        v.order_by.clear();
        if let ast::Body::Select(vs) = &mut v.body {
            vs.where_ = w;
        }
        v.to_sql()
    };
    let not = ast::Expr::new(ast::Kind::Prefix("NOT"), Ty::Bool, vec![w.clone()]);
    let null = ast::Expr::new(ast::Kind::IsNull { not: false }, Ty::Bool, vec![w.clone()]);
    let mut rows = Vec::new();
    for sql in [
        with_where(None),
        with_where(Some(w.clone())),
        with_where(Some(not)),
        with_where(Some(null)),
    ] {
        match pair.walrus_simple(&sql) {
            Ok(Outcome::Rows { rows: r, .. }) => rows.push(r),
            _ => return None,
        }
    }
    let mut all = rows[0].clone();
    let mut parts: Vec<String> = rows[1..].concat();
    all.sort();
    parts.sort();
    if all == parts {
        Some(Ok(()))
    } else {
        Some(Err(format!(
            "TLP: {} rows without the WHERE, {} + {} + {} in the partitions",
            rows[0].len(),
            rows[1].len(),
            rows[2].len(),
            rows[3].len()
        )))
    }
}

/// A wrong case after minimization.
struct Case {
    category: String,
    detail: String,
    query: Query,
    schema: Schema,
    pg: Answer,
    number: usize,
}

/// Reduces `q` (then the tables' rows) while walrus stays wrong in `category`.
fn minimize(
    pair: &mut Pair,
    schema: &Schema,
    q: &Query,
    signature: &str,
    f: &Features,
) -> (Query, Schema) {
    let start = Instant::now();
    let mut tries = 0;
    let mut best = q.clone();
    let still = |pair: &mut Pair, cand: &Query| match check(pair, cand, f).0 {
        Verdict::Wrong(_, _, sig) => sig == signature,
        _ => false,
    };
    'outer: loop {
        for cand in shrink::variants(&best) {
            if tries >= MINIMIZE_TRIES || start.elapsed() > MINIMIZE_TIME {
                break 'outer;
            }
            tries += 1;
            if still(pair, &cand) {
                best = cand;
                continue 'outer;
            }
        }
        break;
    }
    // Drop tables' rows, one at a time, from the last.
    let sql = best.to_sql();
    let mut small = schema.clone();
    for t in 0..small.tables.len() {
        if !sql.contains(&format!("{} AS", small.tables[t].name)) {
            continue;
        }
        let mut r = small.tables[t].rows.len();
        while r > 0 && start.elapsed() < MINIMIZE_TIME * 2 {
            r -= 1;
            let mut cand = small.clone();
            cand.tables[t].rows.remove(r);
            setup(pair, &cand);
            if still(pair, &best) {
                small = cand;
            }
        }
    }
    setup(pair, &small);
    (best, small)
}

/// The statements a case needs: the tables its query names.
fn case_setup(case: &Case) -> Vec<String> {
    let sql = case.query.to_sql();
    let mut out = vec![case.schema.drop_sql()];
    for t in &case.schema.tables {
        if sql.contains(&format!("{} AS", t.name)) {
            out.extend(t.create_sql());
        }
    }
    out
}

fn describe(case: &Case) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "--- wrong: {} (query {})", case.category, case.number);
    for st in case_setup(case).iter().skip(1) {
        let _ = writeln!(s, "  {st};");
    }
    let _ = writeln!(s, "  {};", case.query.to_sql());
    for l in case.detail.lines() {
        let _ = writeln!(s, "  {l}");
    }
    s
}

fn regressions_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt/random_regressions.slt")
}

/// The case as slt records with PostgreSQL's answer (simple protocol).
fn slt_records(case: &Case, seed: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# random_sql seed {seed:#x} query {}: {}",
        case.number, case.category
    );
    for st in case_setup(case) {
        let _ = writeln!(s, "statement ok\n{st}\n");
    }
    let sql = case.query.to_sql();
    match &case.pg.simple {
        Outcome::Error { code, message } => {
            let _ = writeln!(
                s,
                "statement error {code} {}\n{sql}\n",
                message.replace('\n', " ")
            );
        }
        Outcome::Rows { rows, .. } => {
            let header = if case.query.total_order() {
                "query"
            } else {
                "query rowsort"
            };
            let _ = writeln!(s, "{header}\n{sql}\n----");
            for r in rows {
                let _ = writeln!(s, "{r}");
            }
            s.push('\n');
        }
    }
    let _ = writeln!(s, "statement ok\n{}\n", case.schema.drop_sql());
    s
}

#[derive(Default)]
struct Counts {
    queries: usize,
    same: usize,
    refused: BTreeMap<String, usize>,
    eval_order: usize,
    wrong: BTreeMap<String, usize>,
    tlp_checked: usize,
    tlp_failed: Vec<String>,
}

#[test]
fn random_sql_walrus_answers_like_postgresql() {
    let started = Instant::now();
    let in_ci = std::env::var("CI").is_ok();
    if !postgres_installed() {
        assert!(
            !in_ci,
            "PostgreSQL 15 is not installed ({PG_BIN}): .ci/run must install postgresql-15"
        );
        eprintln!("random_sql: PostgreSQL 15 not installed; skipped");
        return;
    }
    let seed = env_num("WALRUS_RANDOM_SQL_SEED").unwrap_or(DEFAULT_SEED);
    let queries = env_num("WALRUS_RANDOM_SQL_QUERIES").map_or(DEFAULT_QUERIES, |n| n as usize);
    let only = env_num("WALRUS_RANDOM_SQL_ONLY").map(|n| n as usize);
    let max_minimize = env_num("WALRUS_RANDOM_SQL_MINIMIZE").map_or(12, |n| n as usize);
    let save = std::env::var("WALRUS_RANDOM_SQL_SAVE").is_ok_and(|v| v == "1");
    let enable = std::env::var("WALRUS_RANDOM_SQL_ENABLE").unwrap_or_default();
    let enable: Vec<&str> = enable.split(',').map(str::trim).collect();
    for e in &enable {
        assert!(
            e.is_empty() || gen::SWITCHES.contains(e),
            "WALRUS_RANDOM_SQL_ENABLE: unknown switch {e:?}; known: {:?}",
            gen::SWITCHES
        );
    }
    let features = if std::env::var("WALRUS_RANDOM_SQL_ALL").is_ok_and(|v| v == "1") {
        Features::all()
    } else {
        Features::ci(&enable)
    };

    let tmp = tempfile::tempdir().expect("tempdir");
    let pg_dir = tmp.path().join("pg");
    let w_dir = tmp.path().join("walrus");
    std::fs::create_dir(&pg_dir).expect("pg dir");
    std::fs::create_dir(&w_dir).expect("walrus dir");
    let (pg_server, pg_dsn) = start_postgres(&pg_dir).unwrap_or_else(|e| panic!("{e}"));
    let (w_server, w_dsn) = start_walrus(&w_dir).unwrap_or_else(|e| panic!("{e}"));
    let mut pair = Pair::connect(&pg_dsn, &w_dsn, START_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));

    println!(
        "random_sql: seed {seed:#x}, {queries} queries, switches off: {:?}",
        features.off_list()
    );
    let mut counts = Counts::default();
    let mut cases: Vec<Case> = Vec::new();
    let mut unminimized: Vec<String> = Vec::new();
    let mut minimized_per_category: BTreeMap<String, usize> = BTreeMap::new();
    let mut schema: Option<(usize, Schema)> = None;
    let mut slowest: Vec<(Duration, usize)> = Vec::new();
    let range = match only {
        Some(n) => n..n + 1,
        None => 0..queries,
    };
    for n in range {
        let batch = n / BATCH;
        if schema.as_ref().is_none_or(|(b, _)| *b != batch) {
            let s = Schema::generate(&mut schema_rng(seed, batch), &features);
            setup(&mut pair, &s);
            schema = Some((batch, s));
        }
        let (_, current) = schema.as_ref().expect("schema");
        let q = Gen::new(query_rng(seed, n), current, &features).top_query();
        if only.is_some() {
            for st in current.setup_sql() {
                eprintln!("{st};");
            }
            eprintln!("{};", q.to_sql());
        }
        counts.queries += 1;
        let t0 = Instant::now();
        let (verdict, answers) = check(&mut pair, &q, &features);
        slowest.push((t0.elapsed(), n));
        slowest.sort_by(|a, b| b.cmp(a));
        slowest.truncate(5);
        if verdict == Verdict::Same {
            match tlp(&mut pair, &q) {
                None => {}
                Some(Ok(())) => counts.tlp_checked += 1,
                Some(Err(e)) => {
                    counts.tlp_checked += 1;
                    counts
                        .tlp_failed
                        .push(format!("--- TLP (query {n})\n  {}\n  {e}", q.to_sql()));
                }
            }
        }
        match verdict {
            Verdict::Same => counts.same += 1,
            Verdict::Refused(feature) => *counts.refused.entry(feature).or_default() += 1,
            Verdict::EvalOrder => counts.eval_order += 1,
            Verdict::Wrong(category, detail, signature) => {
                *counts.wrong.entry(category.clone()).or_default() += 1;
                let done = minimized_per_category.entry(category.clone()).or_default();
                if cases.len() < max_minimize && *done < 3 {
                    *done += 1;
                    let current = current.clone();
                    let (query, small) = minimize(&mut pair, &current, &q, &signature, &features);
                    let (v, ans) = check(&mut pair, &query, &features);
                    let detail = match v {
                        Verdict::Wrong(_, d, _) => d,
                        _ => detail,
                    };
                    let case = Case {
                        category,
                        detail,
                        query,
                        schema: small,
                        pg: ans[0].clone(),
                        number: n,
                    };
                    eprint!("{}", describe(&case));
                    cases.push(case);
                    setup(&mut pair, &current);
                } else {
                    let _ = answers;
                    unminimized.push(format!(
                        "--- wrong (not minimized): {category} (query {n})\n  {}\n  {}",
                        q.to_sql(),
                        detail.replace('\n', "\n  ")
                    ));
                }
            }
        }
        if (n + 1) % 1000 == 0 {
            eprintln!(
                "random_sql: {} queries, {:.0} s",
                n + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    drop(pair);
    drop(w_server);
    drop(pg_server);

    let wrong: usize = counts.wrong.values().sum();
    let refused: usize = counts.refused.values().sum();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "random_sql: seed {seed:#x}: {} queries, {} same, {refused} refused, {} evaluation-order, {wrong} wrong ({:.1} s)",
        counts.queries,
        counts.same,
        counts.eval_order,
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        report,
        "slowest queries (both servers, both protocols): {}",
        slowest
            .iter()
            .map(|(d, n)| format!("#{n} {:.2} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        report,
        "TLP on walrus: {} queries partitioned, {} inconsistent",
        counts.tlp_checked,
        counts.tlp_failed.len()
    );
    let _ = writeln!(report, "refused, by feature:");
    for (f, n) in &counts.refused {
        let _ = writeln!(report, "  {n:6}  {f}");
    }
    let _ = writeln!(report, "wrong, by category:");
    for (c, n) in &counts.wrong {
        let _ = writeln!(report, "  {n:6}  {c}");
    }
    println!("{report}");
    for u in unminimized.iter().take(30) {
        eprintln!("{u}");
    }
    for c in &cases {
        eprint!("{}", describe(c));
    }
    for t in counts.tlp_failed.iter().take(20) {
        eprintln!("{t}");
    }
    if save && !cases.is_empty() {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(regressions_path())
            .expect("open random_regressions.slt");
        for c in &cases {
            f.write_all(slt_records(c, seed).as_bytes())
                .expect("write random_regressions.slt");
        }
        eprintln!(
            "random_sql: {} cases appended to {}",
            cases.len(),
            regressions_path().display()
        );
    }
    assert!(
        counts.tlp_failed.is_empty(),
        "random_sql: {} TLP inconsistencies in walrus (printed above)",
        counts.tlp_failed.len()
    );
    assert!(
        wrong == 0,
        "random_sql: {wrong} wrong answers from walrus (categories above; minimized cases printed)"
    );
}
