//! The general SELECT path (joins, LATERAL, GROUP BY, subqueries, set operations) and
//! the pg_catalog views, driven by the exact queries psql 15 sends for `\dt`, `\d`,
//! `\d TABLE`, `\l`, `\dn`, `\di` (captured from a real PostgreSQL 15 with
//! `log_statement = all`, in tests/psql/) and pgbench's partition probe.

use walrus_engine::access::datum::Datum;
mod common;

use common::{engine, err, ok};
use walrus_sql::{Outcome, Session};

fn session(dir: &std::path::Path) -> Session {
    let mut s = Session::new(engine(dir));
    s.set_identity("alice", "shop");
    s
}

/// Rows as text, NULL as `-`, for compact assertions.
fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    ok(s, sql)
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|d| match d {
                    Datum::Null => "-".to_string(),
                    d => walrus_engine::engine::datum_text(d),
                })
                .collect()
        })
        .collect()
}

fn flat(r: &[Vec<String>]) -> Vec<String> {
    r.iter().map(|row| row.join("|")).collect()
}

fn setup(s: &mut Session) {
    ok(
        s,
        "create table customers(id int primary key, name text not null, city text)",
    );
    ok(
        s,
        "create table orders(id int8 primary key, customer int, amount numeric, note varchar)",
    );
    ok(s, "create index orders_customer on orders(customer)");
    ok(
        s,
        "insert into customers values (1,'ann','oslo'),(2,'bob','rome'),(3,'cy',null)",
    );
    ok(
        s,
        "insert into orders values (10,1,5.5,'a'),(11,1,4.5,null),(12,2,7,'b'),(13,9,1,'orphan')",
    );
}

#[test]
fn joins_grouping_subqueries_and_set_operations() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    setup(&mut s);
    assert_eq!(
        flat(&rows(
            &mut s,
            "select c.name, o.id from customers c join orders o on o.customer = c.id order by o.id"
        )),
        ["ann|10", "ann|11", "bob|12"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select c.name, count(o.id), sum(o.amount) from customers c left join orders o \
             on o.customer = c.id group by c.name order by 1"
        )),
        ["ann|2|10.0", "bob|1|7", "cy|0|-"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select o.id, c.name from customers c right join orders o on o.customer = c.id \
             where c.id is null"
        )),
        ["13|-"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select count(*) from customers full outer join orders on orders.customer = customers.id"
        )),
        ["5"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select name from customers c where exists (select 1 from orders o where o.customer = c.id) order by name desc"
        )),
        ["bob", "ann"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select name, (select max(amount) from orders o where o.customer = c.id) from customers c order by id"
        )),
        ["ann|5.5", "bob|7", "cy|-"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select id from orders where customer in (select id from customers where city = 'oslo') order by id"
        )),
        ["10", "11"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select customer, count(*) from orders group by customer having count(*) > 1"
        )),
        ["1|2"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select city from customers union select 'rome' union all select 'oslo' order by 1"
        )),
        ["oslo", "oslo", "rome", "-"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select g, g * g from generate_series(1, 3) g where g <> 2"
        )),
        ["1|1", "3|9"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select c.id, x.doubled from customers c cross join lateral (select c.id * 2) as x(doubled) order by 1 desc limit 2"
        )),
        ["3|6", "2|4"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select distinct customer from orders where customer < 5 order by customer"
        )),
        ["1", "2"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select case when amount > 5 then 'big' else 'small' end as size, count(*) from orders group by size order by size"
        )),
        ["big|2", "small|2"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select string_agg(name, ',') from (select name from customers order by name desc) s"
        )),
        ["cy,bob,ann"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select name from customers where name like '_o%' or name ~ '^c'"
        )),
        ["bob", "cy"]
    );
    // Binding errors happen before any row is read, even on empty results.
    assert_eq!(
        err(&mut s, "select nosuch from customers where false"),
        "42703"
    );
    assert_eq!(err(&mut s, "select id from customers, orders"), "42702");
    // PostgreSQL names the missing range variable.
    assert_eq!(err(&mut s, "select x.id from customers c"), "42P01");
    assert_eq!(err(&mut s, "select c.nosuch from customers c"), "42703");
    assert_eq!(
        err(
            &mut s,
            "select name, count(*) from customers where count(*) > 1"
        ),
        "42803"
    );
    assert_eq!(
        err(&mut s, "select (select id from orders) from customers"),
        "21000"
    );
    assert_eq!(err(&mut s, "select * from pg_catalog.pg_nosuch"), "42P01");
    assert_eq!(err(&mut s, "select 1 union select 1, 2"), "42601");
}

fn psql_query(name: &str) -> String {
    let path = format!("{}/tests/psql/{name}.sql", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn psql_describe_queries_answer_from_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    setup(&mut s);
    assert_eq!(
        flat(&rows(&mut s, &psql_query("dt"))),
        ["public|customers|table|alice", "public|orders|table|alice"]
    );
    assert_eq!(rows(&mut s, &psql_query("d")).len(), 2);
    assert_eq!(
        flat(&rows(&mut s, &psql_query("di"))),
        [
            "public|customers_pkey|index|alice|customers",
            "public|orders_customer|index|alice|orders",
            "public|orders_pkey|index|alice|orders"
        ]
    );
    assert_eq!(flat(&rows(&mut s, &psql_query("dn"))), ["public|alice"]);
    let dbs = rows(&mut s, &psql_query("l"));
    assert_eq!(dbs[0][0], "shop");
    // \d orders: the lookup finds the table's oid; the follow-up queries use it.
    let lookup = psql_query("d_lookup").replace("^(t)$", "^(orders)$");
    let found = rows(&mut s, &lookup);
    assert_eq!(found.len(), 1, "{found:?}");
    let oid = found[0][0].clone();
    assert_eq!(&found[0][1..], ["public", "orders"]);
    let with_oid = |n: &str| psql_query(n).replace("'16384'", &format!("'{oid}'"));
    let table = rows(&mut s, &with_oid("d_table"));
    assert_eq!(table[0][1], "r"); // relkind
    assert_eq!(table[0][2], "t"); // relhasindex
    assert_eq!(table[0][14], "heap"); // amname
    assert_eq!(
        flat(&rows(&mut s, &with_oid("d_columns"))),
        [
            "id|bigint|-|t|-||",
            "customer|integer|-|f|-||",
            "amount|numeric|-|f|-||",
            // varchar without a length: PostgreSQL 15 shows the type's name.
            "note|character varying|-|f|-||"
        ]
    );
    let indexes = rows(&mut s, &with_oid("d_indexes"));
    assert_eq!(indexes.len(), 2, "{indexes:?}");
    assert_eq!(indexes[0][0], "orders_pkey"); // primary first
    assert_eq!(
        indexes[0][5],
        // pg_get_indexdef(.., 0, true) is pretty: the table is named without its schema
        // when the search path finds it (PostgreSQL 15; slt/index_info.slt).
        "CREATE UNIQUE INDEX orders_pkey ON orders USING btree (id)"
    );
    assert_eq!(indexes[0][6], "PRIMARY KEY (id)");
    assert_eq!(indexes[1][0], "orders_customer");
    assert_eq!(indexes[1][6], "-"); // no constraint behind a plain index
    for empty in [
        "d_policies",
        "d_statistics",
        "d_publications",
        "d_inherits",
        "d_partitions",
    ] {
        assert_eq!(rows(&mut s, &with_oid(empty)).len(), 0, "{empty}");
    }
}

#[test]
fn pgbench_partition_probe_and_statistics_views() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    let probe = "select o.n, p.partstrat, pg_catalog.count(i.inhparent) from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n on (n.oid = c.relnamespace) cross join lateral (select pg_catalog.array_position(pg_catalog.current_schemas(true), n.nspname)) as o(n) left join pg_catalog.pg_partitioned_table as p on (p.partrelid = c.oid) left join pg_catalog.pg_inherits as i on (c.oid = i.inhparent) where c.relname = 'pgbench_accounts' and o.n is not null group by 1, 2 order by 1 asc limit 1";
    // No table yet: no row (pgbench then reports that pgbench_accounts is missing).
    assert!(rows(&mut s, probe).is_empty());
    ok(
        &mut s,
        "create table pgbench_accounts(aid int not null, bid int, abalance int, filler char(84))",
    );
    // In search_path position 2 (after pg_catalog), not partitioned, no partitions.
    assert_eq!(flat(&rows(&mut s, probe)), ["2|-|0"]);

    let wal_before = match &ok(&mut s, "select wal_bytes, wal_records from pg_stat_wal").rows[0][0]
    {
        Datum::Numeric(n) => n.parse::<u64>().unwrap(),
        other => panic!("{other:?}"),
    };
    ok(
        &mut s,
        "insert into pgbench_accounts select g, 1, 0, '' from generate_series(1, 500) g",
    );
    ok(&mut s, "checkpoint");
    let after = ok(&mut s, "select wal_bytes from pg_stat_wal").rows[0][0].clone();
    let Datum::Numeric(after) = after else {
        panic!("{after:?}")
    };
    assert!(after.parse::<u64>().unwrap() > wal_before);
    let ckpt = rows(
        &mut s,
        "select checkpoints_req, buffers_checkpoint > 0, buffers_backend from pg_stat_bgwriter",
    );
    assert_eq!(ckpt[0][0], "1");
    assert_eq!(ckpt[0][1], "t");
    assert_eq!(ckpt[0][2], "0");
    assert_eq!(
        flat(&rows(
            &mut s,
            "select tablename, hasindexes from pg_tables order by 1"
        )),
        ["pgbench_accounts|f"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select column_name, data_type from information_schema.columns where table_name = 'pgbench_accounts' and ordinal_position <= 2"
        )),
        ["aid|integer", "bid|integer"]
    );
    assert_eq!(
        flat(&rows(&mut s, "select current_user, current_database()")),
        ["alice|shop"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select 'pgbench_accounts'::regclass::oid = c.oid from pg_class c where relname = 'pgbench_accounts'"
        )),
        ["t"]
    );
}

#[test]
fn cached_parses_bind_again_at_every_execution() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    ok(&mut s, "create table k(a int primary key, b text)");
    ok(&mut s, "insert into k values (1, 'one')");
    let sql = "select * from k where a = $1";
    let run = |s: &mut Session| match s.execute_cached(sql, &[Datum::Int4(1)]).pop().unwrap() {
        Ok(Outcome::Done(q)) => q,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        run(&mut s).rows,
        vec![vec![Datum::Int4(1), Datum::Text("one".into())]]
    );
    // Same text, new table shape: the cached parse is bound against the new catalog.
    ok(&mut s, "drop table k");
    ok(&mut s, "create table k(a int primary key, b text, c int8)");
    ok(&mut s, "insert into k values (1, 'uno', 7)");
    assert_eq!(
        run(&mut s).rows,
        vec![vec![
            Datum::Int4(1),
            Datum::Text("uno".into()),
            Datum::Int8(7)
        ]]
    );
    ok(&mut s, "drop table k");
    match s.execute_cached(sql, &[Datum::Int4(1)]).pop().unwrap() {
        Err(e) => assert_eq!(e.sqlstate, "42P01"),
        other => panic!("{other:?}"),
    }
}

/// `pg_stat_user_tables` as PostgreSQL 15 counts (every expected row here is what it
/// showed for the same statements): `n_tup_*` and `n_ins_since_vacuum` count attempted
/// changes, rolled back or not; live rows and `n_mod_since_analyze` only committed ones;
/// a rolled-back insert or update leaves a dead version. A VACUUM recounts live and dead
/// rows and is recorded.
#[test]
fn pg_stat_user_tables_counts_rows_and_vacuums() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    ok(&mut s, "create table t(id int primary key, v int)");
    ok(
        &mut s,
        "insert into t select g, 0 from generate_series(1, 100) g",
    );
    ok(&mut s, "update t set v = 1 where id <= 30");
    ok(&mut s, "delete from t where id > 90");
    ok(&mut s, "begin");
    ok(&mut s, "insert into t values (1000, 0)");
    ok(&mut s, "rollback");
    ok(&mut s, "begin");
    ok(&mut s, "update t set v = 5 where id = 1");
    ok(&mut s, "rollback");
    let stats = "select relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_live_tup, n_dead_tup, vacuum_count, autovacuum_count, last_vacuum is null, n_ins_since_vacuum, n_mod_since_analyze from pg_stat_user_tables";
    // Dead: 30 old versions + 10 deleted rows + 1 rolled-back insert + 1 rolled-back
    // update's new version.
    assert_eq!(
        flat(&rows(&mut s, stats)),
        ["t|101|31|31|10|90|42|0|0|t|101|140"]
    );
    ok(&mut s, "vacuum t");
    assert_eq!(
        flat(&rows(&mut s, stats)),
        ["t|101|31|31|10|90|0|1|0|f|0|140"]
    );
    ok(&mut s, "insert into t values (2000, 0), (2001, 0)");
    assert_eq!(
        flat(&rows(&mut s, stats)),
        ["t|103|31|31|10|92|0|1|0|f|2|142"]
    );
    assert_eq!(
        flat(&rows(
            &mut s,
            "select count(*) from pg_catalog.pg_stat_all_tables where relid = 't'::regclass"
        )),
        ["1"]
    );
    assert_eq!(flat(&rows(&mut s, "show autovacuum")), ["on"]);
    // PostgreSQL 15's defaults, spelled as it shows them.
    assert_eq!(
        flat(&rows(
            &mut s,
            "select current_setting('autovacuum_vacuum_insert_threshold'), \
             current_setting('autovacuum_vacuum_insert_scale_factor')"
        )),
        ["1000|0.2"]
    );
}

/// `pg_stat_user_tables` counts scans as PostgreSQL does: each sequential scan and the
/// rows it returned (`seq_scan`, `seq_tup_read`), each index scan and the live rows it
/// fetched (`idx_scan`, `idx_tup_fetch`, NULL for a table with no index), a rolled-back
/// transaction's scans included.
#[test]
fn pg_stat_user_tables_counts_scans() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session(dir.path());
    ok(&mut s, "create table t(id int primary key, v int)");
    ok(
        &mut s,
        "insert into t select g, g % 7 from generate_series(1, 100) g",
    );
    ok(&mut s, "create table u(x int)");
    ok(&mut s, "insert into u values (1), (2), (3)");
    let stats = "select relname, seq_scan, seq_tup_read, idx_scan, idx_tup_fetch from pg_stat_user_tables where relname in ('t', 'u') order by relname";
    assert_eq!(flat(&rows(&mut s, stats)), ["t|0|0|0|0", "u|0|0|-|-"]);
    assert_eq!(flat(&rows(&mut s, "select v from t where id = 5")), ["5"]);
    assert!(rows(&mut s, "select v from t where id = 1000").is_empty());
    assert_eq!(flat(&rows(&mut s, "select sum(v) from t")), ["297"]);
    ok(&mut s, "begin");
    assert_eq!(
        flat(&rows(&mut s, "select count(*) from u where x > 1")),
        ["2"]
    );
    ok(&mut s, "rollback");
    assert_eq!(
        flat(&rows(&mut s, "select x from u order by x limit 1")),
        ["1"]
    );
    assert_eq!(flat(&rows(&mut s, stats)), ["t|1|100|2|1", "u|2|6|-|-"]);
}
