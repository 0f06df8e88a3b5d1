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
