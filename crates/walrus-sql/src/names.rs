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

pub(crate) fn object_name(n: &ast::ObjectName) -> String {
    n.0.last()
        .and_then(|p| p.as_ident())
        .map(ident)
        .unwrap_or_default()
}
