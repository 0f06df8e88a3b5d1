//! The generated query tree and its SQL text.
//!
//! Every expression node carries the type the generator meant it to have ([`Ty`]), an
//! approximation of PostgreSQL's (good enough to build well-typed expressions and to know
//! whether an output column sorts totally; the servers' own RowDescriptions are what is
//! compared). Compound expressions are always parenthesised, so precedence never matters.

use std::fmt::Write as _;

/// The generator's types. `Text` covers text, varchar(n) and char(n) columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ty {
    Int2,
    Int4,
    Int8,
    Numeric,
    Float8,
    Bool,
    Text,
    Date,
    Timestamp,
    TimestampTz,
    Bytea,
    Uuid,
}

impl Ty {
    pub fn sql(self) -> &'static str {
        match self {
            Ty::Int2 => "int2",
            Ty::Int4 => "int4",
            Ty::Int8 => "int8",
            Ty::Numeric => "numeric",
            Ty::Float8 => "float8",
            Ty::Bool => "bool",
            Ty::Text => "text",
            Ty::Date => "date",
            Ty::Timestamp => "timestamp",
            Ty::TimestampTz => "timestamptz",
            Ty::Bytea => "bytea",
            Ty::Uuid => "uuid",
        }
    }

    pub fn is_int(self) -> bool {
        matches!(self, Ty::Int2 | Ty::Int4 | Ty::Int8)
    }

    pub fn is_number(self) -> bool {
        self.is_int() || matches!(self, Ty::Numeric | Ty::Float8)
    }

    /// Whether equal values always print the same (float8 -0/0 and numeric 1.0/1.00 do
    /// not), so that ordering by the column fixes the printed order.
    pub fn prints_uniquely(self) -> bool {
        !matches!(self, Ty::Float8 | Ty::Numeric)
    }

    /// PostgreSQL's result type of arithmetic between `self` and `other` (numbers).
    pub fn arith(self, other: Ty) -> Ty {
        if self == Ty::Float8 || other == Ty::Float8 {
            Ty::Float8
        } else if self == Ty::Numeric || other == Ty::Numeric {
            Ty::Numeric
        } else if self == Ty::Int8 || other == Ty::Int8 {
            Ty::Int8
        } else if self == Ty::Int4 || other == Ty::Int4 {
            Ty::Int4
        } else {
            Ty::Int2
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A column reference, already qualified (`t1_0.i4`).
    Col(String),
    /// A literal in SQL form (`'abc'`, `-5`, `DATE '2024-02-29'`).
    Lit(String),
    /// `CAST(NULL AS ty)`.
    Null,
    /// `(a op b)`.
    Bin(&'static str),
    /// `(op a)`.
    Prefix(&'static str),
    /// `(a IS [NOT] NULL)`.
    IsNull { not: bool },
    /// `(a IS [NOT] DISTINCT FROM b)`.
    Distinct { not: bool },
    /// `(a [NOT] BETWEEN b AND c)`.
    Between { not: bool },
    /// `(a [NOT] LIKE b)`.
    Like { not: bool },
    /// `(a [NOT] IN (b, c, ...))`.
    InList { not: bool },
    /// `name(args...)`.
    Func(&'static str),
    /// `name([DISTINCT] args...)`; `order_by_first`: `name(a, b ORDER BY a)`.
    Agg {
        name: &'static str,
        distinct: bool,
        order_by_first: bool,
    },
    /// `count(*)`.
    CountStar,
    /// `CAST(a AS type)`; the type name as written (`varchar(3)`, `numeric(5,1)`).
    Cast(String),
    /// Searched (`CASE WHEN a THEN b ... [ELSE e] END`) or simple (`CASE x WHEN ...`);
    /// args: [operand,] when, then, when, then, ..., [else].
    Case { simple: bool, has_else: bool },
    /// `(a [NOT] IN (subquery))`.
    InSub { not: bool, q: Box<Query> },
    /// `([NOT] EXISTS (subquery))`.
    Exists { not: bool, q: Box<Query> },
    /// `(subquery)`.
    Scalar { q: Box<Query> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: Kind,
    pub ty: Ty,
    pub args: Vec<Expr>,
}

impl Expr {
    pub fn new(kind: Kind, ty: Ty, args: Vec<Expr>) -> Expr {
        Expr { kind, ty, args }
    }

    pub fn lit(s: impl Into<String>, ty: Ty) -> Expr {
        Expr::new(Kind::Lit(s.into()), ty, vec![])
    }

    pub fn null(ty: Ty) -> Expr {
        Expr::new(Kind::Null, ty, vec![])
    }

    /// The subquery inside this node, if any.
    pub fn sub(&self) -> Option<&Query> {
        match &self.kind {
            Kind::InSub { q, .. } | Kind::Exists { q, .. } | Kind::Scalar { q } => Some(q),
            _ => None,
        }
    }

    pub fn sub_mut(&mut self) -> Option<&mut Query> {
        match &mut self.kind {
            Kind::InSub { q, .. } | Kind::Exists { q, .. } | Kind::Scalar { q } => Some(q),
            _ => None,
        }
    }

    pub fn render(&self, out: &mut String) {
        let a = &self.args;
        match &self.kind {
            Kind::Col(c) => out.push_str(c),
            Kind::Lit(s) => out.push_str(s),
            Kind::Null => {
                let _ = write!(out, "CAST(NULL AS {})", self.ty.sql());
            }
            Kind::Bin(op) => {
                out.push('(');
                a[0].render(out);
                let _ = write!(out, " {op} ");
                a[1].render(out);
                out.push(')');
            }
            Kind::Prefix(op) => {
                let _ = write!(out, "({op} ");
                a[0].render(out);
                out.push(')');
            }
            Kind::IsNull { not } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not { " IS NOT NULL)" } else { " IS NULL)" });
            }
            Kind::Distinct { not } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not {
                    " IS NOT DISTINCT FROM "
                } else {
                    " IS DISTINCT FROM "
                });
                a[1].render(out);
                out.push(')');
            }
            Kind::Between { not } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not { " NOT BETWEEN " } else { " BETWEEN " });
                a[1].render(out);
                out.push_str(" AND ");
                a[2].render(out);
                out.push(')');
            }
            Kind::Like { not } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not { " NOT LIKE " } else { " LIKE " });
                a[1].render(out);
                out.push(')');
            }
            Kind::InList { not } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not { " NOT IN (" } else { " IN (" });
                list(out, &a[1..]);
                out.push_str("))");
            }
            Kind::Func(name) => {
                let _ = write!(out, "{name}(");
                list(out, a);
                out.push(')');
            }
            Kind::Agg {
                name,
                distinct,
                order_by_first,
            } => {
                let _ = write!(out, "{name}(");
                if *distinct {
                    out.push_str("DISTINCT ");
                }
                list(out, a);
                if *order_by_first {
                    out.push_str(" ORDER BY ");
                    a[0].render(out);
                }
                out.push(')');
            }
            Kind::CountStar => out.push_str("count(*)"),
            Kind::Cast(t) => {
                out.push_str("CAST(");
                a[0].render(out);
                let _ = write!(out, " AS {t})");
            }
            Kind::Case { simple, has_else } => {
                out.push_str("CASE");
                let mut rest = &a[..];
                if *simple {
                    out.push(' ');
                    rest[0].render(out);
                    rest = &rest[1..];
                }
                let (pairs, els) = if *has_else {
                    (&rest[..rest.len() - 1], rest.last())
                } else {
                    (rest, None)
                };
                for p in pairs.chunks(2) {
                    out.push_str(" WHEN ");
                    p[0].render(out);
                    out.push_str(" THEN ");
                    p[1].render(out);
                }
                if let Some(e) = els {
                    out.push_str(" ELSE ");
                    e.render(out);
                }
                out.push_str(" END");
            }
            Kind::InSub { not, q } => {
                out.push('(');
                a[0].render(out);
                out.push_str(if *not { " NOT IN (" } else { " IN (" });
                q.render(out);
                out.push_str("))");
            }
            Kind::Exists { not, q } => {
                out.push_str(if *not { "(NOT EXISTS (" } else { "(EXISTS (" });
                q.render(out);
                out.push_str("))");
            }
            Kind::Scalar { q } => {
                out.push('(');
                q.render(out);
                out.push(')');
            }
        }
    }

    /// Whether a column reference occurs in this subtree (subqueries included).
    pub fn has_column(&self) -> bool {
        matches!(self.kind, Kind::Col(_))
            || self.sub().is_some()
            || self.args.iter().any(Expr::has_column)
    }
}

fn list(out: &mut String, items: &[Expr]) {
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        e.render(out);
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum JoinCond {
    On(Expr),
    Using(Vec<String>),
    /// CROSS JOIN.
    Cross,
}

#[derive(Clone, Debug, PartialEq)]
pub enum From {
    Table {
        name: String,
        alias: String,
    },
    Join {
        kind: &'static str,
        left: Box<From>,
        right: Box<From>,
        cond: JoinCond,
    },
    /// `(query) AS alias` (its select items are named c0, c1, ...).
    Derived {
        q: Box<Query>,
        alias: String,
    },
}

impl From {
    pub fn render(&self, out: &mut String) {
        match self {
            From::Table { name, alias } => {
                let _ = write!(out, "{name} AS {alias}");
            }
            From::Join {
                kind,
                left,
                right,
                cond,
            } => {
                out.push('(');
                left.render(out);
                let _ = write!(out, " {kind} ");
                right.render(out);
                match cond {
                    JoinCond::On(e) => {
                        out.push_str(" ON ");
                        e.render(out);
                    }
                    JoinCond::Using(cols) => {
                        let _ = write!(out, " USING ({})", cols.join(", "));
                    }
                    JoinCond::Cross => {}
                }
                out.push(')');
            }
            From::Derived { q, alias } => {
                out.push('(');
                q.render(out);
                let _ = write!(out, ") AS {alias}");
            }
        }
    }

    /// Number of base tables and derived tables under this item.
    pub fn sources(&self) -> usize {
        match self {
            From::Table { .. } | From::Derived { .. } => 1,
            From::Join { left, right, .. } => left.sources() + right.sources(),
        }
    }

    pub fn has_derived(&self) -> bool {
        match self {
            From::Table { .. } => false,
            From::Derived { .. } => true,
            From::Join { left, right, .. } => left.has_derived() || right.has_derived(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SelectItem {
    pub expr: Expr,
    /// `AS alias`; derived tables and subqueries always name their items.
    pub alias: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<SelectItem>,
    pub from: Vec<From>,
    pub where_: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Select(Box<Select>),
    SetOp {
        op: &'static str,
        all: bool,
        left: Box<Query>,
        right: Box<Query>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub body: Body,
    /// `ORDER BY` output ordinals (1-based) with DESC.
    pub order_by: Vec<(usize, bool)>,
    pub limit: Option<u32>,
    pub offset: Option<u32>,
}

impl Query {
    pub fn render(&self, out: &mut String) {
        match &self.body {
            Body::Select(s) => s.render(out),
            Body::SetOp {
                op,
                all,
                left,
                right,
            } => {
                for (i, side) in [left, right].into_iter().enumerate() {
                    if i == 1 {
                        let _ = write!(out, " {op}{} ", if *all { " ALL" } else { "" });
                    }
                    let wrap = !matches!(side.body, Body::Select(_))
                        || !side.order_by.is_empty()
                        || side.limit.is_some()
                        || side.offset.is_some();
                    if wrap {
                        out.push('(');
                    }
                    side.render(out);
                    if wrap {
                        out.push(')');
                    }
                }
            }
        }
        if !self.order_by.is_empty() {
            out.push_str(" ORDER BY ");
            for (i, (n, desc)) in self.order_by.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{n}{}", if *desc { " DESC" } else { "" });
            }
        }
        if let Some(l) = self.limit {
            let _ = write!(out, " LIMIT {l}");
        }
        if let Some(o) = self.offset {
            let _ = write!(out, " OFFSET {o}");
        }
    }

    pub fn to_sql(&self) -> String {
        let mut s = String::new();
        self.render(&mut s);
        s
    }

    /// The output columns' generator types.
    pub fn types(&self) -> Vec<Ty> {
        match &self.body {
            Body::Select(s) => s.items.iter().map(|i| i.expr.ty).collect(),
            Body::SetOp { left, right, .. } => left
                .types()
                .into_iter()
                .zip(right.types())
                .map(|(a, b)| {
                    if a.is_number() && b.is_number() {
                        a.arith(b)
                    } else {
                        a
                    }
                })
                .collect(),
        }
    }

    /// Whether ORDER BY fixes the printed order of the rows: every output column is
    /// ordered and prints uniquely (ties are then identical rows).
    pub fn total_order(&self) -> bool {
        let types = self.types();
        !self.order_by.is_empty()
            && types.iter().all(|t| t.prints_uniquely())
            && (1..=types.len()).all(|n| self.order_by.iter().any(|(o, _)| *o == n))
    }
}

impl Select {
    pub fn render(&self, out: &mut String) {
        out.push_str("SELECT ");
        if self.distinct {
            out.push_str("DISTINCT ");
        }
        for (i, it) in self.items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            it.expr.render(out);
            if let Some(a) = &it.alias {
                let _ = write!(out, " AS {a}");
            }
        }
        if !self.from.is_empty() {
            out.push_str(" FROM ");
            for (i, f) in self.from.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                f.render(out);
            }
        }
        if let Some(w) = &self.where_ {
            out.push_str(" WHERE ");
            w.render(out);
        }
        if !self.group_by.is_empty() {
            out.push_str(" GROUP BY ");
            list(out, &self.group_by);
        }
        if let Some(h) = &self.having {
            out.push_str(" HAVING ");
            h.render(out);
        }
    }
}
