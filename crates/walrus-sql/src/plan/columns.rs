//! Column names of relations and query outputs: a table's columns under its range
//! variable, `AS alias(c1, ...)`, PostgreSQL's output names for unaliased select items,
//! GROUP BY ordinals and aliases, and the condition a `JOIN ... USING` stands for.

use sqlparser::ast::{self, Expr};
use walrus_engine::catalog::TableDef;

use crate::error::{SqlError, SqlResult};
use crate::expr::function_name;
use crate::names::ident;
use crate::rel::{column_type_oid, find_col, ColName, Origin, Rel};

/// GROUP BY 1 means the first output column; a bare name that is an output alias
/// (and not a source column) means that output expression.
pub(crate) fn resolve_group_expr(
    e: &Expr,
    items: &[(String, Expr)],
    cols: &[ColName],
) -> SqlResult<Expr> {
    if let Expr::Value(v) = e {
        // A constant is a position, and only an integer can be one (PostgreSQL's
        // findTargetlistEntrySQL92): `GROUP BY 'x'`, `false`, `1.5` or NULL are errors,
        // not one group of everything.
        check_group_by_constant(e)?;
        if let ast::Value::Number(n, _) = &v.value {
            let i: usize = n.parse().unwrap_or(0);
            return items
                .get(i.wrapping_sub(1))
                .map(|(_, x)| x.clone())
                .ok_or_else(|| {
                    SqlError::new(
                        "42P10",
                        format!("GROUP BY position {n} is not in select list"),
                    )
                });
        }
    }
    if let Expr::Identifier(id) = e {
        let n = ident(id);
        if find_col(cols, None, &n)?.is_none() {
            if let Some((_, x)) = items.iter().find(|(name, _)| *name == n) {
                return Ok(x.clone());
            }
        }
    }
    Ok(e.clone())
}

/// 42601 for a GROUP BY item that is a constant other than an integer (a position).
pub(crate) fn check_group_by_constant(e: &Expr) -> SqlResult<()> {
    let Expr::Value(v) = e else {
        return Ok(());
    };
    match &v.value {
        ast::Value::Number(n, _) if n.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        ast::Value::Placeholder(_) => Ok(()),
        _ => Err(SqlError::new("42601", "non-integer constant in GROUP BY")),
    }
}

/// A column reference that resolves to exactly `c`.
/// A reference to column `i` of the query level's FROM columns by position: what `*`
/// expands to for a column whose name (and qualifier) another column shares, which
/// no name could reach (`select * from (select 1 as a, 2 as a) s`).
pub(crate) fn positional(i: usize) -> Expr {
    Expr::Identifier(ast::Ident::with_quote(
        '"',
        format!("{}{i}", crate::rel::POSITIONAL_PREFIX),
    ))
}

/// The reference `*` expands to for column `i` of `cols`: by name, unless another
/// visible column has its qualifier and name.
pub(crate) fn star_reference(cols: &[ColName], i: usize) -> Expr {
    let c = &cols[i];
    let shared = cols
        .iter()
        .enumerate()
        .any(|(j, o)| j != i && !o.hidden && o.name == c.name && o.qual == c.qual);
    if shared {
        positional(i)
    } else {
        qualified(c)
    }
}

pub(crate) fn qualified(c: &ColName) -> Expr {
    let name = ast::Ident::with_quote('"', c.name.clone());
    match &c.qual {
        Some(q) => Expr::CompoundIdentifier(vec![ast::Ident::with_quote('"', q.clone()), name]),
        None => Expr::Identifier(name),
    }
}

pub(crate) fn table_cols(qual: &str, def: &TableDef) -> Vec<ColName> {
    def.columns
        .iter()
        .enumerate()
        .map(|(i, c)| ColName {
            qual: Some(qual.to_string()),
            name: c.name.clone(),
            ty: Some(c.ty),
            bpchar: c.declared == walrus_engine::catalog::DeclaredType::Char,
            hidden: false,
            origin: Some(Origin {
                table_oid: def.relfile.0,
                attnum: def.attnum(i),
                type_oid: column_type_oid(c),
                typmod: c.typmod,
            }),
        })
        .collect()
}

/// Applies `AS alias(c1, c2, ...)` column names.
pub(crate) fn rename(rel: &mut Rel, alias: Option<&ast::TableAlias>) -> SqlResult<()> {
    let Some(a) = alias else { return Ok(()) };
    if a.columns.len() > rel.cols.len() {
        return Err(SqlError::new(
            "42P10",
            format!(
                "table \"{}\" has {} columns available but {} columns specified",
                ident(&a.name),
                rel.cols.len(),
                a.columns.len()
            ),
        ));
    }
    for (c, n) in rel.cols.iter_mut().zip(&a.columns) {
        c.name = ident(&n.name);
    }
    Ok(())
}

/// PostgreSQL's output column name for an unaliased select item.
pub fn output_name(e: &Expr) -> String {
    named(e).map_or_else(|| "?column?".to_string(), |(name, _)| name)
}

/// How sure a name is (PostgreSQL's FigureColname strengths): a cast's type name is
/// `Weak`, given up for any `Strong` name inside it (`x::text` is `x`, `1::text` is
/// `text`, `1::int::text` is `text`).
#[derive(PartialEq)]
enum Strength {
    Weak,
    Strong,
}

fn strong(name: &str) -> Option<(String, Strength)> {
    Some((name.to_string(), Strength::Strong))
}

/// The name PostgreSQL gives `e`, if any.
fn named(e: &Expr) -> Option<(String, Strength)> {
    match e {
        Expr::Identifier(i) => Some((ident(i), Strength::Strong)),
        Expr::CompoundIdentifier(ids) => ids.last().map(|i| (ident(i), Strength::Strong)),
        Expr::Function(f) => Some((function_name(f), Strength::Strong)),
        Expr::Cast {
            expr, data_type, ..
        } => match named(expr) {
            Some(inner @ (_, Strength::Strong)) => Some(inner),
            _ => Some((cast_name(data_type), Strength::Weak)),
        },
        // `date '2024-01-01'` and `interval '1 day'` are casts of a literal.
        Expr::TypedString(ts) => Some((cast_name(&ts.data_type), Strength::Weak)),
        Expr::Interval(_) => Some(("interval".into(), Strength::Weak)),
        // `t.a[i]` is named after the array (`a`), as PostgreSQL's A_Indirection.
        Expr::CompoundFieldAccess { root, access_chain } => {
            let (array, _) = crate::expr::subscripted(root, access_chain)?;
            named(&array)
        }
        Expr::Nested(i) => named(i),
        // CASE takes its ELSE result's name when that one is sure.
        Expr::Case { else_result, .. } => match else_result.as_deref().and_then(named) {
            Some(inner @ (_, Strength::Strong)) => Some(inner),
            _ => Some(("case".into(), Strength::Weak)),
        },
        Expr::Array(_) => strong("array"),
        // A scalar subquery is named after its one output column, whatever that is.
        Expr::Subquery(q) => match q.body.as_ref() {
            ast::SetExpr::Select(sel) => match sel.projection.first() {
                Some(ast::SelectItem::UnnamedExpr(e)) => strong(&output_name(e)),
                Some(ast::SelectItem::ExprWithAlias { alias, .. }) => strong(&ident(alias)),
                _ => None,
            },
            _ => None,
        },
        // NOT EXISTS is a NOT over the sublink: unnamed, as in PostgreSQL.
        Expr::Exists { negated: false, .. } => strong("exists"),
        // The SQL-syntax forms are named after the function PostgreSQL calls.
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        Expr::Substring {
            shorthand: true, ..
        } => strong("substr"),
        Expr::Substring { .. } => strong("substring"),
        Expr::Position { .. } => strong("position"),
        Expr::Overlay { .. } => strong("overlay"),
        Expr::Extract { .. } => strong("extract"),
        Expr::Trim { trim_where, .. } => strong(match trim_where {
            Some(ast::TrimWhereField::Leading) => "ltrim",
            Some(ast::TrimWhereField::Trailing) => "rtrim",
            _ => "btrim",
        }),
        _ => None,
    }
}

/// The column name PostgreSQL gives a cast: the target type's `typname` (`int4` for
/// `integer`, the element's for an array: `'{1}'::int[]` is `int4`).
fn cast_name(dt: &ast::DataType) -> String {
    if let ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(inner, _)) = dt {
        return cast_name(inner);
    }
    let spelled = dt
        .to_string()
        .to_ascii_lowercase()
        .rsplit('.')
        .next()
        .unwrap_or("?column?")
        .split('(')
        .next()
        .unwrap_or("?column?")
        .trim()
        .to_string();
    match spelled.as_str() {
        "int" | "integer" => "int4",
        "bigint" => "int8",
        "smallint" => "int2",
        "boolean" => "bool",
        "double precision" | "float" => "float8",
        "real" => "float4",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "decimal" | "dec" => "numeric",
        "timestamp with time zone" => "timestamptz",
        "timestamp without time zone" => "timestamp",
        "time without time zone" => "time",
        // The one-byte type's name is `char` (PostgreSQL names the column so).
        "\"char\"" => "char",
        other => other,
    }
    .to_string()
}
