//! The relation cache and the catalog's vacuum: no statement reads the catalog relation
//! unless DDL changed it, whatever the database's DDL history; dead catalog rows are
//! reclaimed so the catalog stays the size of the live schema.

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::Isolation;
use walrus_engine::Engine;

fn engine(dir: &std::path::Path) -> Engine {
    let cfg: String = walrus_engine::settings::default_config_text(1 << 20)
        .lines()
        .map(|line| match line.split(" = ").next().unwrap_or("") {
            "wal_sync_method" => "wal_sync_method = \"none\"\n".to_string(),
            // Autovacuum stays out of the way: the test runs VACUUM itself.
            "autovacuum" => "autovacuum = false\n".to_string(),
            _ => format!("{line}\n"),
        })
        .collect();
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

fn columns() -> Vec<ColumnDef> {
    vec![
        ColumnDef::new("id", TypeId::Int4, true),
        ColumnDef::new("v", TypeId::Text, false),
    ]
}

/// `n` committed CREATE TABLE + DROP TABLE pairs.
fn churn(e: &Engine, n: usize) {
    for i in 0..n {
        let mut t = e.begin(Isolation::ReadCommitted);
        t.create_table(&format!("churn_{i}"), columns(), 100)
            .unwrap();
        t.commit().unwrap();
        let mut t = e.begin(Isolation::ReadCommitted);
        t.drop_table(&format!("churn_{i}")).unwrap();
        t.commit().unwrap();
    }
}

/// Catalog reads while a transaction that ran DDL inserts `rows` rows statement by
/// statement, looking its table up each time as the SQL layer does.
fn catalog_reads_of_a_ddl_transaction(e: &Engine, name: &str, rows: i32) -> u64 {
    let before = e.catalog_stats().unwrap().0;
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(name, columns(), 100).unwrap();
    t.create_index(name, &format!("{name}_pkey"), &[0], true, true)
        .unwrap();
    for i in 0..rows {
        t.next_statement();
        let def = t.table(name).unwrap();
        t.insert(&def, &[Datum::Int4(i), Datum::Text("x".into())])
            .unwrap();
    }
    t.commit().unwrap();
    e.catalog_stats().unwrap().0 - before
}

#[test]
fn ddl_history_costs_no_catalog_reads_and_vacuum_keeps_the_catalog_small() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    // On a fresh engine: a handful of reads for the DDL itself, none per statement.
    let fresh = catalog_reads_of_a_ddl_transaction(&e, "fresh", 500);
    assert!(
        fresh <= 4,
        "{fresh} catalog reads for 500 inserts after DDL"
    );

    churn(&e, 1000);
    let (_, pages_after_churn) = e.catalog_stats().unwrap();
    let reports = e.vacuum_with(None, None).unwrap();
    let catalog = reports
        .iter()
        .find(|r| r.table == walrus_engine::engine::CATALOG_NAME)
        .expect("a database-wide VACUUM covers the catalog");
    // Pruning on insert already turned the dead versions into dead line pointers; the
    // vacuum frees those (one per dropped table row at least).
    assert!(
        catalog.removed >= 1000,
        "the catalog's dead rows were reclaimed: {} removed",
        catalog.removed
    );
    // Another 1000 cycles reuse the reclaimed space instead of growing the relation.
    churn(&e, 1000);
    e.vacuum_with(None, None).unwrap();
    churn(&e, 1000);
    let (_, pages_after_more) = e.catalog_stats().unwrap();
    assert!(
        pages_after_more <= pages_after_churn,
        "the catalog grew from {pages_after_churn} to {pages_after_more} pages"
    );
    // And after that history, the same DDL transaction costs the same catalog reads.
    let after = catalog_reads_of_a_ddl_transaction(&e, "after", 500);
    assert!(
        after <= 4,
        "{after} catalog reads after 3000 DDL cycles (fresh: {fresh})"
    );

    // The cache never hides DDL: another transaction's committed DDL is seen by the
    // next statement, a rolled-back one never.
    let mut reader = e.begin(Isolation::ReadCommitted);
    assert!(reader.table("later").is_err());
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table("later", columns(), 100).unwrap();
    // The DDL transaction sees its own table; the reader does not (uncommitted).
    assert!(t.table("later").is_ok());
    reader.next_statement();
    assert!(reader.table("later").is_err());
    t.commit().unwrap();
    reader.next_statement();
    assert!(reader.table("later").is_ok(), "committed DDL is seen");
    // Reading "later" locked it until the reader ends (a DROP would wait for it).
    reader.commit().unwrap();
    let mut reader = e.begin(Isolation::ReadCommitted);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table("never", columns(), 100).unwrap();
    t.drop_table("later").unwrap();
    assert!(t.table("later").is_err(), "its own DROP is seen");
    t.rollback().unwrap();
    reader.next_statement();
    assert!(
        reader.table("never").is_err(),
        "rolled-back DDL is not seen"
    );
    assert!(
        reader.table("later").is_ok(),
        "a rolled-back DROP changes nothing"
    );
    // A DDL transaction sees DDL another transaction commits after its own began.
    let mut ddl = e.begin(Isolation::ReadCommitted);
    ddl.create_table("mine", columns(), 100).unwrap();
    assert!(ddl.table("mine").is_ok());
    let mut other = e.begin(Isolation::ReadCommitted);
    other.create_table("theirs", columns(), 100).unwrap();
    other.commit().unwrap();
    ddl.next_statement();
    assert!(
        ddl.table("theirs").is_ok(),
        "another session's committed DDL"
    );
    assert!(ddl.table("mine").is_ok());
    ddl.commit().unwrap();
    reader.commit().unwrap();
    e.shutdown().unwrap();
}
