//! sqlx 0.8 against a server: the program a new user would try.
//!
//! Run by tests/drivers.rs as `walrus-sqlx-check PORT DATABASE`, first against
//! PostgreSQL 15 (which proves the program), then against walrus. Prints OK on success;
//! a failed check exits non-zero naming what differed.
//!
//! sqlx prepares every query as a named statement (Parse with the bound values' type
//! OIDs, Describe, Sync), sends parameters and reads results in binary, checks each
//! result column's type OID against the Rust type it decodes into, and `describe` (what
//! its query macros run) reads the columns' table OIDs and numbers, pg_attribute's
//! attnotnull and `EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE`.

use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::types::chrono::{DateTime, NaiveTime, Utc};
use sqlx::types::{Decimal, JsonValue, Uuid};
use sqlx::{Column, Connection, Executor, QueryBuilder, Row, TypeInfo};

struct Want {
    id: i32,
    name: String,
    amount: Decimal,
    at: DateTime<Utc>,
    ok: bool,
    data: Vec<u8>,
    uid: Uuid,
}

fn row(i: i32) -> Want {
    let data: Vec<u8> = (0..i % 5)
        .map(|k| ((i * 37 + k * 101) % 256) as u8)
        .collect();
    let amount = if i % 2 == 0 {
        format!("{:.2}", 1234.5 + i as f64)
    } else {
        format!("{:.2}", i as f64 - 0.07)
    };
    let at = DateTime::parse_from_str(
        &format!("2024-01-01 10:11:{:02}.123457 +05:30", 12 + i),
        "%Y-%m-%d %H:%M:%S%.f %z",
    )
    .expect("timestamp")
    .with_timezone(&Utc);
    Want {
        id: i,
        name: if i % 3 == 0 {
            format!("név-{i}")
        } else {
            format!("name {i}")
        },
        amount: amount.parse().expect("decimal"),
        at,
        ok: i % 2 == 0,
        data,
        uid: Uuid::parse_str(&format!("a0eebc99-9c0b-4ef8-bb6d-{i:012}")).expect("uuid"),
    }
}

fn check_row(got: &PgRow, i: i32) -> Result<(), String> {
    let want = row(i);
    let id: i32 = got.try_get("id").map_err(|e| e.to_string())?;
    let name: String = got.try_get("name").map_err(|e| e.to_string())?;
    let amount: Decimal = got.try_get("amount").map_err(|e| e.to_string())?;
    let at: DateTime<Utc> = got.try_get("at").map_err(|e| e.to_string())?;
    let ok: bool = got.try_get("ok").map_err(|e| e.to_string())?;
    let data: Vec<u8> = got.try_get("data").map_err(|e| e.to_string())?;
    let uid: Uuid = got.try_get("uid").map_err(|e| e.to_string())?;
    let same = id == want.id
        && name == want.name
        && amount == want.amount
        && amount.scale() == 2
        && at == want.at
        && ok == want.ok
        && data == want.data
        && uid == want.uid;
    if same {
        Ok(())
    } else {
        Err(format!(
            "row {i}: got ({id}, {name:?}, {amount}, {at}, {ok}, {data:?}, {uid})"
        ))
    }
}

fn expect_code<T: std::fmt::Debug>(
    r: Result<T, sqlx::Error>,
    code: &str,
    what: &str,
) -> Result<(), String> {
    match r {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(code) => Ok(()),
        other => Err(format!("{what}: expected SQLSTATE {code}, got {other:?}")),
    }
}

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what.to_string())
    }
}

async fn run(port: &str, db: &str) -> Result<(), String> {
    let url = format!("postgres://bench@127.0.0.1:{port}/{db}?options=-c%20TimeZone%3DUTC");
    let mut c = PgConnection::connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    let e = |e: sqlx::Error| e.to_string();
    c.execute("drop table if exists sqlx_check")
        .await
        .map_err(e)?;
    c.execute(
        "create table sqlx_check (id int primary key, name varchar(20), amount numeric(10,2), \
         at timestamptz, ok boolean, data bytea, uid uuid)",
    )
    .await
    .map_err(e)?;
    let insert = "insert into sqlx_check (id, name, amount, at, ok, data, uid) values ($1, $2, $3, $4, $5, $6, $7)";
    for i in 1..=10 {
        let r = row(i);
        sqlx::query(insert)
            .bind(r.id)
            .bind(&r.name)
            .bind(r.amount)
            .bind(r.at)
            .bind(r.ok)
            .bind(&r.data)
            .bind(r.uid)
            .execute(&mut c)
            .await
            .map_err(e)?;
    }
    // Batched: one multi-row insert.
    let mut qb = QueryBuilder::new("insert into sqlx_check (id, name, amount, at, ok, data, uid) ");
    qb.push_values((11..=20).map(row), |mut b, r| {
        b.push_bind(r.id)
            .push_bind(r.name)
            .push_bind(r.amount)
            .push_bind(r.at)
            .push_bind(r.ok)
            .push_bind(r.data)
            .push_bind(r.uid);
    });
    qb.build().execute(&mut c).await.map_err(e)?;
    sqlx::query("insert into sqlx_check (id) values ($1)")
        .bind(100)
        .execute(&mut c)
        .await
        .map_err(e)?;

    // The same prepared select ten times.
    let by_id = "select id, name, amount, at, ok, data, uid from sqlx_check where id = $1";
    for k in 0..10 {
        let i = 1 + 2 * k;
        let r = sqlx::query(by_id)
            .bind(i)
            .fetch_one(&mut c)
            .await
            .map_err(e)?;
        check_row(&r, i)?;
    }
    let nulls = sqlx::query("select name, amount, at, ok, data, uid from sqlx_check where id = $1")
        .bind(100)
        .fetch_one(&mut c)
        .await
        .map_err(e)?;
    for i in 0..6 {
        let v: Option<String> = nulls.try_get_unchecked(i).map_err(e)?;
        check(v.is_none(), "null row")?;
    }
    let all = sqlx::query(
        "select id, name, amount, at, ok, data, uid from sqlx_check where id < 100 order by id",
    )
    .fetch_all(&mut c)
    .await
    .map_err(e)?;
    check(all.len() == 20, "row count")?;
    for (k, r) in all.iter().enumerate() {
        check_row(r, k as i32 + 1)?;
    }
    let types: Vec<String> = all[0]
        .columns()
        .iter()
        .map(|c| c.type_info().name().to_string())
        .collect();
    check(
        types
            == [
                "INT4",
                "VARCHAR",
                "NUMERIC",
                "TIMESTAMPTZ",
                "BOOL",
                "BYTEA",
                "UUID",
            ],
        &format!("column types {types:?}"),
    )?;

    // describe (what query! runs): parameter types and column nullability.
    let d = (&mut c).describe(by_id).await.map_err(e)?;
    let params: Vec<String> = match d.parameters() {
        Some(sqlx::Either::Left(p)) => p.iter().map(|t| t.name().to_string()).collect(),
        other => return Err(format!("describe parameters: {other:?}")),
    };
    check(
        params == ["INT4"],
        &format!("described parameters {params:?}"),
    )?;
    check(
        d.nullable(0) == Some(false) && d.nullable(1) == Some(true),
        &format!(
            "described nullability {:?} {:?}",
            d.nullable(0),
            d.nullable(1)
        ),
    )?;

    // Types drivers round-trip: time, interval, json, jsonb, arrays.
    c.execute("drop table if exists sqlx_types")
        .await
        .map_err(e)?;
    c.execute("create table sqlx_types (id int primary key, t time, iv interval, j json, jb jsonb, ia int4[], ta text[])")
        .await
        .map_err(e)?;
    let t = NaiveTime::from_hms_micro_opt(4, 5, 6, 789_000).expect("time");
    let iv = PgInterval {
        months: 14,
        days: 3,
        microseconds: 14_706_000_000,
    };
    let j: JsonValue = serde_json_value(r#"{"b": 1, "a": [1, 2]}"#)?;
    sqlx::query("insert into sqlx_types values ($1, $2, $3, $4, $5, $6, $7)")
        .bind(1)
        .bind(t)
        .bind(iv.clone())
        .bind(sqlx::types::Json(&j))
        .bind(sqlx::types::Json(&j))
        .bind(vec![Some(1i32), None, Some(3)])
        .bind(vec!["x y".to_string(), String::new(), "a\"b".to_string()])
        .execute(&mut c)
        .await
        .map_err(e)?;
    let r = sqlx::query("select t, iv, j, jb, ia, ta, iv::text as ivt, jb::text as jbt from sqlx_types where id = $1")
        .bind(1)
        .fetch_one(&mut c)
        .await
        .map_err(e)?;
    let got_t: NaiveTime = r.try_get("t").map_err(e)?;
    let got_iv: PgInterval = r.try_get("iv").map_err(e)?;
    let got_j: JsonValue = r.try_get("j").map_err(e)?;
    let got_jb: JsonValue = r.try_get("jb").map_err(e)?;
    let got_ia: Vec<Option<i32>> = r.try_get("ia").map_err(e)?;
    let got_ta: Vec<String> = r.try_get("ta").map_err(e)?;
    let ivt: String = r.try_get("ivt").map_err(e)?;
    let jbt: String = r.try_get("jbt").map_err(e)?;
    check(got_t == t, "time")?;
    check(got_iv == iv, "interval")?;
    check(
        ivt == "1 year 2 mons 3 days 04:05:06",
        &format!("interval text {ivt}"),
    )?;
    check(got_j == j && got_jb == j, "json, jsonb")?;
    check(
        jbt == r#"{"a": [1, 2], "b": 1}"#,
        &format!("jsonb text {jbt}"),
    )?;
    check(got_ia == vec![Some(1), None, Some(3)], "int4[]")?;
    check(got_ta == ["x y", "", "a\"b"], "text[]")?;

    // Rollback undoes.
    let mut tx = c.begin().await.map_err(e)?;
    sqlx::query("update sqlx_check set amount = amount + 1 where id = $1")
        .bind(2)
        .execute(&mut *tx)
        .await
        .map_err(e)?;
    tx.rollback().await.map_err(e)?;
    let a: Decimal = sqlx::query_scalar("select amount from sqlx_check where id = $1")
        .bind(2)
        .fetch_one(&mut c)
        .await
        .map_err(e)?;
    check(a == row(2).amount, "rolled back")?;

    // A duplicate key inside a transaction, then 25P02 until rollback.
    let mut tx = c.begin().await.map_err(e)?;
    sqlx::query("insert into sqlx_check (id) values ($1)")
        .bind(21)
        .execute(&mut *tx)
        .await
        .map_err(e)?;
    expect_code(
        sqlx::query("insert into sqlx_check (id) values ($1)")
            .bind(1)
            .execute(&mut *tx)
            .await,
        "23505",
        "duplicate key",
    )?;
    expect_code(
        sqlx::query("select 1").execute(&mut *tx).await,
        "25P02",
        "aborted transaction",
    )?;
    tx.rollback().await.map_err(e)?;
    let n: i64 = sqlx::query_scalar("select count(*) from sqlx_check")
        .fetch_one(&mut c)
        .await
        .map_err(e)?;
    check(n == 21, "rows after rollback")?;

    // Errors found while preparing and at run time; the connection goes on.
    expect_code(
        sqlx::query("select nosuch from sqlx_check where id = $1")
            .bind(1)
            .execute(&mut c)
            .await,
        "42703",
        "unknown column",
    )?;
    expect_code(
        sqlx::query("select 1 / $1::int4")
            .bind(0)
            .execute(&mut c)
            .await,
        "22012",
        "division by zero",
    )?;
    let lit = sqlx::query(
        "select '2024-01-01 10:11:12.123457+05:30'::timestamptz as t, 1234.5::numeric(10,2) as n",
    )
    .fetch_one(&mut c)
    .await
    .map_err(e)?;
    let lt: DateTime<Utc> = lit.try_get("t").map_err(e)?;
    let ln: Decimal = lit.try_get("n").map_err(e)?;
    check(
        lt.to_rfc3339() == "2024-01-01T04:41:12.123457+00:00",
        &format!("offset literal {lt}"),
    )?;
    check(ln.to_string() == "1234.50", &format!("numeric cast {ln}"))?;

    c.execute("drop table sqlx_types").await.map_err(e)?;
    c.execute("drop table sqlx_check").await.map_err(e)?;
    c.close().await.map_err(e)?;
    Ok(())
}

fn serde_json_value(s: &str) -> Result<JsonValue, String> {
    serde_json::from_str(s).map_err(|e| e.to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (port, db) = (&args[1], &args[2]);
    match run(port, db).await {
        Ok(()) => println!("OK"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
