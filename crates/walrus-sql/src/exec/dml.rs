//! INSERT (VALUES or SELECT), UPDATE and DELETE on one user table, and the row reads they
//! and single-table SELECTs share: the rows matching a WHERE clause through the access
//! path the planner chose, with READ COMMITTED's re-check of concurrently updated rows.

use super::constraints::{self, FkWork, TableConstraints};
use super::defaults::{check_not_always, default_value, is_default_keyword, DmlHooks};
use std::ops::Bound;
use std::sync::Arc;
use walrus_engine::catalog::ColumnDefault;

use sqlparser::ast::{self, Expr, SetExpr, TableFactor};
use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, DeclaredType, TableDef};
use walrus_engine::engine::{RowChange, Transaction};

use super::select::mark_used_columns;
use super::Env;
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Prepared};
use crate::expr::{assign, eval, Scope};
use crate::names::{ident, object_name};
use crate::plan::{choose_access, Access};
use crate::result::{Column, QueryResult};
use crate::stats::TableStatistics;

/// Refuses the INSERT forms walrus does not implement. Every field of sqlparser's
/// `Insert` is named, so a new one fails to compile here until it is decided.
fn check_insert(ins: &ast::Insert) -> SqlResult<()> {
    let ast::Insert {
        insert_token: _,
        optimizer_hints,
        or,
        ignore,
        into: _,
        table: _,
        table_alias,
        columns: _,
        overwrite,
        source: _,
        assignments,
        partitioned,
        after_columns,
        has_table_keyword,
        on,
        returning: _,
        output,
        replace_into,
        priority,
        insert_alias,
        settings,
        format_clause,
        multi_table_insert_type,
        multi_table_into_clauses,
        multi_table_when_clauses,
        multi_table_else_clause,
    } = ins;
    let refuse = |what: &str| Err(SqlError::unsupported(format!("{what} is not supported")));
    match on {
        None => {}
        Some(ast::OnInsert::OnConflict(ast::OnConflict {
            conflict_target,
            action: ast::OnConflictAction::DoNothing,
        })) => match conflict_target {
            None | Some(ast::ConflictTarget::Columns(_)) => {}
            Some(ast::ConflictTarget::OnConstraint(_)) => {
                return refuse("INSERT ... ON CONFLICT ON CONSTRAINT");
            }
        },
        Some(on) => return refuse(&format!("INSERT ... {on}")),
    }
    if table_alias.is_some() {
        return refuse("INSERT INTO table AS alias");
    }
    if !optimizer_hints.is_empty() {
        return refuse("optimizer hints");
    }
    if or.is_some() || *ignore || *replace_into || priority.is_some() {
        return refuse("this INSERT variant");
    }
    if *overwrite || partitioned.is_some() || !after_columns.is_empty() || *has_table_keyword {
        return refuse("this INSERT variant");
    }
    if !assignments.is_empty() || output.is_some() || insert_alias.is_some() {
        return refuse("this INSERT variant");
    }
    if settings.is_some() || format_clause.is_some() {
        return refuse("INSERT SETTINGS / FORMAT");
    }
    if multi_table_insert_type.is_some()
        || !multi_table_into_clauses.is_empty()
        || !multi_table_when_clauses.is_empty()
        || multi_table_else_clause.is_some()
    {
        return refuse("multi-table INSERT");
    }
    Ok(())
}

/// One output column of RETURNING: a table column, or an expression over the row.
pub(crate) enum ReturnItem {
    Column(usize),
    Expr(Box<Expr>),
}

/// RETURNING's output columns (names, expressions), `*` expanded to the table's columns.
pub(crate) fn returning_items(
    items: &[ast::SelectItem],
    def: &TableDef,
    alias: Option<&str>,
) -> SqlResult<Vec<(String, ReturnItem)>> {
    let mut out = Vec::new();
    for it in items {
        match it {
            ast::SelectItem::Wildcard(opts) if opts.to_string().is_empty() => {
                for (i, c) in def.columns.iter().enumerate() {
                    out.push((c.name.clone(), ReturnItem::Column(i)));
                }
            }
            ast::SelectItem::QualifiedWildcard(
                ast::SelectItemQualifiedWildcardKind::ObjectName(n),
                opts,
            ) if opts.to_string().is_empty() => {
                let q = object_name(n);
                if q != alias.unwrap_or(&def.name) {
                    return Err(SqlError::new(
                        "42P01",
                        format!("missing FROM-clause entry for table \"{q}\""),
                    ));
                }
                for (i, c) in def.columns.iter().enumerate() {
                    out.push((c.name.clone(), ReturnItem::Column(i)));
                }
            }
            ast::SelectItem::UnnamedExpr(e) => out.push((
                crate::plan::output_name(e),
                ReturnItem::Expr(Box::new(e.clone())),
            )),
            ast::SelectItem::ExprWithAlias { expr, alias } => out.push((
                crate::names::ident(alias),
                ReturnItem::Expr(Box::new(expr.clone())),
            )),
            other => {
                return Err(SqlError::unsupported(format!(
                    "RETURNING {other} is not supported"
                )))
            }
        }
    }
    Ok(out)
}

/// The result columns RETURNING describes (Describe and execution agree).
pub(crate) fn returning_columns(items: &[(String, ReturnItem)], def: &TableDef) -> Vec<Column> {
    items
        .iter()
        .map(|(n, it)| {
            // A plain column (`*` or its name) is described as the table's column.
            let (column, expr) = match it {
                ReturnItem::Column(i) => (Some(*i), None),
                ReturnItem::Expr(e) => (
                    crate::rel::col_ref(e).and_then(|(_, name)| def.column_index(&name)),
                    Some(e),
                ),
            };
            match (column, expr) {
                (Some(i), _) => {
                    let c = &def.columns[i];
                    Column {
                        type_oid: crate::rel::column_type_oid(c),
                        typmod: c.typmod,
                        table_oid: def.relfile.0,
                        attnum: def.attnum(i),
                        ..Column::new(n.clone(), c.ty)
                    }
                }
                (None, e) => Column::new(
                    n.clone(),
                    e.and_then(|e| crate::plan::static_type(e, &def.columns))
                        .unwrap_or(TypeId::Text),
                ),
            }
        })
        .collect()
}

/// Collects RETURNING's rows over the changed rows (new rows for INSERT and UPDATE, the
/// deleted rows for DELETE).
struct Returning<'a> {
    items: Vec<(String, ReturnItem)>,
    def: &'a TableDef,
    rows: Vec<Vec<Datum>>,
}

impl<'a> Returning<'a> {
    fn new(
        items: Option<&Vec<ast::SelectItem>>,
        def: &'a TableDef,
        alias: Option<&str>,
    ) -> SqlResult<Option<Returning<'a>>> {
        let Some(items) = items else {
            return Ok(None);
        };
        let items = returning_items(items, def, alias)?;
        // Bind before any row changes: a misspelt column fails on an empty table too.
        let cols = crate::plan::table_cols(alias.unwrap_or(&def.name), def);
        for (_, it) in &items {
            if let ReturnItem::Expr(e) = it {
                crate::plan::bind(e, &cols, None, &[])?;
                if crate::plan::contains_aggregate(e) {
                    return Err(SqlError::new(
                        "42803",
                        "aggregate functions are not allowed in RETURNING",
                    ));
                }
            }
        }
        Ok(Some(Returning {
            items,
            def,
            rows: Vec::new(),
        }))
    }

    fn push(&mut self, row: &[Datum], scope: &Scope<'_>) -> SqlResult<()> {
        let scope = Scope {
            columns: &self.def.columns,
            row: Some(row),
            params: scope.params,
            now: scope.now,
            setting: scope.setting,
            interrupt: scope.interrupt,
            frame: None,
            hooks: None,
        };
        let out = self
            .items
            .iter()
            .map(|(_, it)| match it {
                ReturnItem::Column(i) => Ok(row.get(*i).cloned().unwrap_or(Datum::Null)),
                ReturnItem::Expr(e) => eval(e, &scope),
            })
            .collect::<SqlResult<Vec<_>>>()?;
        self.rows.push(out);
        Ok(())
    }

    fn result(r: Option<Returning<'_>>, tag: String) -> QueryResult {
        match r {
            None => QueryResult::tag(tag),
            Some(r) => QueryResult {
                tag_only: false,
                tag,
                columns: returning_columns(&r.items, r.def),
                rows: r.rows,
            },
        }
    }
}

pub(crate) fn insert(
    env: &mut dyn Env,
    ins: &ast::Insert,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    check_insert(ins)?;
    let table = match &ins.table {
        ast::TableObject::TableName(n) => object_name(n),
        other => {
            return Err(SqlError::unsupported(format!(
                "INSERT into {other} is not supported"
            )))
        }
    };
    let def = env.txn().table(&table)?;
    let mut returning = Returning::new(ins.returning.as_ref(), &def, None)?;
    let skip_conflicts = conflict_arbiters(ins, &def)?;
    let targets: Vec<usize> = if ins.columns.is_empty() {
        (0..def.columns.len()).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let n = object_name(c);
                def.column_index(&n).ok_or_else(|| {
                    SqlError::new(
                        "42703",
                        format!("column \"{n}\" of relation \"{table}\" does not exist"),
                    )
                })
            })
            .collect::<SqlResult<_>>()?
    };
    for (i, c) in targets.iter().enumerate() {
        if targets[..i].contains(c) {
            return Err(SqlError::new(
                "42701",
                format!(
                    "column \"{}\" specified more than once",
                    def.columns[*c].name
                ),
            ));
        }
    }
    let Some(source) = ins.source.as_ref() else {
        // INSERT ... DEFAULT VALUES: one row of defaults.
        if !ins.columns.is_empty() {
            return Err(SqlError::syntax("syntax error at or near \"DEFAULT\""));
        }
        return with_statement_scope(env, params, |env, scope| {
            let mut row = vec![Datum::Null; def.columns.len()];
            fill_defaults(&def, &[], &mut row, scope)?;
            let mut sink = RowSink::new(&def, skip_conflicts.as_ref())?;
            sink.push(env, Ok(row), returning.as_mut(), scope)?;
            let n = sink.finish(env, returning.as_mut(), scope)?;
            Ok(Returning::result(returning, format!("INSERT 0 {n}")))
        });
    };
    with_statement_scope(env, params, |env, scope| {
        let values = match source.body.as_ref() {
            SetExpr::Values(v) if source.order_by.is_none() && source.limit_clause.is_none() => v,
            SetExpr::Select(_) | SetExpr::Values(_) | SetExpr::SetOperation { .. } => {
                // INSERT ... SELECT (pgbench -I G generates its data this way).
                let rows = super::select(env, source, params)?.rows;
                let mut sink = RowSink::new(&def, skip_conflicts.as_ref())?;
                for r in rows {
                    let row = (|| {
                        if r.len() > targets.len() {
                            return Err(SqlError::syntax(
                                "INSERT has more expressions than target columns",
                            ));
                        }
                        let mut row = vec![Datum::Null; def.columns.len()];
                        let given = &targets[..r.len()];
                        for (v, &ci) in r.into_iter().zip(&targets) {
                            check_not_always(&def, ci)?;
                            row[ci] = assign(v, &def.columns[ci])?;
                        }
                        fill_defaults(&def, given, &mut row, scope)?;
                        Ok(row)
                    })();
                    sink.push(env, row, returning.as_mut(), scope)?;
                }
                let n = sink.finish(env, returning.as_mut(), scope)?;
                return Ok(Returning::result(returning, format!("INSERT 0 {n}")));
            }
            _ => return Err(SqlError::unsupported("this INSERT source is not supported")),
        };
        let mut sink = RowSink::new(&def, skip_conflicts.as_ref())?;
        for row_exprs in &values.rows {
            let row = (|| {
                if row_exprs.len() > targets.len() {
                    return Err(SqlError::syntax(
                        "INSERT has more expressions than target columns",
                    ));
                }
                if row_exprs.len() < targets.len() && !ins.columns.is_empty() {
                    return Err(SqlError::syntax(
                        "INSERT has more target columns than expressions",
                    ));
                }
                let mut row = vec![Datum::Null; def.columns.len()];
                let mut given = Vec::with_capacity(row_exprs.len());
                for (e, &ci) in row_exprs.iter().zip(&targets) {
                    // DEFAULT leaves the column to fill_defaults.
                    if is_default_keyword(e) {
                        continue;
                    }
                    check_not_always(&def, ci)?;
                    row[ci] = assign(eval(e, scope)?, &def.columns[ci])?;
                    given.push(ci);
                }
                fill_defaults(&def, &given, &mut row, scope)?;
                Ok(row)
            })();
            sink.push(env, row, returning.as_mut(), scope)?;
        }
        let n = sink.finish(env, returning.as_mut(), scope)?;
        Ok(Returning::result(returning, format!("INSERT 0 {n}")))
    })
}

/// `CREATE TABLE name [(names)] AS query`: a table with the query's result columns
/// (names, types and type modifiers as the result describes them; `names` rename them
/// in order), filled with its rows by the same batched path as INSERT ... SELECT. The
/// tag is PostgreSQL's, `SELECT n`.
pub(crate) fn create_table_as(
    env: &mut dyn Env,
    ct: &ast::CreateTable,
    query: &ast::Query,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    let fillfactor = super::ddl::table_options(ct)?;
    if !ct.constraints.is_empty()
        || ct
            .columns
            .iter()
            .any(|c| c.data_type != ast::DataType::Unspecified || !c.options.is_empty())
    {
        return Err(SqlError::syntax(
            "CREATE TABLE AS takes column names only, without types or constraints",
        ));
    }
    let name = object_name(&ct.name);
    if ct.if_not_exists && env.txn().table(&name).is_ok() {
        return Ok(QueryResult::tag("CREATE TABLE AS"));
    }
    let result = super::select(env, query, params)?;
    if ct.columns.len() > result.columns.len() {
        return Err(SqlError::syntax(
            "CREATE TABLE AS specifies too many column names",
        ));
    }
    let mut columns: Vec<ColumnDef> = Vec::with_capacity(result.columns.len());
    for (i, c) in result.columns.iter().enumerate() {
        let cname = ct
            .columns
            .get(i)
            .map_or_else(|| c.name.clone(), |named| ident(&named.name));
        if columns.iter().any(|d| d.name == cname) {
            return Err(SqlError::new(
                "42701",
                format!("column \"{cname}\" specified more than once"),
            ));
        }
        columns.push(ColumnDef {
            name: cname,
            ty: c.ty,
            not_null: false,
            typmod: c.typmod,
            declared: match c.type_oid {
                1043 => DeclaredType::Varchar,
                1042 => DeclaredType::Char,
                _ => DeclaredType::Plain,
            },
        });
    }
    env.txn().create_table(&name, columns, fillfactor)?;
    let def = env.txn().table(&name)?;
    with_statement_scope(env, params, |env, scope| {
        let mut sink = RowSink::new(&def, None)?;
        for r in result.rows {
            let row = r
                .into_iter()
                .zip(&def.columns)
                .map(|(v, c)| assign(v, c))
                .collect::<SqlResult<Vec<Datum>>>();
            sink.push(env, row, None, scope)?;
        }
        let n = sink.finish(env, None, scope)?;
        Ok(QueryResult {
            tag_only: true,
            ..QueryResult::tag(format!("SELECT {n}"))
        })
    })
}

/// Runs `f` with the statement's expression scope: no row, only the parameters, the
/// statement's clock, settings and interrupt (INSERT's values and RETURNING use it).
fn with_statement_scope<R>(
    env: &mut dyn Env,
    params: &[Datum],
    f: impl FnOnce(&mut dyn Env, &Scope<'_>) -> SqlResult<R>,
) -> SqlResult<R> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let intr = env.interrupt();
    let hooks = DmlHooks::new(env)?;
    let scope = Scope {
        columns: &[],
        row: None,
        params,
        now,
        setting: &get,
        interrupt: Some(&intr),
        frame: None,
        hooks: Some(&hooks),
    };
    f(env, &scope)
}

/// Writes each column's default into `row` where the statement gave the column no
/// value (`given` are the columns it did).
fn fill_defaults(
    def: &TableDef,
    given: &[usize],
    row: &mut [Datum],
    scope: &Scope<'_>,
) -> SqlResult<()> {
    if def.defaults.is_empty() {
        return Ok(());
    }
    for (i, d) in def.defaults.iter().enumerate() {
        if d.is_some() && !given.contains(&i) {
            row[i] = assign(default_value(def, i, scope)?, &def.columns[i])?;
        }
    }
    Ok(())
}

/// Which unique indexes `ON CONFLICT ... DO NOTHING` skips conflicts on: `None` without
/// the clause, `Some(None)` for every unique index (no conflict target), else the unique
/// indexes whose columns are exactly the target's (PostgreSQL's arbiter inference;
/// 42P10 when there is none).
fn conflict_arbiters(ins: &ast::Insert, def: &TableDef) -> SqlResult<Option<Option<Vec<String>>>> {
    let Some(ast::OnInsert::OnConflict(oc)) = &ins.on else {
        return Ok(None);
    };
    let Some(ast::ConflictTarget::Columns(cols)) = &oc.conflict_target else {
        return Ok(Some(None));
    };
    let mut wanted = Vec::new();
    for c in cols {
        let n = ident(c);
        let i = def
            .column_index(&n)
            .ok_or_else(|| SqlError::new("42703", format!("column \"{n}\" does not exist")))?;
        if !wanted.contains(&i) {
            wanted.push(i);
        }
    }
    wanted.sort_unstable();
    let names: Vec<String> = def
        .indexes
        .iter()
        .filter(|idx| {
            let mut have = idx.columns.clone();
            have.sort_unstable();
            have.dedup();
            idx.unique && have == wanted
        })
        .map(|idx| idx.name.clone())
        .collect();
    if names.is_empty() {
        return Err(SqlError::new(
            "42P10",
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        ));
    }
    Ok(Some(Some(names)))
}

/// Rows an INSERT writes, batched into `Transaction::insert_many` (a page per WAL
/// record) unless `ON CONFLICT DO NOTHING` needs each row's own check. Rows are built
/// lazily by the caller; a row that failed to build flushes the batch before its error
/// is returned, so errors come in row order as in a row-by-row insert.
struct RowSink<'a> {
    def: &'a TableDef,
    skip: Option<&'a Option<Vec<String>>>,
    batch: Vec<Vec<Datum>>,
    inserted: u64,
    /// The table's CHECK and FOREIGN KEY constraints, if it has any.
    constraints: Option<TableConstraints>,
    /// Foreign-key checks for the end of the statement.
    fk_work: FkWork,
}

/// Rows buffered before a batch is written: enough to fill many pages per call, few
/// enough that a statement's memory stays small.
const INSERT_BATCH_ROWS: usize = 1000;

impl<'a> RowSink<'a> {
    fn new(def: &'a TableDef, skip: Option<&'a Option<Vec<String>>>) -> SqlResult<Self> {
        Ok(RowSink {
            def,
            skip,
            batch: Vec::new(),
            inserted: 0,
            constraints: TableConstraints::of(def)?,
            fk_work: FkWork::default(),
        })
    }

    fn push(
        &mut self,
        env: &mut dyn Env,
        row: SqlResult<Vec<Datum>>,
        returning: Option<&mut Returning>,
        scope: &Scope<'_>,
    ) -> SqlResult<()> {
        let row = match row.and_then(|row| match &self.constraints {
            Some(c) => c.check_row(&row, scope).map(|()| row),
            None => Ok(row),
        }) {
            Ok(row) => row,
            Err(e) => {
                self.flush(env, returning, scope)?;
                return Err(e);
            }
        };
        if let Some(arbiters) = self.skip {
            let inserted = env
                .txn()
                .insert_or_skip(self.def, &row, arbiters.as_deref())?;
            if let (Some(tid), Some(c)) = (inserted, &self.constraints) {
                c.inserted(&mut self.fk_work, tid, &row);
            }
            if inserted.is_some() {
                if let Some(ret) = returning {
                    ret.push(&row, scope)?;
                }
                self.inserted += 1;
            }
            return Ok(());
        }
        self.batch.push(row);
        if self.batch.len() >= INSERT_BATCH_ROWS {
            self.flush(env, returning, scope)?;
        }
        Ok(())
    }

    fn flush(
        &mut self,
        env: &mut dyn Env,
        returning: Option<&mut Returning>,
        scope: &Scope<'_>,
    ) -> SqlResult<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.batch);
        let tids = env.txn().insert_many(self.def, &rows)?;
        if let Some(c) = &self.constraints {
            for (tid, row) in tids.iter().zip(&rows) {
                c.inserted(&mut self.fk_work, *tid, row);
            }
        }
        if let Some(ret) = returning {
            for row in &rows {
                ret.push(row, scope)?;
            }
        }
        self.inserted += rows.len() as u64;
        Ok(())
    }

    /// Writes what is left; returns the rows inserted.
    fn finish(
        mut self,
        env: &mut dyn Env,
        returning: Option<&mut Returning>,
        scope: &Scope<'_>,
    ) -> SqlResult<u64> {
        self.flush(env, returning, scope)?;
        constraints::run(env, &mut self.fk_work)?;
        Ok(self.inserted)
    }
}

/// Rows of `def` matching `filter`, through a unique index when the filter pins all
/// its columns with equalities to constants, else a sequential scan (see
/// [`choose_access`]).
///
/// `wanted` (a SELECT's columns, see `select::used_columns`) lets a sequential scan skip
/// decoding the other columns, which then read as NULL; `None` decodes every column.
pub(crate) fn matching_rows(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    wanted: Option<&[bool]>,
) -> SqlResult<Vec<(Tid, Vec<Datum>)>> {
    let memory = env.memory();
    let mut out = Vec::new();
    for_each_matching_row(env, def, filter, params, wanted, &mut |tid, row| {
        memory.charge_row(row)?;
        out.push((tid, row.to_vec()));
        Ok(true)
    })?;
    Ok(out)
}

/// Streams the rows of `def` that satisfy `filter` to `each`, read through the access
/// path [`choose_access`] picks, without holding them: `each` returns `false` to stop
/// the read (a LIMIT that has its rows). Nothing is charged to the statement's memory
/// budget here; what `each` keeps, it charges. Each row is lent to `each` (a sequential
/// scan decodes every row into one buffer): what it keeps, it copies.
pub(crate) fn for_each_matching_row(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    wanted: Option<&[bool]>,
    each: &mut dyn FnMut(Tid, &[Datum]) -> SqlResult<bool>,
) -> SqlResult<()> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let access = choose_access(def, filter, params, now, &get, &mut || {
        table_statistics(env, def)
    });
    let t = env.txn();
    fn b(x: &Bound<Datum>) -> Bound<&[Datum]> {
        match x {
            Bound::Included(d) => Bound::Included(std::slice::from_ref(d)),
            Bound::Excluded(d) => Bound::Excluded(std::slice::from_ref(d)),
            Bound::Unbounded => Bound::Unbounded,
        }
    }
    let all = vec![true; def.columns.len()];
    let wanted = wanted.unwrap_or(all.as_slice());
    // Every path returns what may match; WHERE decides, row by row as they come
    // (unless the path returns exactly what it matches).
    let filter = filter
        .filter(|_| !matches!(access, Access::Range { exact: true, .. }))
        .map(|f| Prepared::new(f, &Columns::Table(&def.columns), params));
    let mut failed = None;
    let mut matching = |tid, row: &[Datum]| {
        let more = row_matches(filter.as_ref(), &def.columns, row, params, now, &get)
            .and_then(|m| if m { each(tid, row) } else { Ok(true) });
        match more {
            Ok(more) => Ok(more),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        }
    };
    match &access {
        Access::Index { index, key } => {
            let key = Bound::Included(key.as_slice());
            t.index_scan_borrowed(def, index, key, key, wanted, &mut matching)?
        }
        Access::Range { index, lo, hi, .. } => {
            t.index_scan_borrowed(def, index, b(lo), b(hi), wanted, &mut matching)?
        }
        Access::Scan => t.scan_columns_borrowed(def, wanted, &mut matching)?,
        Access::Nothing => {}
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `def`'s statistics from its last ANALYZE (read only where a plan choice needs them).
pub(crate) fn table_statistics(env: &mut dyn Env, def: &TableDef) -> Option<TableStatistics> {
    let view = env.txn().catalog().ok()?;
    TableStatistics::of(&view, def)
}

/// The one plain table an UPDATE or DELETE names, and its alias; a table item with
/// anything walrus does not implement (`names::table_has_extras`) is refused.
fn single_table(
    env: &mut dyn Env,
    from: &[ast::TableWithJoins],
) -> SqlResult<Option<(Arc<TableDef>, Option<String>)>> {
    match from {
        [] => Ok(None),
        [t] if t.joins.is_empty() => match &t.relation {
            TableFactor::Table { name, alias, .. } => {
                if crate::names::table_has_extras(&t.relation) {
                    return Err(SqlError::unsupported(format!(
                        "{} is not supported as a target table",
                        t.relation
                    )));
                }
                let alias = match alias {
                    None => None,
                    Some(a) if a.columns.is_empty() => Some(crate::names::ident(&a.name)),
                    Some(a) => {
                        return Err(SqlError::unsupported(format!(
                            "column aliases on a target table ({a}) are not supported"
                        )))
                    }
                };
                let n = object_name(name);
                Ok(Some((env.txn().table(&n)?, alias)))
            }
            other => Err(SqlError::unsupported(format!(
                "FROM {other} is not supported yet"
            ))),
        },
        _ => Err(SqlError::unsupported("joins are not supported yet")),
    }
}

/// Every row of `def` visible to the statement's snapshot.
/// Each is charged to the statement's memory budget as it is read.
///
/// `wanted` marks the columns to decode (the others read as NULL); `None` decodes all.
pub(crate) fn scan_rows(
    env: &mut dyn Env,
    def: &TableDef,
    wanted: Option<&[bool]>,
) -> SqlResult<Vec<Vec<Datum>>> {
    let memory = env.memory();
    let mut out = Vec::new();
    let mut failed = None;
    let mut each = |_, row: Vec<Datum>| {
        if let Err(e) = memory.charge_row(&row) {
            failed = Some(e);
            return Ok(false);
        }
        out.push(row);
        Ok(true)
    };
    match wanted {
        Some(w) => env.txn().scan_columns(def, w, &mut each)?,
        None => env.txn().scan(def, &mut each)?,
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

pub(crate) fn update(
    env: &mut dyn Env,
    u: &ast::Update,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    let ast::Update {
        update_token: _,
        optimizer_hints,
        table,
        assignments,
        from,
        selection,
        returning,
        output,
        or,
        order_by,
        limit,
    } = u;
    if from.is_some() {
        return Err(SqlError::unsupported("UPDATE ... FROM is not supported"));
    }
    if !optimizer_hints.is_empty()
        || output.is_some()
        || or.is_some()
        || !order_by.is_empty()
        || limit.is_some()
    {
        return Err(SqlError::unsupported(
            "this UPDATE variant is not supported",
        ));
    }
    let (def, alias) = single_table(env, std::slice::from_ref(table))?
        .ok_or_else(|| SqlError::syntax("UPDATE needs a table"))?;
    let mut returning = Returning::new(returning.as_ref(), &def, alias.as_deref())?;
    let mut sets: Vec<(usize, Expr)> = Vec::new();
    for a in assignments {
        let name = match &a.target {
            ast::AssignmentTarget::ColumnName(n) => object_name(n),
            other => {
                return Err(SqlError::unsupported(format!(
                    "assignment to {other} is not supported"
                )))
            }
        };
        let i = def.column_index(&name).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    def.name
                ),
            )
        })?;
        if sets.iter().any(|(c, _)| *c == i) {
            return Err(SqlError::new(
                "42601",
                format!("multiple assignments to same column \"{name}\""),
            ));
        }
        let value = if is_default_keyword(&a.value) {
            match def.default_of(i) {
                None => Expr::Value(ast::Value::Null.into()),
                Some(ColumnDefault::Expr(text)) => (*crate::stored_expr::parse(text)?).clone(),
                Some(ColumnDefault::Identity { sequence, .. }) => {
                    (*crate::stored_expr::parse(&format!(
                        "nextval('{}')",
                        crate::names::quote_ident(sequence).replace('\'', "''")
                    ))?)
                    .clone()
                }
            }
        } else {
            if let Some(ColumnDefault::Identity { always: true, .. }) = def.default_of(i) {
                return Err(SqlError::new(
                    "428C9",
                    format!("column \"{name}\" can only be updated to DEFAULT"),
                )
                .with_detail(format!(
                    "Column \"{name}\" is an identity column defined as GENERATED ALWAYS."
                )));
            }
            a.value.clone()
        };
        sets.push((i, value));
    }
    // The scan decodes only the columns WHERE and SET read (RETURNING may read any);
    // the engine copies the others' stored bytes into the new version.
    let mut wanted = vec![false; def.columns.len()];
    let partial = returning.is_none()
        && mark_used_columns(selection, &def, &mut wanted)
        && sets
            .iter()
            .all(|(_, e)| mark_used_columns(e, &def, &mut wanted));
    let cons = TableConstraints::of(&def)?;
    let mut fk_work = FkWork::default();
    // CHECK expressions and keys read every column of the old and new row.
    let wanted = partial.then_some(wanted).filter(|_| cons.is_none());
    let rows = matching_rows(env, &def, selection.as_ref(), params, wanted.as_deref())?;
    let hooks = DmlHooks::new(env)?;
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let intr = env.interrupt();
    let mut values = Vec::with_capacity(sets.len());
    let n = change_rows(
        env,
        &def,
        selection.as_ref(),
        rows,
        params,
        |t, tid, old| {
            let scope = Scope {
                columns: &def.columns,
                row: Some(old),
                params,
                now,
                setting: &get,
                interrupt: Some(&intr),
                frame: None,
                hooks: Some(&hooks),
            };
            values.clear();
            for (i, e) in &sets {
                values.push((*i, assign(eval(e, &scope)?, &def.columns[*i])?));
            }
            let new_row = cons.as_ref().map(|_| {
                let mut new = old.to_vec();
                for (i, v) in &values {
                    new[*i] = v.clone();
                }
                new
            });
            if let (Some(c), Some(new)) = (&cons, &new_row) {
                c.check_row(new, &scope)?;
            }
            let r = t.update_columns(&def, tid, &values)?;
            if let (RowChange::Done(new_tid), Some(c), Some(new)) = (&r, &cons, &new_row) {
                c.updated(&mut fk_work, *new_tid, old, new);
            }
            if let (RowChange::Done(_), Some(ret)) = (&r, returning.as_mut()) {
                let mut new = old.to_vec();
                for (i, v) in &values {
                    new[*i] = v.clone();
                }
                ret.push(&new, &scope)?;
            }
            Ok(r)
        },
    )?;
    constraints::run(env, &mut fk_work)?;
    Ok(Returning::result(returning, format!("UPDATE {n}")))
}

/// Applies `op` (an update or delete) to each matching row. Under READ COMMITTED a
/// row changed by a transaction that committed meanwhile is re-checked against the
/// condition on its newest version and, if it still matches, changed there.
fn change_rows(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    rows: Vec<(Tid, Vec<Datum>)>,
    params: &[Datum],
    mut op: impl FnMut(&mut Transaction, Tid, &[Datum]) -> SqlResult<RowChange>,
) -> SqlResult<u64> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let filter = filter.map(|f| Prepared::new(f, &Columns::Table(&def.columns), params));
    let mut n = 0;
    for (mut tid, mut row) in rows {
        loop {
            match op(env.txn(), tid, &row)? {
                RowChange::Done(_) => {
                    n += 1;
                    break;
                }
                RowChange::Changed(t2, v2) => {
                    if !row_matches(filter.as_ref(), &def.columns, &v2, params, now, &get)? {
                        break;
                    }
                    tid = t2;
                    row = v2;
                }
                RowChange::Gone | RowChange::SelfModified => break,
            }
        }
    }
    Ok(n)
}

pub(crate) fn delete(
    env: &mut dyn Env,
    d: &ast::Delete,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    let ast::Delete {
        delete_token: _,
        optimizer_hints,
        tables,
        from,
        using,
        selection,
        returning,
        output,
        order_by,
        limit,
    } = d;
    if using.is_some() {
        return Err(SqlError::unsupported("DELETE ... USING is not supported"));
    }
    if !optimizer_hints.is_empty()
        || !tables.is_empty()
        || output.is_some()
        || !order_by.is_empty()
        || limit.is_some()
    {
        return Err(SqlError::unsupported(
            "this DELETE variant is not supported",
        ));
    }
    let from = match from {
        ast::FromTable::WithFromKeyword(f) => f.clone(),
        ast::FromTable::WithoutKeyword(_) => {
            return Err(SqlError::syntax("syntax error: DELETE needs FROM"))
        }
    };
    let (def, alias) =
        single_table(env, &from)?.ok_or_else(|| SqlError::syntax("DELETE needs a table"))?;
    let mut returning = Returning::new(returning.as_ref(), &def, alias.as_deref())?;
    let rows = matching_rows(env, &def, selection.as_ref(), params, None)?;
    let cons = TableConstraints::of(&def)?;
    let mut fk_work = FkWork::default();
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let intr = env.interrupt();
    let n = change_rows(
        env,
        &def,
        selection.as_ref(),
        rows,
        params,
        |t, tid, old| {
            let r = t.delete(&def, tid)?;
            if let (RowChange::Done(_), Some(c)) = (&r, &cons) {
                c.deleted(&mut fk_work, old);
            }
            if let (RowChange::Done(_), Some(ret)) = (&r, returning.as_mut()) {
                let scope = Scope {
                    columns: &def.columns,
                    row: Some(old),
                    params,
                    now,
                    setting: &get,
                    interrupt: Some(&intr),
                    frame: None,
                    hooks: None,
                };
                ret.push(old, &scope)?;
            }
            Ok(r)
        },
    )?;
    constraints::run(env, &mut fk_work)?;
    Ok(Returning::result(returning, format!("DELETE {n}")))
}

/// Whether `row` satisfies WHERE (its fast form where it has one, see
/// [`crate::expr::compiled`]).
pub(crate) fn row_matches(
    filter: Option<&Prepared<'_>>,
    columns: &[ColumnDef],
    row: &[Datum],
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
) -> SqlResult<bool> {
    match filter {
        None => Ok(true),
        Some(f) => {
            let v = f.eval(row, |e| {
                let scope = Scope {
                    columns,
                    row: Some(row),
                    params,
                    now,
                    setting: get,
                    interrupt: None,
                    frame: None,
                    hooks: None,
                };
                eval(e, &scope)
            })?;
            crate::expr::holds("WHERE", f.expr, v)
        }
    }
}
