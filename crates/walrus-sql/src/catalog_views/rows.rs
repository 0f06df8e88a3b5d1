//! The rows of each virtual table, computed from a [`Snapshot`].

use std::collections::BTreeMap;

use walrus_engine::access::datum::{ArrayValue, Datum, TypeId};
use walrus_engine::catalog::{
    ColumnDef, ColumnDefault, ConstraintKind, DeclaredType, FkAction, TableDef,
};

use super::{
    b, constraint_oid, o, proc, relfile_oid, t, xid, Snapshot, AM_BTREE, AM_HEAP, NS_CATALOG,
    NS_INFORMATION_SCHEMA, NS_PUBLIC, ROLE_OID, TYPES,
};

/// PostgreSQL 15's name for a NOT NULL column's constraint in `information_schema`:
/// `<namespace oid>_<table oid>_<attnum>_not_null`.
fn not_null_name(tbl: &TableDef, i: usize) -> String {
    format!(
        "{}_{}_{}_not_null",
        NS_PUBLIC,
        relfile_oid(tbl.relfile),
        tbl.attnum(i)
    )
}

/// The columns a CHECK expression names, in order of first mention.
fn check_columns(tbl: &TableDef, expr: &str) -> Vec<usize> {
    crate::stored_expr::parse(expr)
        .map(|e| {
            crate::stored_expr::columns_mentioned(&e)
                .iter()
                .filter_map(|n| tbl.column_index(n))
                .collect()
        })
        .unwrap_or_default()
}

impl Snapshot {
    /// `pg_constraint` rows of the CHECK and FOREIGN KEY constraints.
    fn constraint_rows(&self) -> Vec<Vec<Datum>> {
        use walrus_engine::catalog::ConstraintKind;
        let int2s = |tbl: &TableDef, cols: &[usize]| {
            Datum::Array(Box::new(ArrayValue {
                elem: TypeId::Int2,
                items: cols.iter().map(|&c| Datum::Int2(tbl.attnum(c))).collect(),
            }))
        };
        self.constraints()
            .map(|(tbl, c)| {
                let fk = match &c.kind {
                    ConstraintKind::ForeignKey(fk) => Some(fk),
                    ConstraintKind::Check { .. } => None,
                };
                let parent = fk.and_then(|fk| self.tables.iter().find(|t| t.name == fk.ref_table));
                // The referenced table's unique index the key is checked through.
                let index = fk
                    .zip(parent)
                    .and_then(|(fk, p)| p.index_on(&fk.ref_columns, true));
                let letter = |ch: char| t(&ch.to_string());
                let check_columns: Vec<usize> = match &c.kind {
                    ConstraintKind::Check { expr } => check_columns(tbl, expr),
                    ConstraintKind::ForeignKey(fk) => fk.columns.clone(),
                };
                vec![
                    o(constraint_oid(tbl, c)),
                    t(&c.name),
                    o(NS_PUBLIC),
                    t(if fk.is_some() { "f" } else { "c" }),
                    b(c.deferrable),
                    b(c.initially_deferred),
                    b(true),
                    o(relfile_oid(tbl.relfile)),
                    o(0),
                    o(index.map_or(0, |i| relfile_oid(i.relfile))),
                    o(0),
                    o(parent.map_or(0, |p| relfile_oid(p.relfile))),
                    fk.map_or(t(" "), |f| letter(f.on_update.letter())),
                    fk.map_or(t(" "), |f| letter(f.on_delete.letter())),
                    fk.map_or(t(" "), |f| letter(if f.match_full { 'f' } else { 's' })),
                    b(true),
                    Datum::Int4(0),
                    b(false),
                    int2s(tbl, &check_columns),
                    fk.zip(parent)
                        .map_or(Datum::Null, |(f, p)| int2s(p, &f.ref_columns)),
                ]
            })
            .collect()
    }

    pub(super) fn rows(&self, name: &str, settings: &BTreeMap<String, String>) -> Vec<Vec<Datum>> {
        if let Some(rows) = self.activity_rows(name) {
            return rows;
        }
        let n = Datum::Null;
        match name {
            "pg_namespace" => vec![
                vec![o(NS_CATALOG), t("pg_catalog"), o(ROLE_OID), n.clone()],
                vec![o(NS_PUBLIC), t("public"), o(ROLE_OID), n.clone()],
                vec![
                    o(NS_INFORMATION_SCHEMA),
                    t("information_schema"),
                    o(ROLE_OID),
                    n,
                ],
            ],
            "pg_class" => {
                let mut rows = Vec::new();
                for tbl in &self.tables {
                    rows.push(self.class_row(
                        relfile_oid(tbl.relfile),
                        &tbl.name,
                        "r",
                        AM_HEAP,
                        tbl.columns.len(),
                        !tbl.indexes.is_empty(),
                        tbl.fillfactor,
                    ));
                    // CHECK constraints counted; foreign keys on either side are
                    // PostgreSQL's triggers (psql shows them when this is set).
                    if let Some(row) = rows.last_mut() {
                        use walrus_engine::catalog::ConstraintKind;
                        let checks = tbl
                            .constraints
                            .iter()
                            .filter(|c| matches!(c.kind, ConstraintKind::Check { .. }))
                            .count();
                        let fks = tbl.constraints.len() - checks + tbl.referenced_by.len();
                        row[18] = Datum::Int2(checks.min(i16::MAX as usize) as i16);
                        row[20] = b(fks > 0);
                    }
                    // ANALYZE's counts; never analyzed: 0 pages, -1 rows (PostgreSQL's).
                    if let (Some(st), Some(row)) = (self.statistics.get(&tbl.name), rows.last_mut())
                    {
                        row[9] = Datum::Int4(st.relpages.min(i32::MAX as u32) as i32);
                        row[10] = Datum::Float8(st.reltuples);
                    }
                }
                for (_, idx) in self.indexes() {
                    rows.push(self.class_row(
                        relfile_oid(idx.relfile),
                        &idx.name,
                        "i",
                        AM_BTREE,
                        idx.columns.len(),
                        false,
                        100,
                    ));
                }
                for q in &self.sequences {
                    // A sequence's three columns (last_value, log_cnt, is_called), no AM.
                    rows.push(self.class_row(
                        relfile_oid(q.relfile),
                        &q.name,
                        "S",
                        0,
                        3,
                        false,
                        100,
                    ));
                }
                rows
            }
            // adbin is the default's SQL text (PostgreSQL: a node tree that only
            // pg_get_expr reads; walrus's pg_get_expr returns it as is).
            "pg_attrdef" => self
                .tables
                .iter()
                .flat_map(|tbl| {
                    (0..tbl.columns.len()).filter_map(move |i| match tbl.default_of(i) {
                        Some(ColumnDefault::Expr(e)) => Some(vec![
                            o(relfile_oid(tbl.relfile) * 1000 + i as i64 + 1),
                            o(relfile_oid(tbl.relfile)),
                            Datum::Int2(tbl.attnum(i)),
                            t(e),
                        ]),
                        _ => None,
                    })
                })
                .collect(),
            "pg_sequence" => self
                .sequences
                .iter()
                .map(|q| {
                    vec![
                        o(relfile_oid(q.relfile)),
                        o(q.data_type.pg_oid() as i64),
                        Datum::Int8(q.start),
                        Datum::Int8(q.increment),
                        Datum::Int8(q.max),
                        Datum::Int8(q.min),
                        Datum::Int8(q.cache),
                        b(q.cycle),
                    ]
                })
                .collect(),
            "pg_attribute" => {
                let mut rows = Vec::new();
                for tbl in &self.tables {
                    for (i, c) in tbl.columns.iter().enumerate() {
                        // The declared type (varchar is 1043) and its modifier, as
                        // RowDescription reports them.
                        let type_oid = crate::rel::column_type_oid(c) as i64;
                        let len = TYPES
                            .iter()
                            .find(|(o, ..)| *o == type_oid)
                            .map_or(-1, |r| r.3);
                        rows.push(vec![
                            o(relfile_oid(tbl.relfile)),
                            t(&c.name),
                            o(type_oid),
                            Datum::Int4(-1),
                            Datum::Int2(len),
                            Datum::Int2(tbl.attnum(i)),
                            Datum::Int4(0),
                            Datum::Int4(-1),
                            // atttypmod: PostgreSQL's encoding, kept in the catalog.
                            Datum::Int4(c.typmod),
                            b(len > 0),
                            t(if len == 8 { "d" } else { "i" }),
                            t(if len > 0 { "p" } else { "x" }),
                            t(""),
                            b(c.not_null),
                            // Identity columns have no pg_attrdef row.
                            b(matches!(tbl.default_of(i), Some(ColumnDefault::Expr(_)))),
                            b(false),
                            t(match tbl.default_of(i) {
                                Some(ColumnDefault::Identity { always: true, .. }) => "a",
                                Some(ColumnDefault::Identity { always: false, .. }) => "d",
                                _ => "",
                            }),
                            t(""),
                            b(false),
                            b(true),
                            Datum::Int4(0),
                            o(if c.ty == TypeId::Text { 100 } else { 0 }),
                        ]);
                    }
                }
                rows
            }
            "pg_type" => super::type_rows()
                .map(|row| {
                    let (oid, _, _, len, array_oid, io) = row.scalar;
                    let array = row.elem.is_some();
                    // int2vector and oidvector are array types (of int2 and oid,
                    // subscripts from 0).
                    let vector = !array && matches!(oid, 22 | 30);
                    let category = match oid {
                        _ if array || vector => "A",
                        16 => "B",
                        20 | 21 | 23 | 26 | 700 | 701 | 1700 | 24 | 2205 | 2206 | 4089 => "N",
                        1082 | 1083 | 1114 | 1184 | 1266 => "D",
                        1186 => "T",
                        17 | 2950 | 114 | 3802 | 28 | 1033 | 3220 => "U",
                        18 | 194 => "Z",
                        869 => "I",
                        2277 => "P",
                        _ => "S",
                    };
                    let fun = |suffix: &str| {
                        if array {
                            format!("array_{suffix}")
                        } else if oid == 1033 && matches!(suffix, "recv" | "send") {
                            "-".to_string() // aclitem has no binary form
                        } else {
                            format!("{io}{suffix}")
                        }
                    };
                    let len = if array { -1 } else { len };
                    let align = match (array, oid) {
                        (_, 20 | 701 | 1083 | 1114 | 1184 | 1186 | 1266 | 3220 | 2277) => "d",
                        (false, 16 | 17 | 18 | 19 | 2950) => "c",
                        (false, 21) => "s",
                        _ => "i",
                    };
                    let collation = !array && matches!(oid, 25 | 1042 | 1043 | 19 | 194)
                        || array && matches!(oid, 25 | 1042 | 1043 | 19);
                    vec![
                        o(row.oid),
                        t(&row.name()),
                        o(NS_CATALOG),
                        o(ROLE_OID),
                        Datum::Int2(len),
                        b(len > 0 && len <= 8),
                        t(if oid == 2277 { "p" } else { "b" }),
                        t(category),
                        b(!array && matches!(oid, 25 | 701 | 1184 | 16 | 26 | 1186)),
                        b(true),
                        t(","),
                        o(0),
                        proc(if array || vector {
                            "array_subscript_handler"
                        } else if oid == 19 {
                            // name's bytes are subscriptable as "char" items.
                            "raw_array_subscript_handler"
                        } else {
                            "-"
                        }),
                        o(if array {
                            oid
                        } else if oid == 22 {
                            21
                        } else if oid == 30 {
                            26
                        } else if oid == 19 {
                            18
                        } else {
                            0
                        }),
                        o(if array { 0 } else { array_oid }),
                        proc(&fun("in")),
                        proc(&fun("out")),
                        proc(&fun("recv")),
                        proc(&fun("send")),
                        proc(match oid {
                            1042 => "bpchartypmodin",
                            1043 => "varchartypmodin",
                            1700 => "numerictypmodin",
                            1083 => "timetypmodin",
                            1266 => "timetztypmodin",
                            1114 => "timestamptypmodin",
                            1184 => "timestamptztypmodin",
                            1186 => "intervaltypmodin",
                            _ => "-",
                        }),
                        proc(match oid {
                            1042 => "bpchartypmodout",
                            1043 => "varchartypmodout",
                            1700 => "numerictypmodout",
                            1083 => "timetypmodout",
                            1266 => "timetztypmodout",
                            1114 => "timestamptypmodout",
                            1184 => "timestamptztypmodout",
                            1186 => "intervaltypmodout",
                            _ => "-",
                        }),
                        proc(if array { "array_typanalyze" } else { "-" }),
                        t(align),
                        t(match oid {
                            869 if !array => "m",
                            _ if len > 0 || vector => "p",
                            _ => "x",
                        }),
                        b(false),
                        o(0),
                        Datum::Int4(-1),
                        Datum::Int4(0),
                        // name (and name[]) sort in the "C" collation (950), the
                        // other text types in the database's default (100).
                        o(match (collation, oid) {
                            (false, _) => 0,
                            (true, 19) => 950,
                            (true, _) => 100,
                        }),
                    ]
                })
                .collect(),
            "pg_index" => self
                .indexes()
                .map(|(tbl, idx)| {
                    let key = idx.columns.iter().map(|&c| tbl.attnum(c)).collect();
                    // No DESC or NULLS FIRST keys in walrus: every option is 0.
                    let options = vec![0; idx.columns.len()];
                    vec![
                        o(relfile_oid(idx.relfile)),
                        o(relfile_oid(tbl.relfile)),
                        Datum::Int2(idx.columns.len() as i16),
                        Datum::Int2(idx.columns.len() as i16),
                        b(idx.unique),
                        b(false),
                        b(idx.primary),
                        b(false),
                        b(true),
                        b(false),
                        b(true),
                        b(false),
                        b(true),
                        b(true),
                        b(false),
                        Datum::Int2Vector(key),
                        n.clone(),
                        n.clone(),
                        Datum::Int2Vector(options),
                    ]
                })
                .collect(),
            "pg_constraint" => self
                .constraint_rows()
                .into_iter()
                .chain(self.indexes().filter(|(_, i)| i.unique).map(|(tbl, idx)| {
                    let key: Vec<Datum> = idx
                        .columns
                        .iter()
                        .map(|&c| Datum::Int2(tbl.attnum(c)))
                        .collect();
                    vec![
                        o(relfile_oid(idx.relfile)),
                        t(&idx.name),
                        o(NS_PUBLIC),
                        t(if idx.primary { "p" } else { "u" }),
                        b(false),
                        b(false),
                        b(true),
                        o(relfile_oid(tbl.relfile)),
                        o(0),
                        o(relfile_oid(idx.relfile)),
                        o(0),
                        o(0),
                        t(" "),
                        t(" "),
                        t(" "),
                        b(true),
                        Datum::Int4(0),
                        b(true),
                        Datum::Array(Box::new(ArrayValue {
                            elem: TypeId::Int2,
                            items: key,
                        })),
                    ]
                }))
                .collect(),
            "pg_am" => vec![
                vec![o(AM_HEAP), t("heap"), proc("heap_tableam_handler"), t("t")],
                vec![o(AM_BTREE), t("btree"), proc("bthandler"), t("i")],
            ],
            "pg_database" => vec![vec![
                o(5),
                t(&self.database),
                o(ROLE_OID),
                Datum::Int4(6),
                t("c"),
                b(false),
                b(true),
                Datum::Int4(-1),
                xid(self.frozen_xid),
                xid(1),
                o(1663),
                t("C.UTF-8"),
                t("C.UTF-8"),
            ]],
            "pg_roles" => vec![vec![
                t(&self.user),
                b(true),
                b(true),
                b(true),
                b(true),
                b(true),
                b(true),
                Datum::Int4(-1),
                t("********"),
                n.clone(),
                b(true),
                n,
                o(ROLE_OID),
            ]],
            "pg_user" => vec![vec![
                t(&self.user),
                o(ROLE_OID),
                b(true),
                b(true),
                b(true),
                b(true),
                t("********"),
            ]],
            "pg_tablespace" => vec![
                vec![o(1663), t("pg_default"), o(ROLE_OID)],
                vec![o(1664), t("pg_global"), o(ROLE_OID)],
            ],
            "pg_settings" => settings
                .iter()
                .filter(|(k, _)| !k.starts_with("walrus."))
                .map(|(k, v)| {
                    vec![
                        t(k),
                        t(v),
                        n.clone(),
                        t("walrus"),
                        n.clone(),
                        n.clone(),
                        t("user"),
                        t("string"),
                        t("default"),
                    ]
                })
                .collect(),
            "pg_stats" => {
                let mut rows = Vec::new();
                for tbl in &self.tables {
                    let Some(st) = self.statistics.get(&tbl.name) else {
                        continue;
                    };
                    for c in &st.columns {
                        let mut row = vec![
                            t("public"),
                            t(&tbl.name),
                            t(&c.name),
                            b(false),
                            Datum::Float8(c.null_frac),
                            Datum::Int4(c.avg_width),
                            Datum::Float8(c.n_distinct),
                        ];
                        row.resize(14, Datum::Null);
                        rows.push(row);
                    }
                }
                rows
            }
            "pg_tables" => self
                .tables
                .iter()
                .map(|tbl| {
                    vec![
                        t("public"),
                        t(&tbl.name),
                        t(&self.user),
                        n.clone(),
                        b(!tbl.indexes.is_empty()),
                        b(false),
                        b(false),
                        b(false),
                    ]
                })
                .collect(),
            "pg_indexes" => self
                .indexes()
                .map(|(tbl, idx)| {
                    vec![
                        t("public"),
                        t(&tbl.name),
                        t(&idx.name),
                        n.clone(),
                        t(&Self::index_def(tbl, idx, false)),
                    ]
                })
                .collect(),
            "walrus_stat_plan_cache" => vec![crate::settings::PLAN_CACHE_KEYS
                .iter()
                .map(|k| {
                    settings
                        .get(*k)
                        .and_then(|v| v.parse::<i64>().ok())
                        .map_or(Datum::Null, Datum::Int8)
                })
                .collect()],
            "walrus_stat_dwb" => {
                let (batches, pages, bytes, waits) = self.dwb;
                vec![vec![
                    Datum::Int8(batches as i64),
                    Datum::Int8(pages as i64),
                    Datum::Int8(bytes as i64),
                    Datum::Float8(if batches == 0 {
                        0.0
                    } else {
                        pages as f64 / batches as f64
                    }),
                    Datum::Int8(waits as i64),
                ]]
            }
            "walrus_stat_parallel" => vec![vec![
                Datum::Int8(self.parallel.0 as i64),
                Datum::Int8(self.parallel.1 as i64),
                Datum::Int8(self.parallel.2 as i64),
                Datum::Int4(walrus_engine::engine::MAX_PARALLEL_WORKERS as i32),
            ]],
            "walrus_stat_buffers" => vec![vec![
                Datum::Int8(self.buffer_ring.0 as i64),
                Datum::Int8(self.buffer_hits as i64),
                Datum::Int8(self.buffers_alloc as i64),
                Datum::Int8(self.buffer_ring.1 as i64),
            ]],
            "walrus_stat_page_protection" => vec![vec![
                Datum::Text(self.page_protection.into()),
                Datum::Int8(self.atomic_page_writes as i64),
            ]],
            "walrus_stat_wal" => vec![vec![
                Datum::Int8(self.wal_writer_flushes as i64),
                Datum::Int8(self.wal_segments_prepared_ahead as i64),
                Datum::Int8(self.wal_segments_created_by_sessions as i64),
                Datum::Int8(self.wal_flush_piggybacks as i64),
                Datum::Text(self.wal_sync_method.to_string()),
                Datum::Text(self.wal_durability.to_string()),
                Datum::Int8(self.wal_pmem.0 as i64),
                Datum::Int8(self.wal_pmem.1 as i64),
                Datum::Float8(self.wal_pmem.2 as f64 / 1e6),
            ]],
            "pg_stat_wal" => vec![vec![
                Datum::Int8(self.wal_records as i64),
                Datum::Int8(self.wal_fpi as i64),
                Datum::Numeric(self.wal_bytes.to_string()),
                Datum::Int8(self.wal_buffer_full as i64),
                Datum::Int8(self.wal_writes as i64),
                Datum::Int8(self.wal_syncs as i64),
                Datum::Float8(0.0),
                Datum::Float8(0.0),
            ]],
            "pg_stat_user_tables" | "pg_stat_all_tables" => {
                let l = |v: u64| Datum::Int8(v as i64);
                let when = |t: Option<std::time::SystemTime>| {
                    t.map_or(Datum::Null, |t| {
                        Datum::TimestampTz(crate::value::system_time_to_pg(t))
                    })
                };
                self.tables
                    .iter()
                    .zip(&self.activity)
                    .map(|(tbl, a)| {
                        // NULL for a table without indexes, as PostgreSQL's.
                        let index_count = |v: u64| {
                            if tbl.indexes.is_empty() {
                                Datum::Null
                            } else {
                                l(v)
                            }
                        };
                        vec![
                            o(relfile_oid(tbl.relfile)),
                            t("public"),
                            t(&tbl.name),
                            l(a.seq_scans),
                            l(a.seq_tup_read),
                            index_count(a.idx_scans),
                            index_count(a.idx_tup_fetch),
                            l(a.inserted),
                            l(a.updated),
                            l(a.deleted),
                            l(a.hot_updated),
                            l(a.live),
                            l(a.dead),
                            l(a.mod_since_analyze),
                            l(a.ins_since_vacuum),
                            when(a.last_vacuum),
                            when(a.last_autovacuum),
                            when(a.last_analyze),
                            when(a.last_autoanalyze),
                            l(a.vacuums),
                            l(a.autovacuums),
                            l(a.analyzes),
                            l(a.autoanalyzes),
                        ]
                    })
                    .collect()
            }
            "pg_stat_database" => {
                let l = |v: u64| Datum::Int8(v as i64);
                let mut row = vec![
                    o(5),
                    t(&self.database),
                    Datum::Null,
                    Datum::Null,
                    Datum::Null,
                    // A read is a miss that loaded the page (PostgreSQL's blks_read
                    // also counts reads the OS cache served).
                    l(self.buffers_alloc),
                    l(self.buffer_hits),
                ];
                row.extend(std::iter::repeat_n(Datum::Null, 6));
                row.extend([l(self.temp_files.0), l(self.temp_files.1)]);
                vec![row]
            }
            "pg_stat_bgwriter" => {
                let c = &self.checkpoints;
                let (checkpoint, clean, maxwritten, backend) = self.bgwriter;
                vec![vec![
                    Datum::Int8(c.timed as i64),
                    Datum::Int8(c.requested as i64),
                    Datum::Float8(c.write_ms as f64),
                    Datum::Float8(c.sync_ms as f64),
                    Datum::Int8(checkpoint as i64),
                    Datum::Int8(clean as i64),
                    Datum::Int8(maxwritten as i64),
                    // Measured: pages written by threads that are neither page writers
                    // nor running a checkpoint. Zero by design (DESIGN §4).
                    Datum::Int8(backend as i64),
                    Datum::Int8(0),
                    Datum::Int8(self.buffers_alloc as i64),
                ]]
            }
            "walrus_stat_clog" => {
                let c = &self.clog;
                vec![vec![
                    Datum::Int8(c.fast_path_sets as i64),
                    Datum::Int8(c.lock_waits as i64),
                    Datum::Int8(c.group_updates as i64),
                    Datum::Int8(c.group_members as i64),
                    Datum::Float8(if c.group_updates == 0 {
                        0.0
                    } else {
                        c.group_members as f64 / c.group_updates as f64
                    }),
                    Datum::Int8(c.max_group_size as i64),
                ]]
            }
            "walrus_flush_detail" => self.flush_detail_rows(),
            "pg_control_checkpoint" => {
                let c = &self.control;
                let seg = self.flush_segment_name(c.redo_lsn);
                vec![vec![
                    t(&c.checkpoint_lsn.to_string()),
                    t(&c.redo_lsn.to_string()),
                    t(&seg),
                    Datum::Int4(1),
                    Datum::Int4(1),
                    b(self.full_page_writes),
                    t(&format!("0:{}", c.next_xid.0)),
                    o(c.next_relfile as i64),
                    xid(1),
                    xid(0),
                    xid(self.frozen_xid),
                    o(1),
                    xid(c.next_xid.0),
                    xid(1),
                    o(1),
                    xid(0),
                    xid(0),
                    if c.checkpoint_time == 0 {
                        n
                    } else {
                        Datum::TimestampTz(crate::value::system_time_to_pg(
                            std::time::UNIX_EPOCH
                                + std::time::Duration::from_secs(c.checkpoint_time),
                        ))
                    },
                ]]
            }
            _ => Vec::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn class_row(
        &self,
        oid: i64,
        name: &str,
        kind: &str,
        am: i64,
        natts: usize,
        has_index: bool,
        fillfactor: u8,
    ) -> Vec<Datum> {
        let options = if fillfactor < 100 {
            Datum::Array(Box::new(ArrayValue {
                elem: TypeId::Text,
                items: vec![t(&format!("fillfactor={fillfactor}"))],
            }))
        } else {
            Datum::Null
        };
        vec![
            o(oid),
            t(name),
            o(NS_PUBLIC),
            o(0),
            o(0),
            o(ROLE_OID),
            o(am),
            o(oid),
            o(0),
            Datum::Int4(0),
            Datum::Float8(-1.0),
            Datum::Int4(0),
            o(0),
            b(has_index),
            b(false),
            t("p"),
            t(kind),
            Datum::Int2(natts as i16),
            Datum::Int2(0),
            b(false),
            b(false),
            b(false),
            b(false),
            b(false),
            b(true),
            t("d"),
            b(false),
            o(0),
            xid(0),
            xid(0),
            Datum::Null,
            options,
        ]
    }

    pub(super) fn information_schema_rows(&self, name: &str) -> Vec<Vec<Datum>> {
        let db = t(&self.database);
        match name {
            "tables" => self
                .tables
                .iter()
                .map(|tbl| vec![db.clone(), t("public"), t(&tbl.name), t("BASE TABLE")])
                .collect(),
            "columns" => self
                .tables
                .iter()
                .flat_map(|tbl| {
                    let db = db.clone();
                    tbl.columns.iter().enumerate().map(move |(i, c)| {
                        vec![
                            db.clone(),
                            t("public"),
                            t(&tbl.name),
                            t(&c.name),
                            Datum::Int4(tbl.attnum(i) as i32),
                            match tbl.default_of(i) {
                                Some(ColumnDefault::Expr(e)) => t(e),
                                _ => Datum::Null,
                            },
                            t(if c.not_null { "NO" } else { "YES" }),
                            t(information_schema_type(c)),
                            information_schema_length(c).map_or(Datum::Null, Datum::Int4),
                            information_schema_precision(c).map_or(Datum::Null, Datum::Int4),
                            information_schema_scale(c).map_or(Datum::Null, Datum::Int4),
                        ]
                    })
                })
                .collect(),
            "schemata" => ["pg_catalog", "public", "information_schema"]
                .iter()
                .map(|s| vec![db.clone(), t(s), t(&self.user)])
                .collect(),
            "table_constraints" => self.information_schema_constraints(&db),
            "key_column_usage" => self.key_column_usage(&db),
            "referential_constraints" => self
                .constraints()
                .filter_map(|(_, c)| {
                    let fk = c.foreign_key()?;
                    let parent = self.tables.iter().find(|t| t.name == fk.ref_table)?;
                    let index = parent.index_on(&fk.ref_columns, true)?;
                    let rule = |a: FkAction| match a {
                        FkAction::NoAction => "NO ACTION",
                        FkAction::Restrict => "RESTRICT",
                        FkAction::Cascade => "CASCADE",
                        FkAction::SetNull => "SET NULL",
                        FkAction::SetDefault => "SET DEFAULT",
                    };
                    Some(vec![
                        db.clone(),
                        t("public"),
                        t(&c.name),
                        db.clone(),
                        t("public"),
                        t(&index.name),
                        t(if fk.match_full { "FULL" } else { "NONE" }),
                        t(rule(fk.on_update)),
                        t(rule(fk.on_delete)),
                    ])
                })
                .collect(),
            "check_constraints" => {
                let mut rows: Vec<Vec<Datum>> = self
                    .constraints()
                    .filter_map(|(tbl, c)| match &c.kind {
                        ConstraintKind::Check { .. } => Some(vec![
                            db.clone(),
                            t("public"),
                            t(&c.name),
                            t(self
                                .constraint_def(tbl, c, false)
                                .strip_prefix("CHECK ")
                                .unwrap_or_default()),
                        ]),
                        ConstraintKind::ForeignKey(_) => None,
                    })
                    .collect();
                // NOT NULL columns are CHECK constraints there (PostgreSQL 15).
                for tbl in &self.tables {
                    for (i, col) in tbl.columns.iter().enumerate() {
                        if col.not_null {
                            rows.push(vec![
                                db.clone(),
                                t("public"),
                                t(&not_null_name(tbl, i)),
                                t(&format!("{} IS NOT NULL", col.name)),
                            ]);
                        }
                    }
                }
                rows
            }
            "constraint_column_usage" => {
                let mut rows = Vec::new();
                let mut push = |tbl: &TableDef, cols: &[usize], name: &str| {
                    for &i in cols {
                        if let Some(col) = tbl.columns.get(i) {
                            rows.push(vec![
                                db.clone(),
                                t("public"),
                                t(&tbl.name),
                                t(&col.name),
                                db.clone(),
                                t("public"),
                                t(name),
                            ]);
                        }
                    }
                };
                for (tbl, idx) in self.indexes().filter(|(_, i)| i.unique) {
                    push(tbl, &idx.columns, &idx.name);
                }
                for (tbl, c) in self.constraints() {
                    match &c.kind {
                        ConstraintKind::ForeignKey(fk) => {
                            if let Some(p) = self.tables.iter().find(|t| t.name == fk.ref_table) {
                                push(p, &fk.ref_columns, &c.name);
                            }
                        }
                        ConstraintKind::Check { expr } => {
                            let cols = check_columns(tbl, expr);
                            push(tbl, &cols, &c.name);
                        }
                    }
                }
                rows
            }
            _ => Vec::new(),
        }
    }

    /// `information_schema.table_constraints`: CHECK (NOT NULL columns included, as in
    /// PostgreSQL 15), FOREIGN KEY, PRIMARY KEY and UNIQUE.
    fn information_schema_constraints(&self, db: &Datum) -> Vec<Vec<Datum>> {
        let yes = |b: bool| t(if b { "YES" } else { "NO" });
        let row = |tbl: &TableDef,
                   name: &str,
                   kind: &str,
                   deferrable: bool,
                   deferred: bool,
                   nulls: Datum| {
            vec![
                db.clone(),
                t("public"),
                t(name),
                db.clone(),
                t("public"),
                t(&tbl.name),
                t(kind),
                yes(deferrable),
                yes(deferred),
                t("YES"),
                nulls,
            ]
        };
        let mut rows = Vec::new();
        for (tbl, c) in self.constraints() {
            let kind = match c.kind {
                ConstraintKind::Check { .. } => "CHECK",
                ConstraintKind::ForeignKey(_) => "FOREIGN KEY",
            };
            rows.push(row(
                tbl,
                &c.name,
                kind,
                c.deferrable,
                c.initially_deferred,
                Datum::Null,
            ));
        }
        for (tbl, idx) in self.indexes().filter(|(_, i)| i.unique) {
            let (kind, nulls) = if idx.primary {
                ("PRIMARY KEY", Datum::Null)
            } else {
                ("UNIQUE", t("YES"))
            };
            rows.push(row(tbl, &idx.name, kind, false, false, nulls));
        }
        for tbl in &self.tables {
            for (i, col) in tbl.columns.iter().enumerate() {
                if col.not_null {
                    rows.push(row(
                        tbl,
                        &not_null_name(tbl, i),
                        "CHECK",
                        false,
                        false,
                        Datum::Null,
                    ));
                }
            }
        }
        rows
    }

    /// `information_schema.key_column_usage`: the columns of PRIMARY KEY, UNIQUE and
    /// FOREIGN KEY constraints, in key order (a foreign key's with the position of the
    /// column it references in the referenced key).
    fn key_column_usage(&self, db: &Datum) -> Vec<Vec<Datum>> {
        let mut rows = Vec::new();
        let mut push =
            |tbl: &TableDef, name: &str, col: usize, pos: usize, unique_pos: Option<usize>| {
                if let Some(c) = tbl.columns.get(col) {
                    rows.push(vec![
                        db.clone(),
                        t("public"),
                        t(name),
                        db.clone(),
                        t("public"),
                        t(&tbl.name),
                        t(&c.name),
                        Datum::Int4(pos as i32 + 1),
                        unique_pos.map_or(Datum::Null, |p| Datum::Int4(p as i32 + 1)),
                    ]);
                }
            };
        for (tbl, idx) in self.indexes().filter(|(_, i)| i.unique) {
            for (k, &c) in idx.columns.iter().enumerate() {
                push(tbl, &idx.name, c, k, None);
            }
        }
        for (tbl, c) in self.constraints() {
            let Some(fk) = c.foreign_key() else { continue };
            let index = self
                .tables
                .iter()
                .find(|t| t.name == fk.ref_table)
                .and_then(|p| p.index_on(&fk.ref_columns, true));
            for (k, (&col, &rcol)) in fk.columns.iter().zip(&fk.ref_columns).enumerate() {
                let unique_pos = index.and_then(|i| i.columns.iter().position(|&x| x == rcol));
                push(tbl, &c.name, col, k, unique_pos);
            }
        }
        rows
    }

    /// The WAL segment file holding `lsn`, named as walrus names its segments.
    fn flush_segment_name(&self, lsn: walrus_base::Lsn) -> String {
        format!("{:016X}", lsn.0 / self.control.wal_segment_size.max(1))
    }

    fn flush_detail_rows(&self) -> Vec<Vec<Datum>> {
        let f = &self.flush;
        let l = |v: u64| Datum::Int8(v.min(i64::MAX as u64) as i64);
        let shared = |pages: u64, batches: u64, rate: u64, thread: String| {
            vec![
                t(&thread),
                l(pages),
                l(batches),
                l(rate),
                l(f.dirty_pages as u64),
                l(f.queue_length as u64),
                f.oldest_rec_lsn.map_or(Datum::Null, |x| t(&x.to_string())),
                t(&f.redo_lsn.to_string()),
                t(&f.insert_lsn.to_string()),
                t(if f.incremental { "incremental" } else { "full" }),
                Datum::Float8(f.estimated_recovery_secs),
                Datum::Float8(f.recovery_time_target.as_secs_f64()),
                Datum::Float8(f.replay_rate.bytes_per_sec as f64 / 1e6),
                l(f.replay_rate.fixed_ms),
                t(f.replay_rate.source.name()),
                if f.lag_target == u64::MAX {
                    Datum::Null
                } else {
                    l(f.lag_target)
                },
                l(f.last_checkpoint_ms),
                l(f.checkpoint_target_time.as_millis() as u64),
                l(self.backend_clean_waits),
            ]
        };
        let mut rows: Vec<Vec<Datum>> = f
            .threads
            .iter()
            .enumerate()
            .map(|(i, &(p, b, r))| shared(p, b, r, format!("pagewriter {i}")))
            .collect();
        let (p, b, r) = f
            .threads
            .iter()
            .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
        rows.push(shared(p, b, r, "total".into()));
        rows
    }
}

/// `information_schema.columns.data_type`: the SQL standard's spelling, as PostgreSQL
/// gives it (`character varying`, `character`, `ARRAY` for any array).
pub(super) fn information_schema_type(c: &ColumnDef) -> &'static str {
    match (c.ty, c.declared) {
        (TypeId::Array(_), _) => "ARRAY",
        (TypeId::Text, DeclaredType::Varchar) => "character varying",
        (TypeId::Text, DeclaredType::Char) => "character",
        (ty, _) => ty.name(),
    }
}

/// `character_maximum_length`: the declared length of `varchar(n)` / `char(n)`.
fn information_schema_length(c: &ColumnDef) -> Option<i32> {
    (c.ty == TypeId::Text && c.declared != DeclaredType::Plain && c.typmod >= 4)
        .then_some(c.typmod - 4)
}

/// `numeric_precision`: bits for integers and float8 (radix 2), declared digits for
/// `numeric(p,s)`, NULL for an unconstrained numeric and non-numeric types.
fn information_schema_precision(c: &ColumnDef) -> Option<i32> {
    match c.ty {
        TypeId::Int2 => Some(16),
        TypeId::Int4 => Some(32),
        TypeId::Int8 => Some(64),
        TypeId::Float8 => Some(53),
        TypeId::Numeric if c.typmod >= 4 => Some(((c.typmod - 4) >> 16) & 0xffff),
        _ => None,
    }
}

/// `numeric_scale`: 0 for integers, the declared scale of `numeric(p,s)`, else NULL.
fn information_schema_scale(c: &ColumnDef) -> Option<i32> {
    match c.ty {
        TypeId::Int2 | TypeId::Int4 | TypeId::Int8 => Some(0),
        TypeId::Numeric if c.typmod >= 4 => Some((c.typmod - 4) & 0xffff),
        _ => None,
    }
}
