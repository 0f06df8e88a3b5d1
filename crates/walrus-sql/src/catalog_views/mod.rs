//! The `pg_catalog` and `information_schema` tables clients read, computed from walrus's
//! own catalog and statistics when a statement first names one.
//!
//! walrus stores tables, columns and indexes in its MVCC catalog (engine `catalog`); the
//! PostgreSQL views here are projections of it, so they are always consistent with what
//! the statement's snapshot sees. OIDs: a relation's OID is its relfile id (user
//! relfiles start at 16384, as PostgreSQL's user OIDs do), types use PostgreSQL's OIDs,
//! namespaces `pg_catalog` = 11 and `public` = 2200, the one role is 10. Catalogs walrus
//! has no objects for (inheritance, partitions, policies, publications, triggers, ...)
//! exist with their PostgreSQL columns and no rows, so psql's `\d` queries bind and
//! return nothing for them, which is the truth.
//!
//! Statistics views (`pg_stat_wal`, `pg_stat_bgwriter`) carry the same columns as
//! PostgreSQL 15, so a benchmark harness can read both systems with one query.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::access::heap::activity::ActivitySnapshot;
use walrus_engine::catalog::{ConstraintDef, IndexDef, TableDef};
use walrus_engine::engine::CheckpointStats;
use walrus_engine::Engine;

use crate::error::{SqlError, SqlResult};

mod activity;
mod reg;
pub(crate) use reg::qualified_name;
mod rows;

const NS_CATALOG: i64 = 11;
const NS_PUBLIC: i64 = 2200;
const NS_INFORMATION_SCHEMA: i64 = 13_000;
const ROLE_OID: i64 = 10;
const AM_HEAP: i64 = 2;
const AM_BTREE: i64 = 403;

/// PostgreSQL 15's `pg_stat_user_tables`. Counters walrus does not keep (scans, rows
/// read, analyze) are NULL rather than a made-up zero.
const STAT_TABLES_COLUMNS: &str = "relid:o schemaname:N relname:N seq_scan:l seq_tup_read:l idx_scan:l idx_tup_fetch:l n_tup_ins:l n_tup_upd:l n_tup_del:l n_tup_hot_upd:l n_live_tup:l n_dead_tup:l n_mod_since_analyze:l n_ins_since_vacuum:l last_vacuum:z last_autovacuum:z last_analyze:z last_autoanalyze:z vacuum_count:l autovacuum_count:l analyze_count:l autoanalyze_count:l";

/// Column lists in a compact form: `name:type`, PostgreSQL 15's column types
/// ([`spec_type`]): o = oid, l = int8, b = bool, s = int2, i = int4, f = float8,
/// r = real, n = numeric, z = timestamptz, t = text, N = name, c = "char", p = regproc,
/// x = xid, g = pg_node_tree, y = anyarray, I = inet, L = pg_lsn, v = int2vector,
/// V = oidvector, B = bytea, w = varchar, Y = varchar(3); arrays: T = text[],
/// a = aclitem[], C = "char"[], S = int2[], O = oid[], R = real[].
const TABLES: &[(&str, &str)] = &[
    ("pg_namespace", "oid:o nspname:N nspowner:o nspacl:a"),
    ("pg_class", "oid:o relname:N relnamespace:o reltype:o reloftype:o relowner:o relam:o relfilenode:o reltablespace:o relpages:i reltuples:r relallvisible:i reltoastrelid:o relhasindex:b relisshared:b relpersistence:c relkind:c relnatts:s relchecks:s relhasrules:b relhastriggers:b relhassubclass:b relrowsecurity:b relforcerowsecurity:b relispopulated:b relreplident:c relispartition:b relrewrite:o relfrozenxid:x relminmxid:x relacl:a reloptions:T relpartbound:g"),
    ("pg_attribute", "attrelid:o attname:N atttypid:o attstattarget:i attlen:s attnum:s attndims:i attcacheoff:i atttypmod:i attbyval:b attalign:c attstorage:c attcompression:c attnotnull:b atthasdef:b atthasmissing:b attidentity:c attgenerated:c attisdropped:b attislocal:b attinhcount:i attcollation:o attacl:a attoptions:T attfdwoptions:T attmissingval:y"),
    ("pg_type", "oid:o typname:N typnamespace:o typowner:o typlen:s typbyval:b typtype:c typcategory:c typispreferred:b typisdefined:b typdelim:c typrelid:o typsubscript:p typelem:o typarray:o typinput:p typoutput:p typreceive:p typsend:p typmodin:p typmodout:p typanalyze:p typalign:c typstorage:c typnotnull:b typbasetype:o typtypmod:i typndims:i typcollation:o typdefaultbin:g typdefault:t typacl:a"),
    ("pg_range", "rngtypid:o rngsubtype:o rngmultitypid:o rngcollation:o rngsubopc:o rngcanonical:p rngsubdiff:p"),
    ("pg_enum", "oid:o enumtypid:o enumsortorder:r enumlabel:N"),
    ("pg_index", "indexrelid:o indrelid:o indnatts:s indnkeyatts:s indisunique:b indnullsnotdistinct:b indisprimary:b indisexclusion:b indimmediate:b indisclustered:b indisvalid:b indcheckxmin:b indisready:b indislive:b indisreplident:b indkey:v indcollation:V indclass:V indoption:v indexprs:g indpred:g"),
    ("pg_constraint", "oid:o conname:N connamespace:o contype:c condeferrable:b condeferred:b convalidated:b conrelid:o contypid:o conindid:o conparentid:o confrelid:o confupdtype:c confdeltype:c confmatchtype:c conislocal:b coninhcount:i connoinherit:b conkey:S confkey:S conpfeqop:O conppeqop:O conffeqop:O confdelsetcols:S conexclop:O conbin:g"),
    ("pg_am", "oid:o amname:N amhandler:p amtype:c"),
    ("pg_database", "oid:o datname:N datdba:o encoding:i datlocprovider:c datistemplate:b datallowconn:b datconnlimit:i datfrozenxid:x datminmxid:x dattablespace:o datcollate:t datctype:t daticulocale:t datcollversion:t datacl:a"),
    ("pg_roles", "rolname:N rolsuper:b rolinherit:b rolcreaterole:b rolcreatedb:b rolcanlogin:b rolreplication:b rolconnlimit:i rolpassword:t rolvaliduntil:z rolbypassrls:b rolconfig:T oid:o"),
    ("pg_user", "usename:N usesysid:o usecreatedb:b usesuper:b userepl:b usebypassrls:b passwd:t valuntil:z useconfig:T"),
    ("pg_tablespace", "oid:o spcname:N spcowner:o spcacl:a spcoptions:T"),
    ("pg_settings", "name:t setting:t unit:t category:t short_desc:t extra_desc:t context:t vartype:t source:t min_val:t max_val:t enumvals:T boot_val:t reset_val:t sourcefile:t sourceline:i pending_restart:b"),
    ("pg_tables", "schemaname:N tablename:N tableowner:N tablespace:N hasindexes:b hasrules:b hastriggers:b rowsecurity:b"),
    ("pg_indexes", "schemaname:N tablename:N indexname:N tablespace:N indexdef:t"),
    // ANALYZE's statistics (`crate::stats`); what walrus does not gather (most common
    // values, histograms, correlation) is NULL.
    ("pg_stats", "schemaname:N tablename:N attname:N inherited:b null_frac:r avg_width:i n_distinct:r most_common_vals:y most_common_freqs:R histogram_bounds:y correlation:r most_common_elems:y most_common_elem_freqs:R elem_count_histogram:R"),
    ("pg_stat_wal", "wal_records:l wal_fpi:l wal_bytes:n wal_buffers_full:l wal_write:l wal_sync:l wal_write_time:f wal_sync_time:f stats_reset:z"),
    // walrus's own WAL counters beside PostgreSQL's pg_stat_wal: the WAL writer's flushes,
    // segments prepared ahead versus created by a session in the foreground, commits
    // whose flush someone else's sync covered; then the sync method, whether a flushed
    // commit is durable (loudly not, for `none` and for `pmem` forced with
    // PMEM_IS_PMEM_FORCE=1), and for `pmem` the drains, bytes copied into mapped segments
    // and the milliseconds those copies and drains took.
    ("walrus_stat_wal", "walwriter_flushes:l segments_prepared_ahead:l segments_created_by_sessions:l flush_piggybacks:l wal_sync_method:t durability:t pmem_drains:l pmem_bytes_copied:l pmem_copy_time:f"),
    // The double-write buffer (page_protection = dwb): batches written, pages and bytes
    // they carried, their average size, and waits for a free slot.
    ("walrus_stat_dwb", "batches:l pages:l bytes:l avg_batch_pages:f slot_waits:l"),
    // The page protection in force, and the data pages written with RWF_ATOMIC
    // (page_protection = atomic: the device writes each whole or not at all).
    ("walrus_stat_page_protection", "page_protection:t atomic_page_writes:l"),
    // The buffer pool: its frames, lookups that found the page resident, pages read
    // in, and pages large sequential scans read into their own ring's frames again
    // (PostgreSQL's bulk-read strategy) instead of evicting from the pool.
    ("walrus_stat_buffers", "buffers:l hits:l reads:l ring_reuses:l"),
    // Parallel aggregation (exec/parallel.rs): parallel scans run, helper threads they
    // launched, plans that fell back to the serial scan, and the helpers all sessions
    // may run at once.
    ("walrus_stat_parallel", "scans:l workers_launched:l serial_reruns:l max_parallel_workers:i"),
    // The commit-status log's group update (seed 004): statuses set lock-free on a
    // resident page, waits for the exclusive lock, leader rounds and their sizes.
    // This session's extended-protocol plan cache (session/plan_cache.rs): statements
    // planned (new texts and re-plans), executions reusing a plan, plans invalidated
    // by DDL, executions answered by a cached point lookup.
    ("walrus_stat_plan_cache", "plans:l hits:l invalidations:l point_lookups:l"),
    ("walrus_stat_clog", "fast_path_sets:l lock_waits:l group_updates:l group_members:l avg_group_size:f max_group_size:l"),
    // Page writers and checkpoints (seed 003), one row per page-writer thread and a
    // total row (thread = 'total'): also `SELECT * FROM walrus_flush_detail()`.
    // backend_clean_waits: backends that found no clean victim and waited (pool-wide).
    ("walrus_flush_detail", "thread:t pages_flushed:l batches:l pages_per_sec:l dirty_pages:l queue_length:l oldest_rec_lsn:t redo_lsn:t insert_lsn:t checkpoint_mode:t estimated_recovery_s:f recovery_time_target_s:f replay_rate_mb_s:f replay_fixed_ms:l replay_rate_source:t lag_target_bytes:l last_checkpoint_ms:l checkpoint_target_time_ms:l backend_clean_waits:l"),
    // PostgreSQL 15's pg_control_checkpoint() columns, from walrus's control file.
    ("pg_control_checkpoint", "checkpoint_lsn:L redo_lsn:L redo_wal_file:t timeline_id:i prev_timeline_id:i full_page_writes:b next_xid:t next_oid:o next_multixact_id:x next_multi_offset:x oldest_xid:x oldest_xid_dbid:o oldest_active_xid:x oldest_multi_xid:x oldest_multi_dbid:o oldest_commit_ts_xid:x newest_commit_ts_xid:x checkpoint_time:z"),
    // PostgreSQL 15's columns. walrus fills the buffer hits and reads, and the
    // executor's temporary files; counters it does not keep are NULL, never a made-up 0.
    ("pg_stat_database", "datid:o datname:N numbackends:i xact_commit:l xact_rollback:l blks_read:l blks_hit:l tup_returned:l tup_fetched:l tup_inserted:l tup_updated:l tup_deleted:l conflicts:l temp_files:l temp_bytes:l deadlocks:l checksum_failures:l checksum_last_failure:z blk_read_time:f blk_write_time:f session_time:f active_time:f idle_in_transaction_time:f sessions:l sessions_abandoned:l sessions_fatal:l sessions_killed:l stats_reset:z"),
    ("pg_stat_bgwriter", "checkpoints_timed:l checkpoints_req:l checkpoint_write_time:f checkpoint_sync_time:f buffers_checkpoint:l buffers_clean:l maxwritten_clean:l buffers_backend:l buffers_backend_fsync:l buffers_alloc:l stats_reset:z"),
    ("pg_stat_user_tables", STAT_TABLES_COLUMNS),
    ("pg_stat_all_tables", STAT_TABLES_COLUMNS),
    ("pg_inherits", "inhrelid:o inhparent:o inhseqno:i inhdetachpending:b"),
    ("pg_partitioned_table", "partrelid:o partstrat:c partnatts:s partdefid:o partattrs:v partclass:V partcollation:V partexprs:g"),
    ("pg_attrdef", "oid:o adrelid:o adnum:s adbin:g"),
    ("pg_collation", "oid:o collname:N collnamespace:o collowner:o collprovider:c collisdeterministic:b collencoding:i collcollate:t collctype:t colliculocale:t collversion:t"),
    ("pg_policy", "oid:o polname:N polrelid:o polcmd:c polpermissive:b polroles:O polqual:g polwithcheck:g"),
    ("pg_statistic_ext", "oid:o stxrelid:o stxname:N stxnamespace:o stxowner:o stxstattarget:i stxkeys:v stxkind:C stxexprs:g"),
    ("pg_publication", "oid:o pubname:N pubowner:o puballtables:b pubinsert:b pubupdate:b pubdelete:b pubtruncate:b pubviaroot:b"),
    ("pg_publication_namespace", "oid:o pnpubid:o pnnspid:o"),
    ("pg_publication_rel", "oid:o prpubid:o prrelid:o prqual:g prattrs:v"),
    ("pg_trigger", "oid:o tgrelid:o tgparentid:o tgname:N tgfoid:o tgtype:s tgenabled:c tgisinternal:b tgconstrrelid:o tgconstrindid:o tgconstraint:o tgdeferrable:b tginitdeferred:b tgnargs:s tgattr:v tgargs:B tgqual:g tgoldtable:N tgnewtable:N"),
    ("pg_rewrite", "oid:o rulename:N ev_class:o ev_type:c ev_enabled:c is_instead:b ev_qual:g ev_action:g"),
    ("pg_description", "objoid:o classoid:o objsubid:i description:t"),
    ("pg_sequence", "seqrelid:o seqtypid:o seqstart:l seqincrement:l seqmax:l seqmin:l seqcache:l seqcycle:b"),
    ("pg_extension", "oid:o extname:N extowner:o extnamespace:o extrelocatable:b extversion:t extconfig:O extcondition:T"),
    ("pg_foreign_table", "ftrelid:o ftserver:o ftoptions:T"),
    ("pg_stat_activity", "datid:o datname:N pid:i leader_pid:i usesysid:o usename:N application_name:t client_addr:I client_hostname:t client_port:i backend_start:z xact_start:z query_start:z state_change:z wait_event_type:t wait_event:t state:t backend_xid:x backend_xmin:x query_id:l query:t backend_type:t"),
    ("pg_locks", "locktype:t database:o relation:o page:i tuple:s virtualxid:t transactionid:x classid:o objid:o objsubid:s virtualtransaction:t pid:i mode:t granted:b fastpath:b waitstart:z"),
];

const INFORMATION_SCHEMA: &[(&str, &str)] = &[
    ("tables", "table_catalog:N table_schema:N table_name:N table_type:w self_referencing_column_name:N reference_generation:w user_defined_type_catalog:N user_defined_type_schema:N user_defined_type_name:N is_insertable_into:Y is_typed:Y commit_action:w"),
    ("columns", "table_catalog:N table_schema:N table_name:N column_name:N ordinal_position:i column_default:w is_nullable:Y data_type:w character_maximum_length:i numeric_precision:i numeric_scale:i"),
    ("schemata", "catalog_name:N schema_name:N schema_owner:N default_character_set_catalog:N default_character_set_schema:N default_character_set_name:N sql_path:w"),
    ("table_constraints", "constraint_catalog:N constraint_schema:N constraint_name:N table_catalog:N table_schema:N table_name:N constraint_type:w is_deferrable:Y initially_deferred:Y enforced:Y nulls_distinct:Y"),
    ("key_column_usage", "constraint_catalog:N constraint_schema:N constraint_name:N table_catalog:N table_schema:N table_name:N column_name:N ordinal_position:i position_in_unique_constraint:i"),
    ("referential_constraints", "constraint_catalog:N constraint_schema:N constraint_name:N unique_constraint_catalog:N unique_constraint_schema:N unique_constraint_name:N match_option:w update_rule:w delete_rule:w"),
    ("check_constraints", "constraint_catalog:N constraint_schema:N constraint_name:N check_clause:w"),
    ("constraint_column_usage", "table_catalog:N table_schema:N table_name:N column_name:N constraint_catalog:N constraint_schema:N constraint_name:N"),
];

/// A catalog column's type: the engine type its values have, and the PostgreSQL type
/// OID and modifier RowDescription reports (PostgreSQL 15's `pg_attribute.atttypid`; a
/// domain of `information_schema` is reported as its base type, as PostgreSQL's
/// RowDescription does). Where walrus keeps the values under a nearer engine type, the
/// wire forms are the reported type's (`binary::encode_as`, `value::format_text_as`):
/// `name`, `"char"`, `pg_node_tree`, `anyarray`, `inet` and `pg_lsn` values are text,
/// `oid` and `xid` values int8 (sent as 4 unsigned bytes), `real` float8 (printed and
/// sent as float4), `oidvector` the text of its OIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CatalogType {
    pub ty: TypeId,
    pub oid: u32,
    pub typmod: i32,
}

fn spec_type(c: char) -> CatalogType {
    let (ty, oid, typmod) = match c {
        'o' => (TypeId::Int8, 26, -1),
        'l' => (TypeId::Int8, 20, -1),
        'b' => (TypeId::Bool, 16, -1),
        's' => (TypeId::Int2, 21, -1),
        'i' => (TypeId::Int4, 23, -1),
        'f' => (TypeId::Float8, 701, -1),
        'r' => (TypeId::Float8, 700, -1),
        'n' => (TypeId::Numeric, 1700, -1),
        'z' => (TypeId::TimestampTz, 1184, -1),
        'v' => (TypeId::Int2Vector, 22, -1),
        'N' => (TypeId::Text, 19, -1),
        'c' => (TypeId::Text, 18, -1),
        'p' => (TypeId::RegProc, 24, -1),
        'x' => (TypeId::Int8, 28, -1),
        'g' => (TypeId::Text, 194, -1),
        'y' => (TypeId::Text, 2277, -1),
        'I' => (TypeId::Text, 869, -1),
        'L' => (TypeId::Text, 3220, -1),
        'V' => (TypeId::Text, 30, -1),
        'B' => (TypeId::Bytea, 17, -1),
        // information_schema's character_data and yes_or_no: varchar, varchar(3).
        'w' => (TypeId::Text, 1043, -1),
        'Y' => (TypeId::Text, 1043, 7),
        'T' => (TypeId::Array(&TypeId::Text), 1009, -1),
        'a' => (TypeId::Array(&TypeId::Text), 1034, -1),
        'C' => (TypeId::Array(&TypeId::Text), 1002, -1),
        'S' => (TypeId::Array(&TypeId::Int2), 1005, -1),
        'O' => (TypeId::Array(&TypeId::Int8), 1028, -1),
        'R' => (TypeId::Array(&TypeId::Float8), 1021, -1),
        _ => (TypeId::Text, 25, -1),
    };
    CatalogType { ty, oid, typmod }
}

fn columns(spec: &'static str) -> Vec<(&'static str, CatalogType)> {
    spec.split_whitespace()
        .map(|c| {
            let (n, t) = c.split_once(':').unwrap_or((c, "t"));
            (n, spec_type(t.chars().next().unwrap_or('t')))
        })
        .collect()
}

/// The type of `schema.table`'s column `column` as clients see it (`None`: no such
/// virtual table or column), for parameter types compared with it.
pub(crate) fn column_type(schema: Option<&str>, table: &str, column: &str) -> Option<CatalogType> {
    columns(spec_of(schema, table)?)
        .into_iter()
        .find(|(n, _)| *n == column)
        .map(|(_, t)| t)
}

/// Every virtual table walrus serves, as (schema, name): `pg_catalog`'s (the
/// `walrus_*` statistics and the row functions among them) and `information_schema`'s.
pub fn catalog_relations() -> impl Iterator<Item = (&'static str, &'static str)> {
    TABLES.iter().map(|(n, _)| ("pg_catalog", *n)).chain(
        INFORMATION_SCHEMA
            .iter()
            .map(|(n, _)| ("information_schema", *n)),
    )
}

fn spec_of(schema: Option<&str>, table: &str) -> Option<&'static str> {
    let list = match schema {
        Some("information_schema") => INFORMATION_SCHEMA,
        Some("pg_catalog") | None => TABLES,
        Some(_) => return None,
    };
    list.iter().find(|(n, _)| *n == table).map(|(_, s)| *s)
}

/// Whether `schema.table` names one of these virtual tables (pg_catalog is searched
/// before the user's schema, as in PostgreSQL).
pub fn is_virtual(schema: Option<&str>, table: &str) -> bool {
    match schema {
        Some("pg_catalog") | Some("information_schema") => true,
        None => spec_of(None, table).is_some(),
        Some(_) => false,
    }
}

/// A cast to a reg* type from a value that is neither a name nor an OID (PostgreSQL:
/// no such cast, 42846).
fn reg_cast_error(from: &Datum, to: &str) -> SqlError {
    SqlError::new(
        "42846",
        format!(
            "cannot cast type {} to {to}",
            from.type_id().map(|t| t.name()).unwrap_or("unknown")
        ),
    )
}

/// Whether [`Snapshot::function`] answers `name` (so other calls never take a snapshot).
/// Set-returning functions answered from a statistics view of the same name.
pub(crate) fn is_row_function(name: &str) -> bool {
    matches!(
        name,
        "walrus_flush_detail" | "pg_control_checkpoint" | "walrus_stat_plan_cache"
    )
}

pub(crate) fn is_catalog_function(name: &str) -> bool {
    matches!(
        name,
        "pg_get_userbyid"
            | "format_type"
            | "pg_get_indexdef"
            | "pg_get_constraintdef"
            | "::regclass"
            | "::regtype"
            | "::regnamespace"
            | "::regproc"
            | "to_regtype"
            | "to_regclass"
            | "pg_relation_size"
            | "pg_table_size"
            | "pg_indexes_size"
            | "pg_total_relation_size"
            | "pg_cancel_backend"
            | "pg_terminate_backend"
    )
}

/// The argument counts PostgreSQL 15 has a catalog function (or reg* cast) for. Checked
/// once before [`Snapshot::function`] looks at any argument, so a call with too few
/// arguments is PostgreSQL's 42883 ("function ... does not exist") and never an index
/// out of bounds; every name [`is_catalog_function`] accepts must be listed here.
fn catalog_function_arity(name: &str) -> &'static [usize] {
    match name {
        "format_type" => &[2],
        "pg_get_indexdef" => &[1, 3],
        "pg_get_constraintdef" => &[1, 2],
        "pg_relation_size" => &[1, 2],
        "pg_terminate_backend" => &[1, 2],
        // pg_get_userbyid, the reg* casts, to_regtype, to_regclass, and the other sizes.
        _ => &[1],
    }
}

/// PostgreSQL's type OIDs and `format_type` names for the ones walrus shows:
/// (oid, typname, display name, typlen, array type OID, I/O function stem). The I/O
/// function names are PostgreSQL's (`int4in`/`int4recv`, `date_in`/`date_recv`).
const TYPES: &[(i64, &str, &str, i16, i64, &str)] = &[
    (16, "bool", "boolean", 1, 1000, "bool"),
    (17, "bytea", "bytea", -1, 1001, "bytea"),
    (19, "name", "name", 64, 1003, "name"),
    (20, "int8", "bigint", 8, 1016, "int8"),
    (21, "int2", "smallint", 2, 1005, "int2"),
    (22, "int2vector", "int2vector", -1, 1006, "int2vector"),
    (23, "int4", "integer", 4, 1007, "int4"),
    (25, "text", "text", -1, 1009, "text"),
    (26, "oid", "oid", 4, 1028, "oid"),
    (114, "json", "json", -1, 199, "json_"),
    (701, "float8", "double precision", 8, 1022, "float8"),
    (1042, "bpchar", "character", -1, 1014, "bpchar"),
    (1043, "varchar", "character varying", -1, 1015, "varchar"),
    (1082, "date", "date", 4, 1182, "date_"),
    (1083, "time", "time without time zone", 8, 1183, "time_"),
    (
        1114,
        "timestamp",
        "timestamp without time zone",
        8,
        1115,
        "timestamp_",
    ),
    (
        1184,
        "timestamptz",
        "timestamp with time zone",
        8,
        1185,
        "timestamptz_",
    ),
    (1186, "interval", "interval", 16, 1187, "interval_"),
    (1700, "numeric", "numeric", -1, 1231, "numeric_"),
    (2950, "uuid", "uuid", 16, 2951, "uuid_"),
    (3802, "jsonb", "jsonb", -1, 3807, "jsonb_"),
    (1266, "timetz", "time with time zone", 12, 1270, "timetz_"),
    (24, "regproc", "regproc", 4, 1008, "regproc"),
    (2205, "regclass", "regclass", 4, 2210, "regclass"),
    (2206, "regtype", "regtype", 4, 2211, "regtype"),
    (
        4089,
        "regnamespace",
        "regnamespace",
        4,
        4090,
        "regnamespace",
    ),
    // Types of catalog columns (values kept under nearer engine types, described as
    // these; `CatalogType`). pg_node_tree and anyarray have no array type (0).
    (18, "char", "\"char\"", 1, 1002, "char"),
    (28, "xid", "xid", 4, 1011, "xid"),
    (30, "oidvector", "oidvector", -1, 1013, "oidvector"),
    (194, "pg_node_tree", "pg_node_tree", -1, 0, "pg_node_tree_"),
    (700, "float4", "real", 4, 1021, "float4"),
    (869, "inet", "inet", -1, 1041, "inet_"),
    (1033, "aclitem", "aclitem", 12, 1034, "aclitem"),
    (2277, "anyarray", "anyarray", -1, 0, "anyarray_"),
    (3220, "pg_lsn", "pg_lsn", 8, 3221, "pg_lsn_"),
];

/// A type walrus shows: its scalar row, or the array type of one (`typelem` set).
#[derive(Clone, Copy)]
pub(crate) struct TypeRow {
    pub oid: i64,
    /// The element type's row for an array type.
    pub elem: Option<(i64, &'static str, &'static str, i16, i64, &'static str)>,
    pub scalar: (i64, &'static str, &'static str, i16, i64, &'static str),
}

impl TypeRow {
    fn name(&self) -> String {
        match self.elem {
            Some(_) => format!("_{}", self.scalar.1),
            None => self.scalar.1.to_string(),
        }
    }
    fn display(&self) -> String {
        match self.elem {
            Some(_) => format!("{}[]", self.scalar.2),
            None => self.scalar.2.to_string(),
        }
    }
}

/// Every type row: the scalars, then their array types.
fn type_rows() -> impl Iterator<Item = TypeRow> {
    TYPES
        .iter()
        .map(|&r| TypeRow {
            oid: r.0,
            elem: None,
            scalar: r,
        })
        .chain(TYPES.iter().filter(|r| r.4 != 0).map(|&r| TypeRow {
            oid: r.4,
            elem: Some(r),
            scalar: r,
        }))
}

fn type_by_oid(oid: i64) -> Option<TypeRow> {
    type_rows().find(|r| r.oid == oid)
}

/// The type a name denotes as `::regtype` and `to_regtype` read it: a `pg_type`
/// name (`int4`, `_int4`), a display name (`integer`, `character varying[]`), or one of
/// PostgreSQL's other spellings (`int`, `varchar`, `timestamptz`, `bool`).
pub(crate) fn type_by_name(name: &str) -> Option<TypeRow> {
    let n = name.trim().to_ascii_lowercase();
    // The quoted one-byte type, not `char` (bpchar).
    if n == "\"char\"" || n == "pg_catalog.\"char\"" {
        return type_by_oid(18);
    }
    let n = n
        .strip_prefix("pg_catalog.")
        .unwrap_or(&n)
        .trim_matches('"');
    if let Some(elem) = n.strip_suffix("[]") {
        let e = type_by_name(elem)?;
        return e.elem.is_none().then(|| type_by_oid(e.scalar.4)).flatten();
    }
    let alias = match n {
        "int" | "integer" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "boolean" => "bool",
        "double precision" | "float" => "float8",
        "real" => "float4",
        "decimal" => "numeric",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        "time without time zone" => "time",
        "time with time zone" => "timetz",
        other => other,
    };
    type_rows().find(|r| r.name() == alias)
}

/// A virtual table's columns (name, type) and rows.
pub(crate) type VirtualTable = (Vec<(&'static str, CatalogType)>, Vec<Vec<Datum>>);

/// What a [`Snapshot`] is taken from: the narrow part of a statement's context the
/// catalog views need (so this module knows nothing of sessions or the executor).
pub(crate) struct Source<'a> {
    /// The user tables visible to the statement's snapshot, in any order.
    pub tables: Vec<Arc<TableDef>>,
    /// The statistics of the analyzed ones, by table name.
    pub statistics: std::collections::HashMap<String, crate::stats::TableStatistics>,
    /// The sequences visible to the statement's snapshot.
    pub sequences: Vec<Arc<walrus_engine::catalog::SequenceDef>>,
    /// For the statistics views' counters.
    pub engine: &'a Engine,
    /// `session_authorization` (`current_user`; "walrus" when unset or empty).
    pub user: Option<String>,
    /// The database the client connected to ("postgres" when unset or empty).
    pub database: Option<String>,
}

/// What the catalog views are computed from: the statement's view of the catalog plus
/// engine counters, read once per statement.
pub(crate) struct Snapshot {
    tables: Vec<Arc<TableDef>>,
    /// By name.
    sequences: Vec<Arc<walrus_engine::catalog::SequenceDef>>,
    statistics: std::collections::HashMap<String, crate::stats::TableStatistics>,
    /// Each table's counters, in `tables` order.
    activity: Vec<ActivitySnapshot>,
    user: String,
    database: String,
    wal_records: u64,
    wal_bytes: u64,
    wal_fpi: u64,
    wal_writes: u64,
    wal_syncs: u64,
    wal_buffer_full: u64,
    wal_writer_flushes: u64,
    wal_segments_prepared_ahead: u64,
    wal_segments_created_by_sessions: u64,
    wal_flush_piggybacks: u64,
    wal_sync_method: &'static str,
    wal_durability: &'static str,
    /// (drains, bytes copied, ns copying) of `wal_sync_method = pmem`.
    wal_pmem: (u64, u64, u64),
    /// (batches, pages, bytes, slot waits) of the double-write buffer; zeros when off.
    dwb: (u64, u64, u64, u64),
    page_protection: &'static str,
    atomic_page_writes: u64,
    checkpoints: CheckpointStats,
    /// (buffers_checkpoint, buffers_clean, maxwritten_clean, buffers_backend), counted
    /// by the writing thread's role.
    bgwriter: (u64, u64, u64, u64),
    /// Times a backend found no clean victim and waited for the page writers.
    backend_clean_waits: u64,
    buffers_alloc: u64,
    /// Buffer pool lookups that found the page resident.
    buffer_hits: u64,
    /// (frames, pages large scans read into a frame of their ring again).
    buffer_ring: (u64, u64),
    /// (parallel scans, helpers launched, serial reruns).
    parallel: (u64, u64, u64),
    /// (files, bytes) the executor spilled to temporary files (`exec/spill.rs`).
    temp_files: (u64, u64),
    clog: walrus_engine::txn::clog::ClogStats,
    flush: walrus_engine::engine::FlushDetail,
    control: walrus_engine::storage::control::ControlData,
    full_page_writes: bool,
    /// `pg_database.datfrozenxid`: every xid below it is frozen (hint bits on every
    /// tuple) and its commit-status segment truncated.
    frozen_xid: u64,
    /// The sessions connected, by pid (`pg_stat_activity`).
    backends: Vec<(i32, walrus_engine::engine::BackendActivity)>,
    /// Every table lock granted or awaited (`pg_locks`).
    table_locks: Vec<walrus_engine::engine::TableLockInfo>,
    /// For `pg_cancel_backend` / `pg_terminate_backend`.
    backend_registry: Arc<walrus_engine::engine::Backends>,
    /// The relations' files, measured only when a `pg_*_size` function asks (their
    /// logical blocks, those extended in the pool but not yet written included, as
    /// PostgreSQL counts its file's length).
    relfiles: std::sync::Arc<walrus_engine::storage::relfile::RelFiles>,
}

fn o(v: i64) -> Datum {
    Datum::Int8(v)
}
fn t(v: &str) -> Datum {
    Datum::Text(v.to_string())
}
fn b(v: bool) -> Datum {
    Datum::Bool(v)
}
/// An `xid` value: PostgreSQL's 32-bit transaction ids are walrus's 64-bit ones
/// without the epoch.
fn xid(v: u64) -> Datum {
    Datum::Int8((v & 0xffff_ffff) as i64)
}
/// A `regproc` value naming one of the functions walrus knows (`-`: none).
fn proc(name: &str) -> Datum {
    reg::regproc_named(name)
}
fn relfile_oid(r: walrus_base::RelFileId) -> i64 {
    r.0 as i64
}

/// A CHECK or FOREIGN KEY constraint's OID (`pg_constraint.oid`): they have no
/// relation file, so one is derived from the table's file and the constraint's name,
/// stable while both are, in a range no relation file reaches.
pub(super) fn constraint_oid(table: &TableDef, c: &ConstraintDef) -> i64 {
    let mut h: u32 = 0x811c_9dc5 ^ table.relfile.0;
    for b in c.name.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (0x4000_0000 | (h & 0x3fff_ffff)) as i64
}

impl Snapshot {
    pub(crate) fn take(source: Source<'_>) -> Snapshot {
        let Source {
            mut tables,
            mut sequences,
            statistics,
            engine,
            user,
            database,
        } = source;
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        sequences.sort_by(|a, b| a.name.cmp(&b.name));
        let wal = engine.wal();
        let pool = engine.pool();
        let activity = tables.iter().map(|t| engine.table_activity(t)).collect();
        Snapshot {
            backends: engine.backends().list(),
            table_locks: engine.table_locks(),
            backend_registry: engine.backends().clone(),
            relfiles: pool.relfiles.clone(),
            tables,
            sequences,
            statistics,
            activity,
            user: user
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "walrus".into()),
            database: database
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "postgres".into()),
            wal_records: wal.records_inserted(),
            wal_bytes: wal.bytes_inserted(),
            wal_fpi: wal.stats.fpi_count.load(Ordering::Relaxed),
            wal_writes: wal.stats.writes.load(Ordering::Relaxed),
            wal_syncs: wal.stats.syncs.load(Ordering::Relaxed),
            wal_buffer_full: wal.stats.buffer_full_waits.load(Ordering::Relaxed),
            wal_writer_flushes: wal.stats.writer_flushes.load(Ordering::Relaxed),
            wal_segments_prepared_ahead: wal.stats.segments_prepared_ahead.load(Ordering::Relaxed),
            wal_segments_created_by_sessions: wal
                .stats
                .segments_created_by_sessions
                .load(Ordering::Relaxed),
            wal_flush_piggybacks: wal.stats.flush_piggybacks.load(Ordering::Relaxed),
            wal_sync_method: wal.segments.method().name(),
            wal_durability: wal.segments.durability(),
            wal_pmem: (
                wal.stats.pmem_drains.load(Ordering::Relaxed),
                wal.stats.pmem_bytes_copied.load(Ordering::Relaxed),
                wal.stats.pmem_copy_ns.load(Ordering::Relaxed),
            ),
            dwb: pool.double_write().map_or((0, 0, 0, 0), |d| {
                (
                    d.stats.batches.load(Ordering::Relaxed),
                    d.stats.pages.load(Ordering::Relaxed),
                    d.stats.bytes.load(Ordering::Relaxed),
                    d.stats.slot_waits.load(Ordering::Relaxed),
                )
            }),
            page_protection: engine.settings().page_protection.name(),
            atomic_page_writes: pool.relfiles.atomic_page_writes.load(Ordering::Relaxed),
            checkpoints: engine.checkpoint_stats(),
            bgwriter: (
                pool.stats.writes_by_checkpoint.load(Ordering::Relaxed),
                pool.stats.writes_by_page_writer.load(Ordering::Relaxed),
                pool.stats.maxwritten_clean.load(Ordering::Relaxed),
                pool.stats.writes_by_backend.load(Ordering::Relaxed),
            ),
            backend_clean_waits: pool.stats.backend_clean_waits.load(Ordering::Relaxed),
            clog: engine.txn_manager().clog.stats(),
            flush: engine.flush_detail(),
            control: engine.control_data(),
            full_page_writes: engine
                .settings()
                .page_protection
                .image_policy()
                .logs_images(),
            buffers_alloc: pool.stats.misses.load(Ordering::Relaxed),
            buffer_hits: pool.stats.hits.load(Ordering::Relaxed),
            buffer_ring: (
                pool.nframes() as u64,
                pool.stats.ring_reuses.load(Ordering::Relaxed),
            ),
            temp_files: crate::exec::temp_file_stats(),
            parallel: {
                let (scans, launched) = walrus_engine::engine::parallel_scan_counts();
                (scans, launched, crate::exec::parallel::serial_reruns())
            },
            frozen_xid: engine
                .txn_manager()
                .clog
                .oldest_xid()
                .0
                .max(walrus_base::Xid::FIRST_NORMAL.0),
        }
    }

    fn indexes(&self) -> impl Iterator<Item = (&TableDef, &IndexDef)> {
        self.tables
            .iter()
            .flat_map(|t| t.indexes.iter().map(move |i| (t.as_ref(), i)))
    }

    /// Every CHECK and FOREIGN KEY constraint, with its table.
    pub(super) fn constraints(&self) -> impl Iterator<Item = (&TableDef, &ConstraintDef)> {
        self.tables
            .iter()
            .flat_map(|t| t.constraints.iter().map(move |c| (t.as_ref(), c.as_ref())))
    }

    /// `pg_get_constraintdef` of a CHECK or FOREIGN KEY constraint: PostgreSQL's text
    /// (`pretty`: without the extra parentheses around a CHECK's operator).
    fn constraint_def(&self, table: &TableDef, c: &ConstraintDef, pretty: bool) -> String {
        use walrus_engine::catalog::{ConstraintKind, FkAction};
        let q = crate::names::quote_ident;
        let mut out = match &c.kind {
            ConstraintKind::Check { expr } => {
                let shown = crate::stored_expr::parse(expr)
                    .map(|e| crate::stored_expr::deparse(&e))
                    .unwrap_or_else(|_| expr.clone());
                if pretty && shown.starts_with('(') && shown.ends_with(')') {
                    format!("CHECK {shown}")
                } else {
                    format!("CHECK ({shown})")
                }
            }
            ConstraintKind::ForeignKey(fk) => {
                let parent = self.tables.iter().find(|t| t.name == fk.ref_table);
                let names = |def: Option<&TableDef>, cols: &[usize]| {
                    cols.iter()
                        .map(|&i| {
                            def.and_then(|d| d.columns.get(i))
                                .map_or("?".into(), |col| q(&col.name))
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let mut s = format!(
                    "FOREIGN KEY ({}) REFERENCES {}({})",
                    names(Some(table), &fk.columns),
                    q(&fk.ref_table),
                    names(parent.map(|p| p.as_ref()), &fk.ref_columns)
                );
                if fk.match_full {
                    s.push_str(" MATCH FULL");
                }
                let word = |a: FkAction| match a {
                    FkAction::NoAction => None,
                    FkAction::Restrict => Some("RESTRICT"),
                    FkAction::Cascade => Some("CASCADE"),
                    FkAction::SetNull => Some("SET NULL"),
                    FkAction::SetDefault => Some("SET DEFAULT"),
                };
                if let Some(w) = word(fk.on_update) {
                    s.push_str(&format!(" ON UPDATE {w}"));
                }
                if let Some(w) = word(fk.on_delete) {
                    s.push_str(&format!(" ON DELETE {w}"));
                }
                s
            }
        };
        if c.deferrable {
            out.push_str(" DEFERRABLE");
        }
        if c.initially_deferred {
            out.push_str(" INITIALLY DEFERRED");
        }
        out
    }

    fn relation_name(&self, oid: i64) -> Option<String> {
        self.tables
            .iter()
            .find(|t| relfile_oid(t.relfile) == oid)
            .map(|t| t.name.clone())
            .or_else(|| {
                self.indexes()
                    .find(|(_, i)| relfile_oid(i.relfile) == oid)
                    .map(|(_, i)| i.name.clone())
            })
            .or_else(|| {
                self.sequences
                    .iter()
                    .find(|q| relfile_oid(q.relfile) == oid)
                    .map(|q| q.name.clone())
            })
    }

    fn index_columns(table: &TableDef, index: &IndexDef) -> String {
        index
            .columns
            .iter()
            .map(|&c| {
                table
                    .columns
                    .get(c)
                    .map_or("?".into(), |c| crate::names::quote_ident(&c.name))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// PostgreSQL's `pg_get_indexdef`: the table schema-qualified, or (`pretty`) bare,
    /// as `public` is on the search path.
    fn index_def(table: &TableDef, index: &IndexDef, pretty: bool) -> String {
        format!(
            "CREATE {}INDEX {} ON {}{} USING btree ({})",
            if index.unique { "UNIQUE " } else { "" },
            crate::names::quote_ident(&index.name),
            if pretty { "" } else { "public." },
            crate::names::quote_ident(&table.name),
            Self::index_columns(table, index)
        )
    }

    /// PostgreSQL's `pg_relation_size(rel, fork)`, `pg_table_size`, `pg_indexes_size`
    /// and `pg_total_relation_size` of the relation with `oid`, in bytes. walrus keeps
    /// no free-space map, visibility map or TOAST files, so a table is its heap file
    /// and those forks are empty (0, as PostgreSQL says of a fork that does not exist).
    /// `None` (NULL): no relation has that OID, as in PostgreSQL. The catalog tables are
    /// views here, with no file to measure: refused rather than answered 0.
    fn relation_size(&self, function: &str, oid: i64, fork: &str) -> SqlResult<Option<u64>> {
        if !matches!(fork, "main" | "fsm" | "vm" | "init") {
            return Err(SqlError::new("22023", "invalid fork name")
                .with_hint("Valid fork names are \"main\", \"fsm\", \"vm\", and \"init\"."));
        }
        if let Some((name, _)) = reg::CATALOG_TABLE_OIDS
            .iter()
            .find(|(_, o)| *o as i64 == oid)
        {
            return Err(SqlError::unsupported(format!(
                "{function} of the catalog relation {name} is not supported (walrus's catalog tables are views with no file)"
            )));
        }
        // A file that cannot be measured (dropped meanwhile): an error, not 0.
        let bytes = |relfile| {
            let blocks = self.relfiles.nblocks(relfile).map_err(|_| {
                SqlError::new(
                    "58P01",
                    format!(
                        "could not read the size of relation {}",
                        relfile_oid(relfile)
                    ),
                )
            })?;
            Ok::<u64, SqlError>(blocks as u64 * walrus_base::PAGE_SIZE as u64)
        };
        if let Some(table) = self.tables.iter().find(|t| relfile_oid(t.relfile) == oid) {
            let heap = bytes(table.relfile)?;
            let mut indexes = 0;
            for index in &table.indexes {
                indexes += bytes(index.relfile)?;
            }
            return Ok(Some(match function {
                "pg_relation_size" if fork != "main" => 0,
                "pg_relation_size" | "pg_table_size" => heap,
                "pg_indexes_size" => indexes,
                _ => heap + indexes,
            }));
        }
        if let Some((_, index)) = self.indexes().find(|(_, i)| relfile_oid(i.relfile) == oid) {
            let size = bytes(index.relfile)?;
            return Ok(Some(match function {
                "pg_relation_size" if fork != "main" => 0,
                "pg_indexes_size" => 0,
                _ => size,
            }));
        }
        Ok(None)
    }

    /// Catalog-aware functions and casts; `None` for names that are not theirs
    /// (exactly those [`is_catalog_function`] accepts).
    pub(crate) fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Datum::Null);
        let oid_arg = |i: usize| match arg(i) {
            Datum::Int2(v) => Some(v as i64),
            Datum::Int4(v) => Some(v as i64),
            Datum::Int8(v) => Some(v),
            Datum::Text(s) => s.trim().parse().ok(),
            Datum::Reg(r) => Some(r.oid as i64),
            _ => None,
        };
        // An OID as the reg* casts read one: a number, a string of digits (as
        // PostgreSQL's regclassin reads `'1259'`), or another reg* value's OID.
        let reg_oid = |i: usize| -> Option<u32> {
            match arg(i) {
                Datum::Text(s) => {
                    let s = s.trim();
                    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| s.parse().ok())
                        .flatten()
                }
                _ => oid_arg(i).and_then(|v| u32::try_from(v).ok()),
            }
        };
        if !is_catalog_function(name) {
            return None;
        }
        if !catalog_function_arity(name).contains(&args.len()) {
            let types: Vec<&str> = args
                .iter()
                .map(|a| a.type_id().map_or("unknown", |t| t.name()))
                .collect();
            return Some(Err(SqlError::new(
                "42883",
                format!("function {name}({}) does not exist", types.join(", ")),
            )
            .with_hint(
                "No function matches the given name and argument types. You might need to add explicit type casts.",
            )));
        }
        if args.first().is_some_and(|a| a.is_null()) && name != "format_type" {
            return Some(Ok(Datum::Null)); // strict functions, as in PostgreSQL
        }
        Some(Ok(match name {
            "pg_get_userbyid" => t(&self.user),
            "format_type" => match oid_arg(0) {
                None => Datum::Null,
                Some(oid) => match type_by_oid(oid) {
                    None => t("???"),
                    Some(row) => {
                        // With a type modifier: `character varying(10)`, `numeric(10,2)`,
                        // on an array's element (`character varying(3)[]`).
                        let display = row.scalar.2;
                        let m = oid_arg(1).unwrap_or(-1) - 4;
                        let base = match row.scalar.0 {
                            1042 | 1043 if m >= 0 => format!("{display}({m})"),
                            1700 if m >= 0 => {
                                format!("numeric({},{})", (m >> 16) & 0xffff, m & 0xffff)
                            }
                            _ => display.to_string(),
                        };
                        t(&if row.elem.is_some() {
                            format!("{base}[]")
                        } else {
                            base
                        })
                    }
                },
            },
            // pg_get_indexdef(index [, column, pretty]): column 0 is the whole
            // definition, column n only the n-th key's quoted name ('' past the
            // last); strict.
            "pg_get_indexdef" => {
                if args.iter().any(Datum::is_null) {
                    return Some(Ok(Datum::Null));
                }
                let oid = oid_arg(0)?;
                let (column, pretty) = match args.len() {
                    1 => (0, false),
                    3 => match (oid_arg(1), &args[2]) {
                        (Some(c), Datum::Bool(pretty)) => (c, *pretty),
                        _ => return None,
                    },
                    _ => return None,
                };
                match self.indexes().find(|(_, i)| relfile_oid(i.relfile) == oid) {
                    Some((tbl, idx)) if column == 0 => t(&Self::index_def(tbl, idx, pretty)),
                    Some((tbl, idx)) => t(&usize::try_from(column - 1)
                        .ok()
                        .and_then(|k| idx.columns.get(k))
                        .and_then(|&c| tbl.columns.get(c))
                        .map_or(String::new(), |c| crate::names::quote_ident(&c.name))),
                    None => Datum::Null,
                }
            }
            "pg_get_constraintdef" => {
                let oid = oid_arg(0)?;
                let pretty = matches!(args.get(1), Some(Datum::Bool(true)));
                match self.indexes().find(|(_, i)| relfile_oid(i.relfile) == oid) {
                    Some((tbl, idx)) => t(&format!(
                        "{} ({})",
                        if idx.primary { "PRIMARY KEY" } else { "UNIQUE" },
                        Self::index_columns(tbl, idx)
                    )),
                    None => match self
                        .constraints()
                        .find(|(tb, c)| constraint_oid(tb, c) == oid)
                    {
                        Some((tbl, c)) => t(&self.constraint_def(tbl, c, pretty)),
                        None => Datum::Null,
                    },
                }
            }
            "pg_relation_size" | "pg_table_size" | "pg_indexes_size" | "pg_total_relation_size" => {
                let oid = match (&args[0], reg_oid(0)) {
                    (_, Some(oid)) => oid,
                    (Datum::Text(text), _) => match self.regclass_from_name(text, false) {
                        Ok(Datum::Reg(r)) => r.oid,
                        Ok(_) => return Some(Ok(Datum::Null)),
                        Err(e) => return Some(Err(e)),
                    },
                    _ => return Some(Err(reg_cast_error(&args[0], "regclass"))),
                };
                let fork = match args.get(1) {
                    None => "main".to_string(),
                    Some(Datum::Text(f)) => f.clone(),
                    Some(_) => return Some(Ok(Datum::Null)),
                };
                match self.relation_size(name, oid as i64, &fork) {
                    Ok(Some(bytes)) => Datum::Int8(bytes as i64),
                    Ok(None) => Datum::Null,
                    Err(e) => return Some(Err(e)),
                }
            }
            // A pid no session has: false (PostgreSQL also warns that it is not a
            // backend process).
            "pg_cancel_backend" | "pg_terminate_backend" => match oid_arg(0) {
                None => Datum::Null,
                Some(pid) => {
                    let pid = i32::try_from(pid).unwrap_or(0);
                    Datum::Bool(if name == "pg_cancel_backend" {
                        self.backend_registry.cancel(pid)
                    } else {
                        self.backend_registry.terminate(pid)
                    })
                }
            },
            // reg* casts: a name is looked up (reg.rs), an OID named.
            "::regclass" | "to_regclass" => match (&args[0], reg_oid(0)) {
                (_, Some(oid)) if name == "::regclass" => self.regclass_from_oid(oid),
                (Datum::Text(text), _) => {
                    match self.regclass_from_name(text, name == "to_regclass") {
                        Ok(d) => d,
                        Err(e) => return Some(Err(e)),
                    }
                }
                _ => return Some(Err(reg_cast_error(&args[0], "regclass"))),
            },
            "::regtype" | "to_regtype" => match (&args[0], reg_oid(0)) {
                (_, Some(oid)) if name == "::regtype" => reg::regtype_from_oid(oid),
                (Datum::Text(text), _) => {
                    match reg::regtype_from_name(text, name == "to_regtype") {
                        Ok(d) => d,
                        Err(e) => return Some(Err(e)),
                    }
                }
                _ => return Some(Err(reg_cast_error(&args[0], "regtype"))),
            },
            "::regproc" => match (&args[0], reg_oid(0)) {
                (_, Some(oid)) => reg::regproc_from_oid(oid),
                (Datum::Text(text), _) => match reg::regproc_from_name(text) {
                    Ok(d) => d,
                    Err(e) => return Some(Err(e)),
                },
                _ => return Some(Err(reg_cast_error(&args[0], "regproc"))),
            },
            "::regnamespace" => match (&args[0], reg_oid(0)) {
                (_, Some(oid)) => reg::regnamespace_from_oid(oid),
                (Datum::Text(text), _) => match reg::regnamespace_from_name(text) {
                    Ok(d) => d,
                    Err(e) => return Some(Err(e)),
                },
                _ => return Some(Err(reg_cast_error(&args[0], "regnamespace"))),
            },
            _ => return None,
        }))
    }

    /// The columns and rows of one virtual table.
    pub(crate) fn table(
        &self,
        schema: Option<&str>,
        name: &str,
        settings: &BTreeMap<String, String>,
    ) -> SqlResult<VirtualTable> {
        let spec = spec_of(schema, name).ok_or_else(|| {
            SqlError::new(
                "42P01",
                format!(
                    "relation \"{}{name}\" does not exist",
                    schema.map(|s| format!("{s}.")).unwrap_or_default()
                ),
            )
        })?;
        let cols = columns(spec);
        let mut rows = if schema == Some("information_schema") {
            self.information_schema_rows(name)
        } else {
            self.rows(name, settings)
        };
        for r in &mut rows {
            debug_assert!(r.len() <= cols.len(), "{name}: row wider than its columns");
            r.resize(cols.len(), Datum::Null);
        }
        Ok((cols, rows))
    }
}

/// A column's type as PostgreSQL's `format_type` names it in messages.
pub(crate) fn format_type_of(c: &walrus_engine::catalog::ColumnDef) -> &'static str {
    rows::information_schema_type(c)
}
