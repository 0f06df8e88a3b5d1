//! The object-identifier types `regclass`, `regtype`, `regproc` and `regnamespace` as
//! values: a
//! cast from a name looks the object up (PostgreSQL's `regclassin`: 42P01 / 42704 /
//! 3F000 when missing), a cast from an OID finds its name (`regclassout`: the number
//! when nothing has it, `-` for 0), and the value carries both (`Datum::Reg`), so it
//! prints as the name, is sent in binary as the OID and compares with `oid` values.
//!
//! Relations: user tables and indexes (OID = relfile id) and the `pg_catalog` tables
//! walrus shows whose OIDs PostgreSQL fixes in its catalog headers (`pg_class` is 1259).
//! Catalog *views* get their OIDs when PostgreSQL's cluster is initialised, so walrus
//! has none to give: a cast of their name is refused (0A000), never numbered.

use walrus_engine::access::datum::{Datum, RegValue, TypeId};

use super::{relfile_oid, type_by_name, type_by_oid, Snapshot};
use super::{NS_CATALOG, NS_INFORMATION_SCHEMA, NS_PUBLIC};
use crate::error::{SqlError, SqlResult};

/// `pg_catalog` tables walrus shows, with PostgreSQL's fixed OIDs (checked against
/// PostgreSQL 15: `select 'pg_class'::regclass::oid`).
pub(super) const CATALOG_TABLE_OIDS: &[(&str, u32)] = &[
    ("pg_am", 2601),
    ("pg_attribute", 1249),
    ("pg_class", 1259),
    ("pg_constraint", 2606),
    ("pg_database", 1262),
    ("pg_enum", 3501),
    ("pg_index", 2610),
    ("pg_namespace", 2615),
    ("pg_range", 3541),
    ("pg_type", 1247),
];

/// The functions `regproc` knows: those walrus's `pg_type` rows name (I/O, type
/// modifier, analyze and subscript functions) and a few more, with PostgreSQL 15's
/// `pg_proc` OIDs (from its `postgres.bki`; each name has one function). walrus has no
/// `pg_proc`, so other names are refused (0A000) rather than reported missing.
const PROCS: &[(&str, u32)] = &[
    ("aclitemin", 1031),
    ("aclitemout", 1032),
    ("anyarray_in", 2296),
    ("anyarray_out", 2297),
    ("anyarray_recv", 2502),
    ("anyarray_send", 2503),
    ("charin", 1245),
    ("charout", 33),
    ("charrecv", 2434),
    ("charsend", 2435),
    ("float4in", 200),
    ("float4out", 201),
    ("float4recv", 2424),
    ("float4send", 2425),
    ("inet_in", 910),
    ("inet_out", 911),
    ("inet_recv", 2496),
    ("inet_send", 2497),
    ("oidvectorin", 54),
    ("oidvectorout", 55),
    ("oidvectorrecv", 2420),
    ("oidvectorsend", 2421),
    ("pg_lsn_in", 3229),
    ("pg_lsn_out", 3230),
    ("pg_lsn_recv", 3238),
    ("pg_lsn_send", 3239),
    ("pg_node_tree_in", 195),
    ("pg_node_tree_out", 196),
    ("pg_node_tree_recv", 197),
    ("pg_node_tree_send", 198),
    ("xidin", 50),
    ("xidout", 51),
    ("xidrecv", 2440),
    ("xidsend", 2441),
    ("raw_array_subscript_handler", 6180),
    ("array_in", 750),
    ("array_out", 751),
    ("array_recv", 2400),
    ("array_send", 2401),
    ("array_subscript_handler", 6179),
    ("array_typanalyze", 3816),
    ("boolin", 1242),
    ("boolout", 1243),
    ("boolrecv", 2436),
    ("boolsend", 2437),
    ("bpcharin", 1044),
    ("bpcharout", 1045),
    ("bpcharrecv", 2430),
    ("bpcharsend", 2431),
    ("bpchartypmodin", 2913),
    ("bpchartypmodout", 2914),
    ("bthandler", 330),
    ("byteain", 1244),
    ("byteaout", 31),
    ("bytearecv", 2412),
    ("byteasend", 2413),
    ("date_in", 1084),
    ("date_out", 1085),
    ("date_recv", 2468),
    ("date_send", 2469),
    ("float8in", 214),
    ("float8out", 215),
    ("float8recv", 2426),
    ("float8send", 2427),
    ("heap_tableam_handler", 3),
    ("int2in", 38),
    ("int2out", 39),
    ("int2recv", 2404),
    ("int2send", 2405),
    ("int2vectorin", 40),
    ("int2vectorout", 41),
    ("int2vectorrecv", 2410),
    ("int2vectorsend", 2411),
    ("int4in", 42),
    ("int4out", 43),
    ("int4recv", 2406),
    ("int4send", 2407),
    ("int8in", 460),
    ("int8out", 461),
    ("int8recv", 2408),
    ("int8send", 2409),
    ("interval_in", 1160),
    ("interval_out", 1161),
    ("interval_recv", 2478),
    ("interval_send", 2479),
    ("intervaltypmodin", 2903),
    ("intervaltypmodout", 2904),
    ("json_in", 321),
    ("json_out", 322),
    ("json_recv", 323),
    ("json_send", 324),
    ("jsonb_in", 3806),
    ("jsonb_out", 3804),
    ("jsonb_recv", 3805),
    ("jsonb_send", 3803),
    ("namein", 34),
    ("nameout", 35),
    ("namerecv", 2422),
    ("namesend", 2423),
    ("now", 1299),
    ("numeric_in", 1701),
    ("numeric_out", 1702),
    ("numeric_recv", 2460),
    ("numeric_send", 2461),
    ("numerictypmodin", 2917),
    ("numerictypmodout", 2918),
    ("oidin", 1798),
    ("oidout", 1799),
    ("oidrecv", 2418),
    ("oidsend", 2419),
    ("regclassin", 2218),
    ("regclassout", 2219),
    ("regclassrecv", 2452),
    ("regclasssend", 2453),
    ("regnamespacein", 4084),
    ("regnamespaceout", 4085),
    ("regnamespacerecv", 4087),
    ("regnamespacesend", 4088),
    ("regprocin", 44),
    ("regprocout", 45),
    ("regprocrecv", 2444),
    ("regprocsend", 2445),
    ("regtypein", 2220),
    ("regtypeout", 2221),
    ("regtyperecv", 2454),
    ("regtypesend", 2455),
    ("textin", 46),
    ("textout", 47),
    ("textrecv", 2414),
    ("textsend", 2415),
    ("time_in", 1143),
    ("time_out", 1144),
    ("time_recv", 2470),
    ("time_send", 2471),
    ("timestamp_in", 1312),
    ("timestamp_out", 1313),
    ("timestamp_recv", 2474),
    ("timestamp_send", 2475),
    ("timestamptypmodin", 2905),
    ("timestamptypmodout", 2906),
    ("timestamptz_in", 1150),
    ("timestamptz_out", 1151),
    ("timestamptz_recv", 2476),
    ("timestamptz_send", 2477),
    ("timestamptztypmodin", 2907),
    ("timestamptztypmodout", 2908),
    ("timetypmodin", 2909),
    ("timetypmodout", 2910),
    ("timetz_in", 1350),
    ("timetz_out", 1351),
    ("timetz_recv", 2472),
    ("timetz_send", 2473),
    ("timetztypmodin", 2911),
    ("timetztypmodout", 2912),
    ("uuid_in", 2952),
    ("uuid_out", 2953),
    ("uuid_recv", 2961),
    ("uuid_send", 2962),
    ("varcharin", 1046),
    ("varcharout", 1047),
    ("varcharrecv", 2432),
    ("varcharsend", 2433),
    ("varchartypmodin", 2915),
    ("varchartypmodout", 2916),
];

fn invalid_name() -> SqlError {
    SqlError::new("42602", "invalid name syntax")
}

/// A possibly qualified name as PostgreSQL's `stringToQualifiedNameList` reads it:
/// dot-separated identifiers, each `"quoted"` (kept as written, `""` a quote) or bare
/// (lower-cased, no spaces inside).
pub(crate) fn qualified_name(s: &str) -> SqlResult<Vec<String>> {
    let mut parts = Vec::new();
    let mut chars = s.trim().chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(invalid_name()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                }
            }
            if part.is_empty() {
                return Err(SqlError::new("42601", "zero-length delimited identifier"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c.is_whitespace() {
                    break;
                }
                part.extend(c.to_lowercase());
                chars.next();
            }
            if part.is_empty() {
                return Err(invalid_name());
            }
        }
        parts.push(part);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => break,
            Some('.') => continue,
            Some(_) => return Err(invalid_name()),
        }
    }
    Ok(parts)
}

fn reg(ty: TypeId, oid: u32, name: String) -> Datum {
    Datum::Reg(Box::new(RegValue { ty, oid, name }))
}

/// The name an OID no object has prints as: `-` for 0, else the number.
fn unnamed(oid: u32) -> String {
    if oid == 0 {
        "-".to_string()
    } else {
        oid.to_string()
    }
}

impl Snapshot {
    /// `'name'::regclass` (`missing_ok`: `to_regclass`, NULL instead of 42P01).
    pub(super) fn regclass_from_name(&self, text: &str, missing_ok: bool) -> SqlResult<Datum> {
        let parts = qualified_name(text)?;
        let (schema, name) = match parts.as_slice() {
            [name] => (None, name.as_str()),
            [schema, name] => (Some(schema.as_str()), name.as_str()),
            [_, _, _] => {
                return Err(SqlError::unsupported(
                    "cross-database references are not implemented",
                ))
            }
            _ => return Err(invalid_name()),
        };
        // pg_catalog is searched first, then public (PostgreSQL's default search_path).
        if matches!(schema, None | Some("pg_catalog")) {
            if let Some((_, oid)) = CATALOG_TABLE_OIDS.iter().find(|(n, _)| *n == name) {
                return Ok(reg(TypeId::RegClass, *oid, crate::names::quote_ident(name)));
            }
            if super::spec_of(Some("pg_catalog"), name).is_some() {
                return Err(SqlError::unsupported(format!(
                    "regclass of the catalog view {name} is not supported (walrus gives catalog views no OID)"
                )));
            }
        }
        if schema == Some("information_schema") && super::spec_of(schema, name).is_some() {
            return Err(SqlError::unsupported(format!(
                "regclass of information_schema.{name} is not supported (walrus gives catalog views no OID)"
            )));
        }
        if matches!(schema, None | Some("public")) {
            if let Some(oid) = self.user_relation_oid(name) {
                return Ok(reg(
                    TypeId::RegClass,
                    oid as u32,
                    crate::names::quote_ident(name),
                ));
            }
        }
        if missing_ok {
            return Ok(Datum::Null);
        }
        Err(SqlError::new(
            "42P01",
            format!(
                "relation \"{}{name}\" does not exist",
                schema.map(|s| format!("{s}.")).unwrap_or_default()
            ),
        ))
    }

    /// `oid::regclass`: the relation's name, else the number.
    pub(super) fn regclass_from_oid(&self, oid: u32) -> Datum {
        let name = CATALOG_TABLE_OIDS
            .iter()
            .find(|(_, o)| *o == oid)
            .map(|(n, _)| crate::names::quote_ident(n))
            .or_else(|| {
                self.relation_name(oid as i64)
                    .map(|n| crate::names::quote_ident(&n))
            })
            .unwrap_or_else(|| unnamed(oid));
        reg(TypeId::RegClass, oid, name)
    }

    fn user_relation_oid(&self, name: &str) -> Option<i64> {
        self.tables
            .iter()
            .find(|t| t.name == name)
            .map(|t| relfile_oid(t.relfile))
            .or_else(|| {
                self.indexes()
                    .find(|(_, i)| i.name == name)
                    .map(|(_, i)| relfile_oid(i.relfile))
            })
            .or_else(|| {
                self.sequences
                    .iter()
                    .find(|q| q.name == name)
                    .map(|q| relfile_oid(q.relfile))
            })
    }
}

/// `'name'::regtype` (`missing_ok`: `to_regtype`): any of PostgreSQL's spellings of a
/// type walrus has (`int4`, `integer`, `character varying[]`); prints as `format_type`.
pub(super) fn regtype_from_name(text: &str, missing_ok: bool) -> SqlResult<Datum> {
    match type_by_name(text) {
        Some(row) => Ok(reg(TypeId::RegType, row.oid as u32, row.display())),
        None if missing_ok => Ok(Datum::Null),
        None => Err(SqlError::new(
            "42704",
            format!("type \"{}\" does not exist", text.trim()),
        )),
    }
}

/// `oid::regtype`.
pub(super) fn regtype_from_oid(oid: u32) -> Datum {
    let name = type_by_oid(oid as i64)
        .map(|row| row.display())
        .unwrap_or_else(|| unnamed(oid));
    reg(TypeId::RegType, oid, name)
}

/// `'name'::regproc`: one of [`PROCS`], optionally `pg_catalog.`-qualified.
pub(super) fn regproc_from_name(text: &str) -> SqlResult<Datum> {
    let parts = qualified_name(text)?;
    let name = match parts.as_slice() {
        [name] => name,
        [schema, name] if schema == "pg_catalog" => name,
        _ => {
            return Err(SqlError::unsupported(format!(
                "regproc of \"{text}\" is not supported"
            )))
        }
    };
    match PROCS.iter().find(|(n, _)| n == name) {
        Some((n, oid)) => Ok(reg(TypeId::RegProc, *oid, crate::names::quote_ident(n))),
        None => Err(SqlError::unsupported(format!(
            "regproc of function \"{name}\" is not supported (walrus knows the OIDs of the functions its pg_type names)"
        ))),
    }
}

/// A `regproc` column's value for a function the catalog rows name (`-`: none, OID 0).
/// Every name given must be one of [`PROCS`] (a unit test checks `pg_type`'s).
pub(super) fn regproc_named(name: &str) -> Datum {
    let oid = PROCS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, o)| *o);
    debug_assert!(oid != 0 || name == "-", "no OID for function {name}");
    reg(
        TypeId::RegProc,
        oid,
        if oid == 0 { "-".into() } else { name.into() },
    )
}

/// `oid::regproc`.
pub(super) fn regproc_from_oid(oid: u32) -> Datum {
    let name = PROCS
        .iter()
        .find(|(_, o)| *o == oid)
        .map(|(n, _)| crate::names::quote_ident(n))
        .unwrap_or_else(|| unnamed(oid));
    reg(TypeId::RegProc, oid, name)
}

/// The schemas walrus has.
const NAMESPACES: &[(&str, i64)] = &[
    ("pg_catalog", NS_CATALOG),
    ("public", NS_PUBLIC),
    ("information_schema", NS_INFORMATION_SCHEMA),
];

/// `'name'::regnamespace`: 3F000 for a schema walrus does not have.
pub(super) fn regnamespace_from_name(text: &str) -> SqlResult<Datum> {
    let parts = qualified_name(text)?;
    let [name] = parts.as_slice() else {
        return Err(invalid_name());
    };
    match NAMESPACES.iter().find(|(n, _)| n == name) {
        Some((n, oid)) => Ok(reg(
            TypeId::RegNamespace,
            *oid as u32,
            crate::names::quote_ident(n),
        )),
        None => Err(SqlError::new(
            "3F000",
            format!("schema \"{name}\" does not exist"),
        )),
    }
}

/// `oid::regnamespace`.
pub(super) fn regnamespace_from_oid(oid: u32) -> Datum {
    let name = NAMESPACES
        .iter()
        .find(|(_, o)| *o == oid as i64)
        .map(|(n, _)| crate::names::quote_ident(n))
        .unwrap_or_else(|| unnamed(oid));
    reg(TypeId::RegNamespace, oid, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_and_print_as_postgresql() {
        assert_eq!(qualified_name("Public.T").unwrap(), ["public", "t"]);
        assert_eq!(qualified_name(" \"My\"\"T\" ").unwrap(), ["My\"T"]);
        assert_eq!(qualified_name("a b").unwrap_err().sqlstate, "42602");
        assert_eq!(qualified_name("a.").unwrap_err().sqlstate, "42602");
        assert_eq!(
            crate::names::quote_ident("pgbench_accounts"),
            "pgbench_accounts"
        );
        assert_eq!(crate::names::quote_ident("My\"T"), "\"My\"\"T\"");
        assert_eq!(crate::names::quote_ident("user"), "\"user\"");
        assert_eq!(crate::names::quote_ident("1a"), "\"1a\"");
        assert_eq!(regtype_from_oid(0), reg(TypeId::RegType, 0, "-".into()));
        assert_eq!(
            regtype_from_name("int4", false).unwrap(),
            reg(TypeId::RegType, 23, "integer".into())
        );
        assert_eq!(
            regtype_from_name("nosuch", false).unwrap_err().sqlstate,
            "42704"
        );
        assert_eq!(regtype_from_name("nosuch", true).unwrap(), Datum::Null);
        assert_eq!(
            regproc_from_name("pg_catalog.int4in").unwrap(),
            reg(TypeId::RegProc, 42, "int4in".into())
        );
        assert_eq!(
            regproc_from_oid(2400),
            reg(TypeId::RegProc, 2400, "array_recv".into())
        );
        assert_eq!(regproc_from_name("nosuch").unwrap_err().sqlstate, "0A000");
        // Every function walrus's pg_type rows name has its OID here.
        for row in super::super::type_rows() {
            let (_, _, _, _, _, io) = row.scalar;
            for suffix in ["in", "out", "recv", "send"] {
                if row.oid == 1033 && matches!(suffix, "recv" | "send") {
                    continue; // aclitem: none
                }
                let f = if row.elem.is_some() {
                    format!("array_{suffix}")
                } else {
                    format!("{io}{suffix}")
                };
                assert!(PROCS.iter().any(|(n, _)| *n == f), "{f}");
            }
        }
    }
}
