//! The catalog views' column types against PostgreSQL 15 (issue 43, item 1): for every
//! `pg_catalog` and `information_schema` relation walrus serves
//! (`walrus_sql::catalog_relations`), the columns walrus describes must be PostgreSQL's,
//! in its order (walrus may leave columns out), each with PostgreSQL's type OID and
//! modifier in RowDescription. Drivers scan by those types (pgx reads `typname` as
//! `name`, `typtype` as `"char"`, `oid` as 4 bytes), so a difference is a failure.
//!
//! Also checked: every row walrus returns for a view, read in binary format, has the
//! byte length its column's type has (4 for `oid`, 1 for `"char"`, ...); the types
//! PostgreSQL gives parameters compared with catalog columns and the result types of
//! casts and expressions over them.
//!
//! Needs PostgreSQL 15's server binaries: skipped without them, except in CI (`CI` set),
//! where their absence fails the test.

mod common;

use std::time::{Duration, Instant};

use common::servers::{postgres_installed, start_postgres, start_walrus, START_TIMEOUT};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls};

async fn connect(dsn: &str) -> Client {
    let start = Instant::now();
    loop {
        match tokio_postgres::connect(dsn, NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                return client;
            }
            Err(e) if start.elapsed() > START_TIMEOUT => panic!("connect {dsn}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A result column as RowDescription describes it.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Described {
    name: String,
    oid: u32,
    typmod: i32,
}

async fn describe(client: &Client, sql: &str) -> Result<Vec<Described>, String> {
    let st = client.prepare(sql).await.map_err(|e| format!("{e:?}"))?;
    Ok(st
        .columns()
        .iter()
        .map(|c| Described {
            name: c.name().to_string(),
            oid: c.type_().oid(),
            typmod: c.type_modifier(),
        })
        .collect())
}

/// The statement that reads relation `schema.name` (a row function is called).
fn select_all(schema: &str, name: &str) -> String {
    match name {
        "pg_control_checkpoint" => format!("select * from {schema}.{name}()"),
        _ => format!("select * from {schema}.{name}"),
    }
}

/// Compares walrus's description of `sql` with PostgreSQL's: walrus's columns must be
/// PostgreSQL's in order (some may be missing) with the same type OID and modifier.
fn compare(what: &str, pg: &[Described], walrus: &[Described], problems: &mut Vec<String>) {
    let mut at = 0;
    for w in walrus {
        match pg[at..].iter().position(|p| p.name == w.name) {
            None => {
                problems.push(format!(
                    "{what}: column {} is not PostgreSQL's (or out of its order)",
                    w.name
                ));
            }
            Some(i) => {
                let p = &pg[at + i];
                at += i + 1;
                if (p.oid, p.typmod) != (w.oid, w.typmod) {
                    problems.push(format!(
                        "{what}.{}: walrus type {} (typmod {}), PostgreSQL {} (typmod {})",
                        w.name, w.oid, w.typmod, p.oid, p.typmod
                    ));
                }
            }
        }
    }
}

/// A value's binary bytes, whatever its type.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// The binary length of a fixed-width type (PostgreSQL's `typlen`), `None` for others.
fn fixed_len(oid: u32) -> Option<usize> {
    Some(match oid {
        16 | 18 => 1,
        21 => 2,
        23 | 24 | 26 | 28 | 700 | 2205 | 2206 => 4,
        20 | 701 | 1184 | 3220 => 8,
        _ => return None,
    })
}

/// Statements over the catalog whose parameter and result types must be PostgreSQL's.
const QUERIES: &[&str] = &[
    "select typname, typtype, typelem from pg_type where oid = $1",
    "select oid from pg_type where typname = $1",
    "select oid from pg_type where typtype = $1 and typname = 'int4'",
    "select typtype::text, typbasetype from pg_type where oid = $1",
    "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = $1 and c.oid = $2",
    "select 'pg_class'::regclass::oid, 'x'::name, 'ab'::\"char\", 'int4'::regtype::oid",
    "select typname::text, oid::int8, typname || 'x', typlen from pg_type",
    "select a.attname, a.atttypid, t.typname from pg_attribute a join pg_type t on t.oid = a.atttypid",
    "select * from (select oid, typname, typinput from pg_type) s",
    "select typname from pg_type where oid = any($1) and typname = any($2) and typtype in ($3, 'b')",
    "select min(typname), max(oid), min(typtype), array_agg(oid), array_agg(typname), array_agg(typtype), coalesce(typname, 'x'), count(oid) from pg_type group by typname, oid, typtype",
    "select typname from pg_type union select relname from pg_class",

];

/// Statements over the catalog whose rows (simple protocol, text) must be PostgreSQL's:
/// the `pg_type` rows of the catalog column types.
const VALUE_QUERIES: &[&str] = &[
    "select oid, typname, typlen, typbyval, typtype, typcategory, typelem, typarray, typinput, typoutput, typreceive, typsend, typanalyze, typsubscript, typalign, typstorage, typcollation, format_type(oid, null), oid::regtype from pg_type where typname in ('name', 'oid', 'char', 'xid', 'oidvector', 'float4', 'pg_node_tree', 'anyarray', 'int2vector', 'regproc', 'inet', 'pg_lsn', 'aclitem', '_oid', '_name', '_char', '_float4', '_aclitem', '_text', '_int2') order by 1",
    "select 'x'::name, 'ab'::\"char\", '\"char\"'::regtype::oid, 'real'::regtype, 'pg_class'::regclass::oid, 'int4in'::regproc::oid",
    "select max(oid), array_agg(typname order by typname), array_agg(typtype order by typname) from pg_type where typname in ('int4', 'name', 'oid')",
];

/// COPY ... TO STDOUT of catalog columns, in text and binary, byte for byte.
const COPY_QUERIES: &[&str] = &[
    "copy (select oid, typname, typtype, typinput, typelem from pg_type where oid in (16, 26, 1007) order by 1) to stdout (format binary)",
    "copy (select oid, typname, typtype, typinput, typelem from pg_type where oid in (16, 26, 1007) order by 1) to stdout",
];

async fn copy_bytes(client: &Client, sql: &str) -> Result<Vec<u8>, String> {
    use futures_util::StreamExt;
    let stream = client.copy_out(sql).await.map_err(|e| format!("{e:?}"))?;
    let mut stream = std::pin::pin!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.map_err(|e| format!("{e:?}"))?);
    }
    Ok(out)
}

async fn text_rows(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let msgs = client
        .simple_query(sql)
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect())
}

#[test]
fn catalog_column_types_are_postgresqls() {
    if !postgres_installed() {
        assert!(
            std::env::var("CI").is_err(),
            "PostgreSQL 15 is not installed (CI must compare against it)"
        );
        eprintln!("skipped: PostgreSQL 15 is not installed");
        return;
    }
    let pg_dir = tempfile::tempdir().expect("tempdir");
    let walrus_dir = tempfile::tempdir().expect("tempdir");
    let (_pg, pg_dsn) = start_postgres(pg_dir.path()).expect("start PostgreSQL");
    let (_walrus, walrus_dsn) = start_walrus(walrus_dir.path()).expect("start walrus");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let pg = connect(&pg_dsn).await;
        let walrus = connect(&walrus_dsn).await;
        // Objects for the rows: a table with an index and a constraint, analyzed.
        for c in [&pg, &walrus] {
            for sql in [
                "create table ct (a int primary key, b text not null, c varchar(3)) with (fillfactor = 90)",
                "insert into ct values (1, 'x', 'y'), (2, 'z', null)",
                "analyze ct",
            ] {
                c.batch_execute(sql).await.expect(sql);
            }
        }
        let mut problems = Vec::new();
        let mut compared = 0;
        for (schema, name) in walrus_sql::catalog_relations() {
            if name.starts_with("walrus_") {
                continue; // walrus's own views: PostgreSQL has no such relation
            }
            let sql = select_all(schema, name);
            let pg_cols = match describe(&pg, &sql).await {
                Ok(c) => c,
                Err(e) => {
                    problems.push(format!("{schema}.{name}: PostgreSQL: {e}"));
                    continue;
                }
            };
            let walrus_cols = match describe(&walrus, &sql).await {
                Ok(c) => c,
                Err(e) => {
                    problems.push(format!("{schema}.{name}: walrus: {e}"));
                    continue;
                }
            };
            compare(&format!("{schema}.{name}"), &pg_cols, &walrus_cols, &mut problems);
            compared += walrus_cols.len();
            // The rows in binary: each value as long as its type says.
            match walrus.query(&sql, &[]).await {
                Err(e) => problems.push(format!("{schema}.{name}: walrus rows: {e:?}")),
                Ok(rows) => {
                    for row in rows {
                        for (i, col) in walrus_cols.iter().enumerate() {
                            let Some(want) = fixed_len(col.oid) else {
                                continue;
                            };
                            match row.try_get::<_, Option<Raw>>(i) {
                                Ok(Some(Raw(b))) if b.len() != want => problems.push(format!(
                                    "{schema}.{name}.{}: binary value of {} bytes for type {}",
                                    col.name,
                                    b.len(),
                                    col.oid
                                )),
                                Ok(_) => {}
                                Err(e) => problems.push(format!(
                                    "{schema}.{name}.{}: {e}",
                                    col.name
                                )),
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 300, "only {compared} columns compared");
        for sql in QUERIES {
            let (p, w) = match (pg.prepare(sql).await, walrus.prepare(sql).await) {
                (Ok(p), Ok(w)) => (p, w),
                (p, w) => {
                    problems.push(format!("{sql}: PostgreSQL {:?}, walrus {:?}", p.err(), w.err()));
                    continue;
                }
            };
            let oids = |s: &tokio_postgres::Statement| -> Vec<u32> {
                s.params().iter().map(Type::oid).collect()
            };
            if oids(&p) != oids(&w) {
                problems.push(format!(
                    "{sql}: parameter types walrus {:?}, PostgreSQL {:?}",
                    oids(&w),
                    oids(&p)
                ));
            }
            let cols = |s: &tokio_postgres::Statement| -> Vec<Described> {
                s.columns()
                    .iter()
                    .map(|c| Described {
                        name: c.name().to_string(),
                        oid: c.type_().oid(),
                        typmod: c.type_modifier(),
                    })
                    .collect()
            };
            if cols(&p) != cols(&w) {
                problems.push(format!(
                    "{sql}: columns walrus {:?}, PostgreSQL {:?}",
                    cols(&w),
                    cols(&p)
                ));
            }
        }
        for sql in VALUE_QUERIES {
            let (p, w) = (text_rows(&pg, sql).await, text_rows(&walrus, sql).await);
            if p != w {
                problems.push(format!("{sql}: rows walrus {w:?}, PostgreSQL {p:?}"));
            }
        }
        for sql in COPY_QUERIES {
            let (p, w) = (copy_bytes(&pg, sql).await, copy_bytes(&walrus, sql).await);
            if p != w {
                problems.push(format!("{sql}: walrus {w:?}, PostgreSQL {p:?}"));
            }
        }
        assert!(
            problems.is_empty(),
            "{} differences from PostgreSQL 15:\n{}",
            problems.len(),
            problems.join("\n")
        );
    });
}
