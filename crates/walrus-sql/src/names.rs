//! SQL identifiers as names: unquoted identifiers fold to lower case, quoted ones keep
//! their spelling, and a qualified name's last part names the object.

use sqlparser::ast;

pub(crate) fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// [`ident`] without a copy when the name is already in its folded form (quoted, or
/// without upper-case letters): column references are resolved once per row.
pub(crate) fn ident_ref(i: &ast::Ident) -> std::borrow::Cow<'_, str> {
    if i.quote_style.is_some() || !i.value.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Borrowed(i.value.as_str())
    } else {
        std::borrow::Cow::Owned(i.value.to_ascii_lowercase())
    }
}

pub(crate) fn object_name(n: &ast::ObjectName) -> String {
    n.0.last()
        .and_then(|p| p.as_ident())
        .map(ident)
        .unwrap_or_default()
}

/// Whether a `FROM` item that names a table carries anything beyond its name and alias
/// (arguments, hints, time travel, WITH ORDINALITY, partitions, a JSON path,
/// TABLESAMPLE, index hints), none of which walrus implements. Every field is named so a
/// new one in sqlparser must be looked at here. False for other kinds of item.
pub(crate) fn table_has_extras(f: &ast::TableFactor) -> bool {
    match f {
        ast::TableFactor::Table {
            name: _,
            alias: _,
            args,
            with_hints,
            version,
            with_ordinality,
            partitions,
            json_path,
            sample,
            index_hints,
        } => {
            args.is_some()
                || !with_hints.is_empty()
                || version.is_some()
                || *with_ordinality
                || !partitions.is_empty()
                || json_path.is_some()
                || sample.is_some()
                || !index_hints.is_empty()
        }
        _ => false,
    }
}

/// PostgreSQL 15's keywords that are not unreserved (`pg_get_keywords()` with
/// `catcode <> 'U'`): `quote_ident` quotes them. Compared with PostgreSQL 15's list by
/// `tests/slt/quote_ident.slt`.
const QUOTED_KEYWORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

/// An identifier as PostgreSQL's `quote_ident` prints it: bare when it is lower-case
/// letters, digits, `_` (not starting with a digit) and not a keyword that needs quotes.
pub(crate) fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !QUOTED_KEYWORDS.contains(&name);
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}
