//! DDL: CREATE TABLE (with PRIMARY KEY and UNIQUE constraints, `fillfactor`), CREATE
//! INDEX, ALTER TABLE ... ADD CONSTRAINT, DROP TABLE and TRUNCATE, in the statement's
//! transaction (walrus's catalog is transactional).

use sqlparser::ast::{self, AlterTableOperation, ColumnOption, TableConstraint};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::{LockMode, Transaction};

use crate::error::{SqlError, SqlResult};
use crate::expr::{column_type, Scope};
use crate::names::{ident, object_name};
use crate::result::QueryResult;

/// The column names of a PRIMARY KEY or UNIQUE constraint's key, folded as
/// identifiers are (`"app_label"` is `app_label`, `"Mixed"` keeps its case). A key
/// part that is not a plain column is refused, not read as a column named by its text.
fn key_columns(parts: &[ast::IndexColumn]) -> SqlResult<Vec<String>> {
    parts
        .iter()
        .map(|c| match &c.column.expr {
            ast::Expr::Identifier(i) if c.operator_class.is_none() => Ok(ident(i)),
            other => Err(SqlError::unsupported(format!(
                "constraint key part {other} is not supported"
            ))),
        })
        .collect()
}

fn add_constraint(t: &mut Transaction, table: &str, c: &TableConstraint) -> SqlResult<()> {
    match c {
        TableConstraint::PrimaryKey(pk) => {
            let cols = key_columns(&pk.columns)?;
            let name = pk
                .name
                .as_ref()
                .map(ident)
                .unwrap_or_else(|| format!("{table}_pkey"));
            create_index(t, table, &name, &cols, true, true)
        }
        TableConstraint::Unique(u) => {
            let cols = key_columns(&u.columns)?;
            let name = u
                .name
                .as_ref()
                .map(ident)
                .unwrap_or_else(|| format!("{table}_{}_key", cols.join("_")));
            create_index(t, table, &name, &cols, true, false)
        }
        TableConstraint::Check(c) => {
            let def = t.table(table)?;
            let cons = super::constraints::check_constraint(
                t,
                &def,
                c.name.as_ref().map(ident),
                &c.expr,
                &[],
            )?;
            if c.enforced == Some(false) {
                return Err(SqlError::unsupported(
                    "NOT ENFORCED constraints are not supported",
                ));
            }
            super::constraints::add(t, &cons)
        }
        TableConstraint::ForeignKey(fk) => {
            let def = t.table(table)?;
            let cons = super::constraints::foreign_key(t, &def, fk, None, &[])?;
            super::constraints::add(t, &cons)
        }
        other => Err(SqlError::unsupported(format!(
            "constraint {other} is not supported"
        ))),
    }
}

fn create_index(
    t: &mut Transaction,
    table: &str,
    name: &str,
    cols: &[String],
    unique: bool,
    primary: bool,
) -> SqlResult<()> {
    let def = t.table(table)?;
    let mut positions = Vec::new();
    for c in cols {
        let i = def
            .column_index(c)
            .ok_or_else(|| SqlError::new("42703", format!("column \"{c}\" does not exist")))?;
        // json has no btree operator class in PostgreSQL (nor equality); jsonb's btree
        // order is not the text order walrus's keys would have.
        match def.columns.get(i).map(|c| c.ty) {
            Some(walrus_engine::access::datum::TypeId::Json) => {
                return Err(SqlError::new(
                    "42704",
                    "data type json has no default operator class for access method \"btree\"",
                ))
            }
            Some(walrus_engine::access::datum::TypeId::Jsonb) => {
                return Err(SqlError::unsupported(
                    "indexes on jsonb columns are not supported",
                ))
            }
            _ => {}
        }
        positions.push(i);
    }
    t.create_index(table, name, &positions, unique, primary)?;
    Ok(())
}

/// What `serial`-like type name `dt` is: the integer type its column gets.
fn serial_type(dt: &ast::DataType) -> Option<walrus_engine::access::datum::TypeId> {
    let ast::DataType::Custom(name, mods) = dt else {
        return None;
    };
    if !mods.is_empty() || name.0.len() != 1 {
        return None;
    }
    match name.to_string().to_ascii_lowercase().as_str() {
        "serial" | "serial4" => Some(TypeId::Int4),
        "bigserial" | "serial8" => Some(TypeId::Int8),
        "smallserial" | "serial2" => Some(TypeId::Int2),
        _ => None,
    }
}

/// A column DEFAULT as PostgreSQL allows it: no column references, subqueries,
/// aggregates or window functions; a default without function calls is evaluated now,
/// so a value its column cannot take fails the CREATE as in PostgreSQL. Returns the
/// text to keep: a constant as PostgreSQL's `pg_get_expr` prints its folded form
/// (`0`, `'x'::text`, `'-1'::integer`), anything else as written; `None` for a NULL
/// default, which PostgreSQL does not store.
fn check_default(e: &ast::Expr, col: &ColumnDef) -> SqlResult<Option<String>> {
    let mut columns = false;
    let mut subquery = false;
    let mut calls = false;
    let _ = ast::visit_expressions(e, |x: &ast::Expr| {
        match x {
            ast::Expr::Identifier(i) if !crate::exec::defaults::is_default_keyword(x) => {
                // CURRENT_DATE-style keywords parse as identifiers too.
                let k = i.value.to_ascii_lowercase();
                if i.quote_style.is_some()
                    || !matches!(
                        k.as_str(),
                        "current_date"
                            | "current_time"
                            | "current_timestamp"
                            | "localtime"
                            | "localtimestamp"
                            | "current_user"
                            | "session_user"
                            | "user"
                            | "current_role"
                            | "current_catalog"
                            | "current_schema"
                    )
                {
                    columns = true;
                } else {
                    calls = true;
                }
            }
            ast::Expr::CompoundIdentifier(_) => columns = true,
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
                subquery = true
            }
            ast::Expr::Function(_) => calls = true,
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if crate::exec::defaults::is_default_keyword(e) {
        return Err(SqlError::syntax("syntax error at or near \"DEFAULT\""));
    }
    if columns {
        return Err(SqlError::new(
            "0A000",
            "cannot use column reference in DEFAULT expression",
        ));
    }
    if subquery {
        return Err(SqlError::new(
            "0A000",
            "cannot use subquery in DEFAULT expression",
        ));
    }
    if crate::plan::contains_aggregate(e) {
        return Err(SqlError::new(
            "42803",
            "aggregate functions are not allowed in DEFAULT expressions",
        ));
    }
    if !calls {
        let scope = crate::expr::Scope::bare(&[], None, 0);
        // The type modifier is applied when a row gets the value, not here
        // (PostgreSQL accepts `varchar(2) default 'toolong'` and fails the INSERT).
        let unlimited = ColumnDef {
            typmod: -1,
            ..col.clone()
        };
        let v = crate::expr::assign(crate::expr::eval(e, &scope)?, &unlimited)?;
        if v.is_null() {
            return Ok(None);
        }
        return Ok(Some(
            constant_default(e, &v, col).unwrap_or_else(|| crate::stored_expr::deparse(e)),
        ));
    }
    Ok(Some(crate::stored_expr::deparse(e)))
}

/// A literal default as PostgreSQL's `pg_get_expr` prints it: a number literal as its
/// own type's constant (bare when not negative, `'-3'::integer` when negative; the
/// cast to the column's type is implicit and not shown), TRUE / FALSE as keywords, a
/// string literal as a constant of the column's type (`0`, `'x'::text`,
/// `'abc'::character varying`). `None` for anything else (kept as written).
fn constant_default(
    e: &ast::Expr,
    v: &walrus_engine::access::datum::Datum,
    col: &ColumnDef,
) -> Option<String> {
    use walrus_engine::access::datum::{Datum, TypeId};
    use walrus_engine::catalog::DeclaredType;
    let number = |text: &str, negative: bool| -> Option<String> {
        let signed = if negative {
            format!("-{text}")
        } else {
            text.to_string()
        };
        let ty = match signed.parse::<i64>() {
            Ok(x) if i32::try_from(x).is_ok() => "integer",
            Ok(_) => "bigint",
            Err(_) => "numeric",
        };
        let shown = match ty {
            "numeric" => crate::value::format_text(
                &crate::value::parse_text(TypeId::Numeric, &signed).ok()?,
            )?,
            _ => signed.parse::<i64>().ok()?.to_string(),
        };
        Some(match (negative, ty) {
            (false, "integer" | "numeric") => shown,
            _ => format!("'{shown}'::{ty}"),
        })
    };
    match e {
        ast::Expr::Value(vs) => match &vs.value {
            ast::Value::Number(n, _) => number(n, false),
            ast::Value::Boolean(b) => Some(b.to_string()),
            ast::Value::SingleQuotedString(_) => {
                let text = crate::value::format_text(v)?;
                let quoted = |ty: &str| format!("'{}'::{ty}", text.replace('\'', "''"));
                Some(match (v, col.ty, col.declared) {
                    (Datum::Bool(b), ..) => b.to_string(),
                    (Datum::Int4(x), ..) if *x >= 0 => text,
                    (Datum::Numeric(_), ..) if !text.starts_with('-') && text != "NaN" => text,
                    (_, TypeId::Int4, _) => quoted("integer"),
                    (_, TypeId::Int2, _) => quoted("smallint"),
                    (_, TypeId::Int8, _) => quoted("bigint"),
                    (_, TypeId::Numeric, _) => quoted("numeric"),
                    (_, TypeId::Float8, _) => quoted("double precision"),
                    (_, TypeId::Text, DeclaredType::Varchar) => quoted("character varying"),
                    (_, TypeId::Text, DeclaredType::Char) => quoted("bpchar"),
                    (_, TypeId::Text, _) => quoted("text"),
                    _ => return None,
                })
            }
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            ast::Expr::Value(vs) => match &vs.value {
                ast::Value::Number(n, _) => number(n, true),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn create_table(t: &mut Transaction, ct: &ast::CreateTable) -> SqlResult<QueryResult> {
    use walrus_engine::catalog::ColumnDefault;
    let name = object_name(&ct.name);
    if ct.if_not_exists && t.catalog()?.relation_exists(&name) {
        return Ok(QueryResult::tag("CREATE TABLE"));
    }
    let mut columns = Vec::new();
    let mut defaults: Vec<Option<ColumnDefault>> = Vec::new();
    let mut pk: Option<Vec<String>> = None;
    // Column-level UNIQUE: (constraint name, column), created after the table.
    let mut uniques: Vec<(String, String)> = Vec::new();
    // CHECK and FOREIGN KEY constraints, added once the table and its unique indexes
    // exist (a foreign key may reference the table itself).
    enum Later {
        Check(Option<String>, ast::Expr),
        ForeignKey(ast::ForeignKeyConstraint, Option<String>),
    }
    let mut later: Vec<Later> = Vec::new();
    for c in &ct.columns {
        let cname = ident(&c.name);
        // varchar(n), char(n) and numeric(p,s) keep their type modifier in the catalog;
        // INSERT, UPDATE and COPY apply it (expr::assign).
        let serial = serial_type(&c.data_type);
        let (ty, typmod, declared) = match serial {
            Some(ty) => (ty, -1, walrus_engine::catalog::DeclaredType::Plain),
            None => column_type(&c.data_type)?,
        };
        let mut not_null = serial.is_some();
        let mut default: Option<ColumnDefault> = None;
        if serial.is_some() {
            let seq = crate::exec::sequence::create_column_sequence(t, &name, &cname, ty, &[])?;
            default = Some(ColumnDefault::Expr(format!(
                "nextval('{}'::regclass)",
                crate::names::quote_ident(&seq).replace('\'', "''")
            )));
        }
        let multiple = |what: &str| {
            SqlError::syntax(format!(
                "multiple {what} specified for column \"{cname}\" of table \"{name}\""
            ))
        };
        for o in &c.options {
            match &o.option {
                ColumnOption::Default(e) => {
                    if default.is_some() {
                        return Err(multiple("default values"));
                    }
                    let probe = ColumnDef {
                        name: cname.clone(),
                        ty,
                        not_null: false,
                        typmod,
                        declared,
                    };
                    default = check_default(e, &probe)?.map(ColumnDefault::Expr);
                }
                ColumnOption::Generated {
                    generated_as:
                        generated_as @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                    sequence_options,
                    generation_expr: None,
                    ..
                } => {
                    if default.is_some() {
                        return Err(SqlError::syntax(format!(
                            "both default and identity specified for column \"{cname}\" of table \"{name}\""
                        )));
                    }
                    if !matches!(ty, TypeId::Int2 | TypeId::Int4 | TypeId::Int8) {
                        return Err(SqlError::new(
                            "22023",
                            "identity column type must be smallint, integer, or bigint",
                        ));
                    }
                    let seq = crate::exec::sequence::create_column_sequence(
                        t,
                        &name,
                        &cname,
                        ty,
                        sequence_options.as_deref().unwrap_or(&[]),
                    )?;
                    not_null = true;
                    default = Some(ColumnDefault::Identity {
                        always: matches!(generated_as, ast::GeneratedAs::Always),
                        sequence: seq,
                    });
                }
                ColumnOption::Check(c) => {
                    if c.enforced == Some(false) {
                        return Err(SqlError::unsupported(
                            "NOT ENFORCED constraints are not supported",
                        ));
                    }
                    let name = o.name.as_ref().or(c.name.as_ref()).map(ident);
                    later.push(Later::Check(name, (*c.expr).clone()));
                }
                ColumnOption::ForeignKey(fk) => {
                    let mut fk = fk.clone();
                    if fk.name.is_none() {
                        fk.name = o.name.clone();
                    }
                    later.push(Later::ForeignKey(fk, Some(cname.clone())));
                }
                ColumnOption::NotNull => not_null = true,
                ColumnOption::Null => {}
                ColumnOption::PrimaryKey(_) => {
                    not_null = true;
                    pk = Some(vec![cname.clone()]);
                }
                ColumnOption::Unique(u) if plain_unique(u) => {
                    uniques.push((unique_name(o, u, &name, &cname), cname.clone()));
                }
                other => {
                    return Err(SqlError::unsupported(format!(
                        "column option {other} is not supported"
                    )))
                }
            }
        }
        if columns.iter().any(|x: &ColumnDef| x.name == cname) {
            return Err(SqlError::new(
                "42701",
                format!("column \"{cname}\" specified more than once"),
            ));
        }
        columns.push(ColumnDef {
            name: cname,
            ty,
            not_null,
            typmod,
            declared,
        });
        defaults.push(default);
    }
    let fillfactor = table_options(ct)?;
    match t.create_table_with_defaults(&name, columns, defaults, fillfactor) {
        Err(walrus_engine::Error::DuplicateTable(_)) if ct.if_not_exists => {
            return Ok(QueryResult::tag("CREATE TABLE"))
        }
        other => {
            other?;
        }
    }
    for c in &ct.constraints {
        match c {
            TableConstraint::PrimaryKey(p) => {
                pk = Some(key_columns(&p.columns)?);
            }
            TableConstraint::Check(c) => {
                if c.enforced == Some(false) {
                    return Err(SqlError::unsupported(
                        "NOT ENFORCED constraints are not supported",
                    ));
                }
                later.push(Later::Check(c.name.as_ref().map(ident), (*c.expr).clone()));
            }
            TableConstraint::ForeignKey(fk) => later.push(Later::ForeignKey(fk.clone(), None)),
            _ => add_constraint(t, &name, c)?,
        }
    }
    if let Some(cols) = pk {
        create_index(t, &name, &format!("{name}_pkey"), &cols, true, true)?;
    }
    for (cons, col) in &uniques {
        create_index(t, &name, cons, std::slice::from_ref(col), true, false)?;
    }
    let mut taken: Vec<String> = Vec::new();
    for l in later {
        let def = t.table(&name)?;
        let cons = match l {
            Later::Check(cname, e) => {
                super::constraints::check_constraint(t, &def, cname, &e, &taken)?
            }
            Later::ForeignKey(fk, column) => {
                super::constraints::foreign_key(t, &def, &fk, column.as_deref(), &taken)?
            }
        };
        taken.push(cons.name.clone());
        t.add_constraint(&cons)?;
    }
    Ok(QueryResult::tag("CREATE TABLE"))
}

/// What a CREATE TABLE may say besides its name, columns and constraints, refused with
/// 0A000 unless walrus builds it (nothing is parsed and then dropped): TEMPORARY,
/// UNLOGGED, LIKE, INHERITS, PARTITION BY / OF, ON COMMIT, TABLESPACE and every storage
/// parameter but `fillfactor`, which it returns (100 when not given).
pub(crate) fn table_options(ct: &ast::CreateTable) -> SqlResult<u8> {
    let refused = [
        (
            ct.temporary || ct.global.is_some(),
            "TEMPORARY tables are not supported",
        ),
        (ct.unlogged, "UNLOGGED tables are not supported"),
        (ct.or_replace, "CREATE OR REPLACE TABLE is not supported"),
        (
            ct.external || ct.location.is_some(),
            "external tables are not supported",
        ),
        (
            ct.like.is_some() || ct.clone.is_some(),
            "CREATE TABLE ... LIKE is not supported",
        ),
        (ct.inherits.is_some(), "INHERITS is not supported"),
        (
            ct.partition_by.is_some() || ct.partition_of.is_some() || ct.for_values.is_some(),
            "partitioned tables are not supported",
        ),
        (ct.on_commit.is_some(), "ON COMMIT is not supported"),
        (ct.comment.is_some(), "table comments are not supported"),
    ];
    if let Some((_, message)) = refused.iter().find(|(said, _)| *said) {
        return Err(SqlError::unsupported(*message));
    }
    let options = match &ct.table_options {
        ast::CreateTableOptions::None => return Ok(100),
        ast::CreateTableOptions::With(options) => options,
        other => {
            return Err(SqlError::unsupported(format!(
                "table option {other} is not supported"
            )))
        }
    };
    let mut fillfactor = 100u8;
    for o in options {
        let value = match o {
            ast::SqlOption::KeyValue { key, value } if ident(key) == "fillfactor" => value,
            other => {
                return Err(SqlError::unsupported(format!(
                    "storage parameter {other} is not supported"
                )))
            }
        };
        let f: u32 = value.to_string().trim_matches('\'').parse().map_err(|_| {
            SqlError::new("22023", format!("invalid value for fillfactor: {value}"))
        })?;
        if !(10..=100).contains(&f) {
            return Err(SqlError::new(
                "22023",
                format!("value {f} out of bounds for option \"fillfactor\""),
            ));
        }
        fillfactor = f as u8;
    }
    Ok(fillfactor)
}

/// `CREATE [UNIQUE] INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON table [USING btree]
/// (columns [opclass] [ASC|DESC] [NULLS ...])`. The name defaults to PostgreSQL's
/// `table_col1_col2_idx` (then `...idx1`, ...). The `*_pattern_ops` operator classes
/// order text as the default class does under walrus's one collation (C), so they are
/// the default class here; any other class, a partial (`WHERE`) or expression index,
/// INCLUDE, `NULLS NOT DISTINCT`, storage parameters and other access methods are
/// refused. CONCURRENTLY builds the same index (holding writers off meanwhile).
pub(crate) fn create_index_statement(
    t: &mut Transaction,
    ci: &ast::CreateIndex,
) -> SqlResult<QueryResult> {
    let refuse = |what: &str| Err(SqlError::unsupported(format!("{what} is not supported")));
    if ci.predicate.is_some() {
        return refuse("a partial index (CREATE INDEX ... WHERE)");
    }
    if !ci.include.is_empty() {
        return refuse("CREATE INDEX ... INCLUDE");
    }
    if ci.nulls_distinct == Some(false) {
        return refuse("NULLS NOT DISTINCT");
    }
    if !ci.with.is_empty()
        || !ci.index_options.is_empty()
        || !ci.alter_options.is_empty()
        || ci.r#async
    {
        return refuse("this CREATE INDEX option");
    }
    if let Some(u) = &ci.using {
        if !u.to_string().eq_ignore_ascii_case("btree") {
            return refuse(&format!("index access method {u}"));
        }
    }
    let table = object_name(&ci.table_name);
    // Column names fold as identifiers do (`"Mixed"` keeps its case); an expression
    // index is not built.
    let cols: Vec<String> = ci
        .columns
        .iter()
        .map(|c| {
            if let Some(class) = &c.operator_class {
                let class = class.to_string().to_ascii_lowercase();
                let class = class.strip_prefix("pg_catalog.").unwrap_or(&class);
                if !matches!(
                    class,
                    "text_pattern_ops" | "varchar_pattern_ops" | "bpchar_pattern_ops"
                ) {
                    return Err(SqlError::unsupported(format!(
                        "operator class {class} is not supported"
                    )));
                }
            }
            if c.column.with_fill.is_some() {
                return Err(SqlError::unsupported("WITH FILL is not supported"));
            }
            match &c.column.expr {
                ast::Expr::Identifier(i) => Ok(crate::names::ident(i)),
                other => Err(SqlError::unsupported(format!(
                    "index expression {other} is not supported"
                ))),
            }
        })
        .collect::<SqlResult<_>>()?;
    let view = t.catalog()?;
    let def = view.table(&table)?;
    for (c, col) in ci.columns.iter().zip(&cols) {
        if let (Some(class), Some(i)) = (&c.operator_class, def.column_index(col)) {
            if def.columns[i].ty != walrus_engine::access::datum::TypeId::Text {
                return Err(SqlError::new(
                    "42804",
                    format!(
                        "operator class \"{}\" does not accept data type {}",
                        class.to_string().to_ascii_lowercase(),
                        crate::catalog_views::format_type_of(&def.columns[i])
                    ),
                ));
            }
        }
    }
    let name = match &ci.name {
        Some(n) => object_name(n),
        None => {
            let base = format!("{table}_{}_idx", cols.join("_"));
            let mut name = base.clone();
            let mut n = 0;
            while view.relation_exists(&name) {
                n += 1;
                name = format!("{base}{n}");
            }
            name
        }
    };
    if ci.if_not_exists && view.relation_exists(&name) {
        return Ok(QueryResult::tag("CREATE INDEX"));
    }
    create_index(t, &table, &name, &cols, ci.unique, false)?;
    Ok(QueryResult::tag("CREATE INDEX"))
}

/// `DROP TABLE [IF EXISTS] names` (`index` false) or `DROP INDEX [IF EXISTS] names`.
pub(crate) fn drop_objects(
    t: &mut Transaction,
    names: &[ast::ObjectName],
    if_exists: bool,
    index: bool,
    cascade: bool,
) -> SqlResult<QueryResult> {
    use walrus_engine::Error::{UndefinedIndex, UndefinedTable};
    let listed: Vec<String> = names.iter().map(object_name).collect();
    for name in &listed {
        let dropped = if index {
            if let Some((_, c)) = foreign_key_needing_index(t, name)? {
                return Err(SqlError::new(
                    "2BP01",
                    format!("cannot drop index {name} because other objects depend on it"),
                )
                .with_detail(format!(
                    "constraint {} on table {} depends on index {name}",
                    c.name, c.table
                ))
                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
            }
            t.drop_index(name)
        } else {
            // Foreign keys between tables dropped together are no dependency.
            // Resolved under the DROP's own lock, never a weaker one first (two sessions'
            // DDL on one table then queue instead of deadlocking on an upgrade).
            match t.lock_table(name, LockMode::AccessExclusive, false) {
                Ok(def) => {
                    let outside = def
                        .referenced_by
                        .iter()
                        .any(|c| c.table != *name && !listed.contains(&c.table));
                    let inside: Vec<_> = def
                        .referenced_by
                        .iter()
                        .filter(|c| c.table != *name && listed.contains(&c.table))
                        .cloned()
                        .collect();
                    for c in inside {
                        t.drop_constraint(&c.table, &c.name)?;
                    }
                    t.drop_table_cascade(name, cascade || !outside)
                }
                Err(e) => Err(e),
            }
        };
        match dropped {
            Err(UndefinedTable(_)) if if_exists && !index => {}
            Err(UndefinedIndex(_)) if if_exists && index => {}
            other => other?,
        }
    }
    Ok(QueryResult::tag(if index {
        "DROP INDEX"
    } else {
        "DROP TABLE"
    }))
}

/// A foreign key that references the columns of unique index `index` (which then
/// cannot go on its own), with the index's table.
fn foreign_key_needing_index(
    t: &mut Transaction,
    index: &str,
) -> SqlResult<
    Option<(
        String,
        std::sync::Arc<walrus_engine::catalog::ConstraintDef>,
    )>,
> {
    let view = t.catalog()?;
    Ok(view.tables.values().find_map(|def| {
        foreign_keys_needing(def, index)
            .into_iter()
            .next()
            .map(|c| (def.name.clone(), c))
    }))
}

/// The foreign keys referencing `def` whose key is checked through its unique index
/// `index` (`TableDef::index_on`, as the checks find it).
fn foreign_keys_needing(
    def: &walrus_engine::catalog::TableDef,
    index: &str,
) -> Vec<std::sync::Arc<walrus_engine::catalog::ConstraintDef>> {
    def.referenced_by
        .iter()
        .filter(|c| {
            c.foreign_key()
                .and_then(|fk| def.index_on(&fk.ref_columns, true))
                .is_some_and(|i| i.name == index)
        })
        .cloned()
        .collect()
}

/// `TRUNCATE [TABLE] names`.
pub(crate) fn truncate(t: &mut Transaction, tr: &ast::Truncate) -> SqlResult<QueryResult> {
    let mut names: Vec<String> = tr
        .table_names
        .iter()
        .map(|tn| object_name(&tn.name))
        .collect();
    let cascade = matches!(tr.cascade, Some(ast::CascadeOption::Cascade));
    // A table a foreign key references is truncated only with the referencing tables
    // (CASCADE adds them), or the references would dangle.
    let mut i = 0;
    while i < names.len() {
        let def = t.lock_table(&names[i], LockMode::AccessExclusive, false)?;
        for c in &def.referenced_by {
            if names.contains(&c.table) {
                continue;
            }
            if cascade {
                names.push(c.table.clone());
            } else {
                return Err(SqlError::unsupported(
                    "cannot truncate a table referenced in a foreign key constraint",
                )
                .with_detail(format!(
                    "Table \"{}\" references \"{}\".",
                    c.table, def.name
                ))
                .with_hint(format!(
                    "Truncate table \"{}\" at the same time, or use TRUNCATE ... CASCADE.",
                    c.table
                )));
            }
        }
        i += 1;
    }
    for name in &names {
        t.truncate(name)?;
    }
    Ok(QueryResult::tag("TRUNCATE TABLE"))
}

/// `LOCK [TABLE] [ONLY] name [, ...] [IN mode MODE] [NOWAIT]` (the caller checked it
/// runs in a transaction block): each table locked in turn, in the engine's table
/// lock manager, until the transaction ends. ACCESS EXCLUSIVE when no mode is named.
pub(crate) fn lock_tables(t: &mut Transaction, l: &ast::Lock) -> SqlResult<QueryResult> {
    let mode = match &l.lock_mode {
        None => LockMode::AccessExclusive,
        Some(m) => LockMode::from_sql(&m.to_string())
            .ok_or_else(|| SqlError::new("42601", format!("unknown lock mode {m}")))?,
    };
    for target in &l.tables {
        let schema = (target.name.0.len() > 1)
            .then(|| target.name.0[0].as_ident().map(ident))
            .flatten();
        let name = object_name(&target.name);
        if crate::catalog_views::is_virtual(schema.as_deref(), &name) {
            return Err(SqlError::unsupported(format!(
                "LOCK TABLE on system relation \"{name}\" is not supported"
            )));
        }
        t.lock_table(&name, mode, l.nowait)?;
    }
    Ok(QueryResult::tag("LOCK TABLE"))
}

/// `ALTER TABLE name` with the actions walrus implements (others are 0A000).
pub(crate) fn alter_table(
    env: &mut dyn super::Env,
    at: &ast::AlterTable,
) -> SqlResult<QueryResult> {
    let table = object_name(&at.name);
    // The statement's strongest lock first, as PostgreSQL's ALTER TABLE takes it when it
    // resolves the name (a weaker lock first would make two concurrent ALTERs of one
    // table deadlock on the upgrade): ShareRowExclusive when it only adds foreign
    // keys, else AccessExclusive.
    let only_foreign_keys = at.operations.iter().all(|op| {
        matches!(
            op,
            AlterTableOperation::AddConstraint {
                constraint: TableConstraint::ForeignKey(_),
                ..
            }
        )
    });
    let mode = if only_foreign_keys {
        LockMode::ShareRowExclusive
    } else {
        LockMode::AccessExclusive
    };
    match env.txn().lock_table(&table, mode, false) {
        // ALTER TABLE IF EXISTS of a missing table: nothing to do (PostgreSQL notes it).
        Err(walrus_engine::Error::UndefinedTable(_)) if at.if_exists => {
            return Ok(QueryResult::tag("ALTER TABLE"))
        }
        other => {
            other?;
        }
    }
    for op in &at.operations {
        if let AlterTableOperation::AddColumn {
            column_keyword: _,
            if_not_exists,
            column_def,
            column_position: None,
        } = op
        {
            add_column(env, &table, *if_not_exists, column_def)?;
            continue;
        }
        let t = env.txn();
        match op {
            AlterTableOperation::AddConstraint {
                constraint,
                not_valid,
            } => {
                if *not_valid {
                    return Err(SqlError::unsupported(
                        "ADD CONSTRAINT ... NOT VALID is not supported",
                    ));
                }
                add_constraint(t, &table, constraint)?
            }
            AlterTableOperation::DropConstraint {
                if_exists,
                name,
                drop_behavior,
            } => drop_constraint(
                t,
                &table,
                &ident(name),
                *if_exists,
                matches!(drop_behavior, Some(ast::DropBehavior::Cascade)),
            )?,
            AlterTableOperation::AlterColumn { column_name, op } => {
                alter_column(t, &table, &ident(column_name), op)?
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => rename_column(t, &table, &ident(old_column_name), &ident(new_column_name))?,
            AlterTableOperation::RenameTable {
                table_name: ast::RenameTableNameKind::To(new_name),
            } => {
                if at.operations.len() > 1 || new_name.0.len() > 1 {
                    return Err(SqlError::new("42601", "syntax error at or near \"RENAME\""));
                }
                t.rename_table(&table, &object_name(new_name))?
            }
            AlterTableOperation::DropColumn {
                has_column_keyword: _,
                column_names,
                if_exists,
                drop_behavior,
            } => drop_columns(
                t,
                &table,
                column_names,
                *if_exists,
                matches!(drop_behavior, Some(ast::DropBehavior::Cascade)),
            )?,
            other => {
                return Err(SqlError::unsupported(format!(
                    "ALTER TABLE {other} is not supported"
                )))
            }
        }
    }
    Ok(QueryResult::tag("ALTER TABLE"))
}

/// `DROP [COLUMN] [IF EXISTS] c [, ...] [CASCADE | RESTRICT]`: a table rewrite
/// (`Transaction::rewrite_table`; PostgreSQL only marks the column dropped, walrus
/// rewrites the rows without it). What depends on a dropped column goes with it, as
/// PostgreSQL's automatic dependencies do: its indexes, the CHECK and FOREIGN KEY
/// constraints of this table that use it, the sequences it owns (serial, identity);
/// another table's foreign key referencing it needs CASCADE (2BP01 otherwise).
fn drop_columns(
    t: &mut Transaction,
    table: &str,
    names: &[ast::Ident],
    if_exists: bool,
    cascade: bool,
) -> SqlResult<()> {
    let def = t.table(table)?;
    let mut dropped = vec![false; def.columns.len()];
    for n in names {
        let name = ident(n);
        match def.column_index(&name) {
            Some(i) => dropped[i] = true,
            None if if_exists => {}
            None => {
                return Err(SqlError::new(
                    "42703",
                    format!("column \"{name}\" of relation \"{table}\" does not exist"),
                ))
            }
        }
    }
    if !dropped.contains(&true) {
        return Ok(());
    }
    if dropped.iter().all(|d| *d) {
        return Err(SqlError::unsupported(
            "dropping every column of a table is not supported",
        ));
    }
    let gone: Vec<&str> = def
        .columns
        .iter()
        .zip(&dropped)
        .filter(|(_, d)| **d)
        .map(|(c, _)| c.name.as_str())
        .collect();
    for c in &def.constraints {
        if let walrus_engine::catalog::ConstraintKind::Check { expr } = &c.kind {
            let e = crate::stored_expr::parse(expr)?;
            if crate::stored_expr::columns_mentioned(&e)
                .iter()
                .any(|m| gone.contains(&m.as_str()))
            {
                t.drop_constraint(table, &c.name)?;
            }
        }
    }
    let owned = owned_sequences(t, table, |c| gone.contains(&c))?;
    let mut next = 0;
    let old_to_new: Vec<Option<usize>> = dropped
        .iter()
        .map(|&d| {
            (!d).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    t.rewrite_table(table, &old_to_new, cascade, |_| Ok(()), &mut |row| {
        Ok(row
            .into_iter()
            .zip(&dropped)
            .filter(|(_, d)| !**d)
            .map(|(v, _)| v)
            .collect())
    })?;
    for q in owned {
        t.drop_sequence(&q.name)?;
    }
    Ok(())
}

/// A column's UNIQUE option without the parts walrus does not build (characteristics,
/// INCLUDE, index options or method, NULLS NOT DISTINCT), which are refused instead.
fn plain_unique(u: &ast::UniqueConstraint) -> bool {
    u.characteristics.is_none()
        && u.include.is_empty()
        && u.index_options.is_empty()
        && u.index_type.is_none()
        && matches!(u.nulls_distinct, ast::NullsDistinctOption::None)
}

/// A column UNIQUE constraint's name: as written, else PostgreSQL's `table_col_key`.
fn unique_name(
    o: &ast::ColumnOptionDef,
    u: &ast::UniqueConstraint,
    table: &str,
    column: &str,
) -> String {
    o.name
        .as_ref()
        .or(u.name.as_ref())
        .map(ident)
        .unwrap_or_else(|| format!("{table}_{column}_key"))
}

/// `ADD [COLUMN] [IF NOT EXISTS] c type [DEFAULT e] [NOT NULL] [CHECK ...] [REFERENCES
/// ...] [UNIQUE | PRIMARY KEY]`. The column is appended to the catalog (rows stored
/// before it read it as NULL: the row format keeps each row's own column count); a
/// default is then written into every existing row (as `UPDATE t SET c = DEFAULT`,
/// evaluated per row like PostgreSQL's for a volatile default — a table rewrite in
/// cost, where PostgreSQL 11+ stores a constant default once), after which NOT NULL
/// and the constraints are checked against the rows. serial and identity columns are
/// refused (0A000).
fn add_column(
    env: &mut dyn super::Env,
    table: &str,
    if_not_exists: bool,
    c: &ast::ColumnDef,
) -> SqlResult<()> {
    use walrus_engine::catalog::ColumnDefault;
    let def = env.txn().table(table)?;
    let cname = ident(&c.name);
    if def.column_index(&cname).is_some() {
        if if_not_exists {
            return Ok(());
        }
        return Err(SqlError::new(
            "42701",
            format!("column \"{cname}\" of relation \"{table}\" already exists"),
        ));
    }
    if serial_type(&c.data_type).is_some() {
        return Err(SqlError::unsupported(
            "ADD COLUMN of a serial column is not supported",
        ));
    }
    let (ty, typmod, declared) = column_type(&c.data_type)?;
    let column = ColumnDef {
        name: cname.clone(),
        ty,
        not_null: false,
        typmod,
        declared,
    };
    let mut not_null = false;
    let mut default: Option<String> = None;
    let mut checks: Vec<(Option<String>, ast::Expr)> = Vec::new();
    let mut fks: Vec<ast::ForeignKeyConstraint> = Vec::new();
    let mut unique: Option<(String, bool)> = None;
    for o in &c.options {
        match &o.option {
            ColumnOption::Default(e) => default = check_default(e, &column)?,
            ColumnOption::NotNull => not_null = true,
            ColumnOption::Null => {}
            ColumnOption::Check(ch) if ch.enforced != Some(false) => checks.push((
                o.name.as_ref().or(ch.name.as_ref()).map(ident),
                (*ch.expr).clone(),
            )),
            ColumnOption::ForeignKey(fk) => {
                let mut fk = fk.clone();
                if fk.name.is_none() {
                    fk.name = o.name.clone();
                }
                fks.push(fk);
            }
            ColumnOption::PrimaryKey(_) => {
                not_null = true;
                let name = o
                    .name
                    .as_ref()
                    .map(ident)
                    .unwrap_or_else(|| format!("{table}_pkey"));
                unique = Some((name, true));
            }
            ColumnOption::Unique(u) if plain_unique(u) => {
                unique = Some((unique_name(o, u, table, &cname), false));
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "ADD COLUMN with column option {other} is not supported"
                )))
            }
        }
    }
    let position = def.columns.len();
    if position >= walrus_base::limits::COLUMNS_MAX {
        return Err(SqlError::new(
            "54011",
            format!(
                "tables can have at most {} columns",
                walrus_base::limits::COLUMNS_MAX
            ),
        ));
    }
    let has_default = default.is_some();
    env.txn().alter_table_def(table, &[], |d| {
        d.columns.push(column);
        if let Some(text) = default {
            d.defaults.resize(d.columns.len(), None);
            d.defaults[position] = Some(ColumnDefault::Expr(text));
        }
        Ok(())
    })?;
    if has_default {
        env.txn().next_statement();
        let sql = format!(
            "update {} set {} = default",
            crate::names::quote_ident(table),
            crate::names::quote_ident(&cname)
        );
        let parsed =
            sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, &sql)
                .map_err(|e| SqlError::new("XX000", e.to_string()))?;
        let [ast::Statement::Update(u)] = parsed.as_slice() else {
            return Err(SqlError::new(
                "XX000",
                "ADD COLUMN: default fill did not parse",
            ));
        };
        super::dml::update(env, u, &[])?;
    }
    env.txn().next_statement();
    let t = env.txn();
    if not_null {
        t.alter_table_def(table, &[position], |d| {
            d.columns[position].not_null = true;
            Ok(())
        })?;
    }
    if let Some((name, primary)) = unique {
        create_index(t, table, &name, std::slice::from_ref(&cname), true, primary)?;
    }
    for (name, e) in checks {
        let def = t.table(table)?;
        let cons = super::constraints::check_constraint(t, &def, name, &e, &[])?;
        super::constraints::add(t, &cons)?;
    }
    for fk in fks {
        let def = t.table(table)?;
        let cons = super::constraints::foreign_key(t, &def, &fk, Some(&cname), &[])?;
        super::constraints::add(t, &cons)?;
    }
    Ok(())
}

/// `DROP CONSTRAINT [IF EXISTS] name [CASCADE]`: a CHECK or FOREIGN KEY constraint,
/// or the index of a UNIQUE / PRIMARY KEY one (refused while a foreign key needs it,
/// unless CASCADE, which drops those foreign keys too).
fn drop_constraint(
    t: &mut Transaction,
    table: &str,
    name: &str,
    if_exists: bool,
    cascade: bool,
) -> SqlResult<()> {
    let def = t.table(table)?;
    if def.constraints.iter().any(|c| c.name == name) {
        t.drop_constraint(table, name)?;
        return Ok(());
    }
    if let Some(idx) = def.indexes.iter().find(|i| i.name == name && i.unique) {
        let dependents = foreign_keys_needing(&def, &idx.name);
        if let Some(c) = dependents.first() {
            if !cascade {
                return Err(SqlError::new(
                    "2BP01",
                    format!(
                        "cannot drop constraint {name} on table {table} because other objects depend on it"
                    ),
                )
                .with_detail(format!(
                    "constraint {} on table {} depends on index {name}",
                    c.name, c.table
                ))
                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
            }
        }
        for c in &dependents {
            t.drop_constraint(&c.table, &c.name)?;
        }
        if idx.primary {
            t.drop_primary_key(table, name)?;
        } else {
            t.drop_index(name)?;
        }
        return Ok(());
    }
    if if_exists {
        return Ok(());
    }
    Err(SqlError::new(
        "42704",
        format!("constraint \"{name}\" of relation \"{table}\" does not exist"),
    ))
}

/// The position of column `name` of `table` (42703 when there is none).
fn column_position(
    def: &walrus_engine::catalog::TableDef,
    table: &str,
    name: &str,
) -> SqlResult<usize> {
    def.column_index(name).ok_or_else(|| {
        SqlError::new(
            "42703",
            format!("column \"{name}\" of relation \"{table}\" does not exist"),
        )
    })
}

/// `ALTER [COLUMN] c SET DEFAULT e | DROP DEFAULT | SET NOT NULL | DROP NOT NULL`:
/// catalog changes only (SET NOT NULL first checks the rows), transactional.
fn alter_column(
    t: &mut Transaction,
    table: &str,
    column: &str,
    op: &ast::AlterColumnOperation,
) -> SqlResult<()> {
    use walrus_engine::catalog::ColumnDefault;
    let def = t.table(table)?;
    let i = column_position(&def, table, column)?;
    let identity = || {
        SqlError::new(
            "55000",
            format!("column \"{column}\" of relation \"{table}\" is an identity column"),
        )
    };
    let is_identity = matches!(def.default_of(i), Some(ColumnDefault::Identity { .. }));
    let set_default = |d: &mut walrus_engine::catalog::TableDef, v: Option<ColumnDefault>| {
        d.defaults.resize(d.columns.len(), None);
        d.defaults[i] = v;
        if d.defaults.iter().all(Option::is_none) {
            d.defaults.clear();
        }
        Ok(())
    };
    match op {
        ast::AlterColumnOperation::SetDefault { value } => {
            if is_identity {
                return Err(identity());
            }
            let text = check_default(value, &def.columns[i])?;
            t.alter_table_def(table, &[], |d| {
                set_default(d, text.map(ColumnDefault::Expr))
            })?;
        }
        ast::AlterColumnOperation::DropDefault => {
            if is_identity {
                return Err(identity());
            }
            t.alter_table_def(table, &[], |d| set_default(d, None))?;
        }
        ast::AlterColumnOperation::SetNotNull => {
            t.alter_table_def(table, &[i], |d| {
                d.columns[i].not_null = true;
                Ok(())
            })?;
        }
        ast::AlterColumnOperation::DropNotNull => {
            if def
                .indexes
                .iter()
                .any(|x| x.primary && x.columns.contains(&i))
            {
                return Err(SqlError::new(
                    "42P16",
                    format!("column \"{column}\" is in a primary key"),
                ));
            }
            if is_identity {
                return Err(identity());
            }
            t.alter_table_def(table, &[], |d| {
                d.columns[i].not_null = false;
                Ok(())
            })?;
        }
        ast::AlterColumnOperation::SetDataType {
            data_type,
            using,
            had_set: _,
        } => alter_column_type(t, &def, table, i, data_type, using.as_ref())?,
        other => {
            return Err(SqlError::unsupported(format!(
                "ALTER TABLE ... ALTER COLUMN {other} is not supported"
            )))
        }
    }
    Ok(())
}

/// `ALTER COLUMN c [SET DATA] TYPE t [USING e]`. Where the stored form stays the same
/// (between `text` and `varchar[(n)]`, `varchar` lengths, `numeric` precisions at the
/// same scale) it is a catalog change after every row that may still be live has been
/// checked against the new modifier (22001 / 22003, as PostgreSQL's rewrite would
/// report). A change of stored type, `USING`, a `char(n)` change (padding) and a
/// numeric scale change rewrite the table ([`rewrite_column_type`]).
fn alter_column_type(
    t: &mut Transaction,
    def: &walrus_engine::catalog::TableDef,
    table: &str,
    i: usize,
    data_type: &ast::DataType,
    using: Option<&ast::Expr>,
) -> SqlResult<()> {
    use walrus_engine::catalog::DeclaredType;
    let old = def.columns[i].clone();
    let (ty, typmod, declared) = column_type(data_type)?;
    let new = ColumnDef {
        ty,
        typmod,
        declared,
        ..old.clone()
    };
    let scale = |m: i32| (m - 4) & 0xffff;
    let needs_rewrite = using.is_some()
        || ty != old.ty
        || ((declared == DeclaredType::Char || old.declared == DeclaredType::Char)
            && (declared != old.declared || typmod != old.typmod))
        || (ty == TypeId::Numeric
            && typmod != -1
            && (old.typmod == -1 || scale(old.typmod) != scale(typmod)));
    if needs_rewrite {
        return rewrite_column_type(t, def, table, i, new, data_type, using);
    }
    if declared == DeclaredType::Char {
        // Same char(n): nothing changes.
        return Ok(());
    }
    // Only a tighter limit can refuse a stored value.
    let check_rows = typmod != -1 && (old.typmod == -1 || typmod < old.typmod);
    let check = |_: &walrus_engine::catalog::TableDef,
                 _: usize,
                 v: &walrus_engine::access::datum::Datum| {
        crate::expr::assign(v.clone(), &new)
            .map(|_| ())
            .map_err(|e| walrus_engine::Error::Rejected {
                message: e.message,
                sqlstate: e.sqlstate,
            })
    };
    let columns: &[usize] = if check_rows { &[i] } else { &[] };
    t.alter_table_def_checked(table, columns, &check, |d| {
        d.columns[i].typmod = typmod;
        d.columns[i].declared = declared;
        Ok(())
    })?;
    Ok(())
}

/// Whether PostgreSQL converts a stored `from` value to `to` without USING (an
/// implicit or assignment cast): among the number types, to text (I/O conversion),
/// and among date, timestamp and timestamptz.
fn assignment_cast_exists(from: TypeId, to: TypeId) -> bool {
    use TypeId::*;
    let number = |t| matches!(t, Int2 | Int4 | Int8 | Numeric | Float8);
    let time = |t| matches!(t, Date | Timestamp | TimestampTz);
    from == to || to == Text || (number(from) && number(to)) || (time(from) && time(to))
}

/// The rewrite half of [`alter_column_type`]: every row converted — the USING
/// expression evaluated over the old row, or the old value cast — then assigned to the
/// new column type (its modifier checked), into a new heap file with every index
/// rebuilt (`Transaction::rewrite_table`). Without USING, a type PostgreSQL does not
/// convert automatically is 42804 with its hint. A column a foreign key or CHECK
/// constraint uses is refused (0A000): their re-validation for the new type is not
/// built.
fn rewrite_column_type(
    t: &mut Transaction,
    def: &walrus_engine::catalog::TableDef,
    table: &str,
    i: usize,
    new: ColumnDef,
    data_type: &ast::DataType,
    using: Option<&ast::Expr>,
) -> SqlResult<()> {
    let old = &def.columns[i];
    if using.is_none() && !assignment_cast_exists(old.ty, new.ty) {
        return Err(SqlError::new(
            "42804",
            format!(
                "column \"{}\" cannot be cast automatically to type {}",
                old.name,
                crate::catalog_views::format_type_of(&new)
            ),
        )
        .with_hint(format!(
            "You might need to specify \"USING {}::{}\".",
            old.name,
            data_type.to_string().to_ascii_lowercase()
        )));
    }
    let in_foreign_key = def
        .constraints
        .iter()
        .chain(&def.referenced_by)
        .filter_map(|c| c.foreign_key().map(|f| (c, f)))
        .any(|(c, f)| {
            (c.table == table && f.columns.contains(&i))
                || (f.ref_table == table && f.ref_columns.contains(&i))
        });
    let in_check = def.constraints.iter().any(|c| match &c.kind {
        walrus_engine::catalog::ConstraintKind::Check { expr } => crate::stored_expr::parse(expr)
            .map(|e| crate::stored_expr::columns_mentioned(&e).contains(&old.name))
            .unwrap_or(true),
        _ => false,
    });
    if in_foreign_key || in_check {
        return Err(SqlError::unsupported(format!(
            "ALTER COLUMN \"{}\" TYPE of a column a constraint uses is not supported",
            old.name
        )));
    }
    let now = crate::value::system_time_to_pg(std::time::SystemTime::now());
    // char(n) to another text type drops the padding, as PostgreSQL's cast does.
    let unpad = old.declared == walrus_engine::catalog::DeclaredType::Char
        && new.declared != walrus_engine::catalog::DeclaredType::Char;
    let columns = def.columns.clone();
    let keep: Vec<Option<usize>> = (0..columns.len()).map(Some).collect();
    let target = new.clone();
    let rejected = |e: SqlError| walrus_engine::Error::Rejected {
        message: e.message,
        sqlstate: e.sqlstate,
    };
    t.rewrite_table(
        table,
        &keep,
        false,
        |d| {
            d.columns[i] = new;
            Ok(())
        },
        &mut |mut row| {
            let v = match using {
                Some(e) => crate::expr::eval(e, &Scope::bare(&columns, Some(&row), now))
                    .map_err(rejected)?,
                None => std::mem::replace(&mut row[i], Datum::Null),
            };
            let v = match v {
                Datum::Text(s) if unpad && using.is_none() => {
                    Datum::Text(s.trim_end_matches(' ').to_string())
                }
                v => v,
            };
            row[i] = crate::expr::assign(v, &target).map_err(rejected)?;
            Ok(row)
        },
    )?;
    Ok(())
}

/// The sequences OWNED BY a column of `table` that `column` accepts (those of serial
/// and identity columns, and any `ALTER SEQUENCE ... OWNED BY`).
fn owned_sequences(
    t: &mut Transaction,
    table: &str,
    column: impl Fn(&str) -> bool,
) -> SqlResult<Vec<std::sync::Arc<walrus_engine::catalog::SequenceDef>>> {
    Ok(t.catalog()?
        .sequences
        .values()
        .filter(|q| {
            q.owned_by
                .as_ref()
                .is_some_and(|(tb, c)| tb == table && column(c))
        })
        .cloned()
        .collect())
}

/// `RENAME [COLUMN] a TO b`: the catalog row, and the sequences OWNED BY the column.
fn rename_column(t: &mut Transaction, table: &str, old: &str, new: &str) -> SqlResult<()> {
    let def = t.table(table)?;
    let i = column_position(&def, table, old)?;
    if def.column_index(new).is_some() {
        return Err(SqlError::new(
            "42701",
            format!("column \"{new}\" of relation \"{table}\" already exists"),
        ));
    }
    let new_name = new.to_string();
    t.alter_table_def(table, &[], |d| {
        d.columns[i].name = new_name;
        Ok(())
    })?;
    // CHECK expressions name their columns: rewritten to the new name.
    for c in &def.constraints {
        let walrus_engine::catalog::ConstraintKind::Check { expr } = &c.kind else {
            continue;
        };
        let mut e = (*crate::stored_expr::parse(expr)?).clone();
        let mut renamed = false;
        let _ = ast::visit_expressions_mut(&mut e, |x| {
            if let ast::Expr::Identifier(id) = x {
                if ident(id) == old {
                    *id = if crate::names::quote_ident(new) == new {
                        ast::Ident::new(new)
                    } else {
                        ast::Ident::with_quote('"', new)
                    };
                    renamed = true;
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        if renamed {
            t.drop_constraint(table, &c.name)?;
            t.add_constraint(&walrus_engine::catalog::ConstraintDef {
                kind: walrus_engine::catalog::ConstraintKind::Check {
                    expr: e.to_string(),
                },
                ..(**c).clone()
            })?;
        }
    }
    let owned = owned_sequences(t, table, |c| c == old)?;
    for q in owned {
        let nq = walrus_engine::catalog::SequenceDef {
            owned_by: Some((table.to_string(), new.to_string())),
            ..(*q).clone()
        };
        t.alter_sequence(&q.name, nq, None)?;
    }
    Ok(())
}
