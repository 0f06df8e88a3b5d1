//! The minimizer's single-step reductions of a query tree. The caller keeps a reduction
//! when the difference it found stays the same kind (greedy delta debugging, first
//! improvement, bigger cuts first); a reduction that breaks the query (a dangling column
//! reference, say) simply changes the kind and is dropped.

use super::ast::{Body, Expr, From, JoinCond, Kind, Query, Select, Ty};

/// Every query one reduction away from `q`, roughly biggest cut first.
pub fn variants(q: &Query) -> Vec<Query> {
    let mut out = Vec::new();
    // Whole-query cuts.
    if let Body::SetOp { left, right, .. } = &q.body {
        for side in [left, right] {
            let mut v = (**side).clone();
            if v.order_by.is_empty() {
                v.order_by = q.order_by.clone();
                v.limit = q.limit;
                v.offset = q.offset;
            }
            out.push(v);
        }
    }
    if !q.order_by.is_empty() {
        let mut v = q.clone();
        v.order_by.clear();
        v.limit = None;
        v.offset = None;
        out.push(v);
    }
    if q.limit.is_some() {
        let mut v = q.clone();
        v.limit = None;
        out.push(v);
    }
    if q.offset.is_some() {
        let mut v = q.clone();
        v.offset = None;
        out.push(v);
    }
    match &q.body {
        Body::Select(s) => {
            for sv in select_variants(s) {
                let mut v = q.clone();
                v.body = Body::Select(Box::new(sv));
                out.push(v);
            }
            // Select items: fewer columns (ORDER BY ordinals renumbered).
            if s.items.len() > 1 {
                for i in 0..s.items.len() {
                    let mut v = q.clone();
                    if let Body::Select(vs) = &mut v.body {
                        vs.items.remove(i);
                    }
                    v.order_by = q
                        .order_by
                        .iter()
                        .filter(|(o, _)| *o != i + 1)
                        .map(|&(o, d)| (if o > i + 1 { o - 1 } else { o }, d))
                        .collect();
                    out.push(v);
                }
            }
        }
        Body::SetOp {
            op,
            all,
            left,
            right,
        } => {
            for (i, side) in [left, right].into_iter().enumerate() {
                for sv in variants(side) {
                    let mut v = q.clone();
                    let new = Box::new(sv);
                    v.body = if i == 0 {
                        Body::SetOp {
                            op,
                            all: *all,
                            left: new,
                            right: right.clone(),
                        }
                    } else {
                        Body::SetOp {
                            op,
                            all: *all,
                            left: left.clone(),
                            right: new,
                        }
                    };
                    out.push(v);
                }
            }
        }
    }
    out
}

fn select_variants(s: &Select) -> Vec<Select> {
    let mut out = Vec::new();
    let with = |f: &dyn Fn(&mut Select)| {
        let mut v = s.clone();
        f(&mut v);
        v
    };
    if s.where_.is_some() {
        out.push(with(&|v| v.where_ = None));
    }
    if s.having.is_some() {
        out.push(with(&|v| v.having = None));
    }
    if !s.group_by.is_empty() {
        out.push(with(&|v| v.group_by.clear()));
        for i in 0..s.group_by.len() {
            out.push(with(&|v| {
                v.group_by.remove(i);
            }));
        }
    }
    if s.distinct {
        out.push(with(&|v| v.distinct = false));
    }
    if !s.from.is_empty() {
        out.push(with(&|v| v.from.clear()));
    }
    if s.from.len() > 1 {
        for i in 0..s.from.len() {
            out.push(with(&|v| {
                v.from.remove(i);
            }));
        }
    }
    for i in 0..s.from.len() {
        for fv in from_variants(&s.from[i]) {
            let mut v = s.clone();
            v.from[i] = fv;
            out.push(v);
        }
    }
    if let Some(w) = &s.where_ {
        for ev in expr_variants(w) {
            out.push(with(&|v| v.where_ = Some(ev.clone())));
        }
    }
    if let Some(h) = &s.having {
        for ev in expr_variants(h) {
            out.push(with(&|v| v.having = Some(ev.clone())));
        }
    }
    for i in 0..s.items.len() {
        for ev in expr_variants(&s.items[i].expr) {
            let mut v = s.clone();
            v.items[i].expr = ev;
            out.push(v);
        }
    }
    out
}

fn from_variants(f: &From) -> Vec<From> {
    let mut out = Vec::new();
    match f {
        From::Table { .. } => {}
        From::Derived { q, alias } => {
            for qv in variants(q) {
                out.push(From::Derived {
                    q: Box::new(qv),
                    alias: alias.clone(),
                });
            }
        }
        From::Join {
            kind,
            left,
            right,
            cond,
        } => {
            out.push((**left).clone());
            out.push((**right).clone());
            if *kind != "JOIN" && *kind != "CROSS JOIN" {
                out.push(From::Join {
                    kind: "JOIN",
                    left: left.clone(),
                    right: right.clone(),
                    cond: cond.clone(),
                });
            }
            for lv in from_variants(left) {
                out.push(From::Join {
                    kind,
                    left: Box::new(lv),
                    right: right.clone(),
                    cond: cond.clone(),
                });
            }
            for rv in from_variants(right) {
                out.push(From::Join {
                    kind,
                    left: left.clone(),
                    right: Box::new(rv),
                    cond: cond.clone(),
                });
            }
            match cond {
                JoinCond::On(e) => {
                    out.push(From::Join {
                        kind,
                        left: left.clone(),
                        right: right.clone(),
                        cond: JoinCond::On(Expr::lit("TRUE", Ty::Bool)),
                    });
                    for ev in expr_variants(e) {
                        out.push(From::Join {
                            kind,
                            left: left.clone(),
                            right: right.clone(),
                            cond: JoinCond::On(ev),
                        });
                    }
                }
                JoinCond::Using(cols) if cols.len() > 1 => {
                    for i in 0..cols.len() {
                        let mut c = cols.clone();
                        c.remove(i);
                        out.push(From::Join {
                            kind,
                            left: left.clone(),
                            right: right.clone(),
                            cond: JoinCond::Using(c),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A simple literal of `ty`, the minimizer's stand-in for a subtree.
fn plain_literal(ty: Ty) -> Expr {
    let s = match ty {
        Ty::Int2 => "CAST(1 AS int2)",
        Ty::Int4 => "1",
        Ty::Int8 => "CAST(1 AS int8)",
        Ty::Numeric => "1.5",
        Ty::Float8 => "CAST('1' AS float8)",
        Ty::Bool => "TRUE",
        Ty::Text => "'a'",
        Ty::Date => "DATE '2024-01-31'",
        Ty::Timestamp => "TIMESTAMP '2024-01-31 00:00:00'",
        Ty::TimestampTz => "CAST('2024-01-31 00:00:00+00' AS timestamptz)",
        Ty::Bytea => "CAST('\\x00' AS bytea)",
        Ty::Uuid => "CAST('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' AS uuid)",
    };
    Expr::lit(s, ty)
}

fn expr_variants(e: &Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    // Replace the node: by a child of the same type, by NULL, by a literal.
    for a in &e.args {
        if a.ty == e.ty {
            out.push(a.clone());
        }
    }
    if let Some(q) = e.sub() {
        // A subquery's own single-column expression can stand in for the scalar one.
        if let (Kind::Scalar { .. }, Body::Select(s)) = (&e.kind, &q.body) {
            if s.from.is_empty() && s.items.len() == 1 && s.items[0].expr.ty == e.ty {
                out.push(s.items[0].expr.clone());
            }
        }
    }
    if !matches!(e.kind, Kind::Null) {
        out.push(Expr::null(e.ty));
    }
    if !matches!(e.kind, Kind::Lit(_) | Kind::Null) {
        out.push(plain_literal(e.ty));
    }
    // Fewer list members (IN lists, COALESCE, GREATEST, CONCAT, CASE arms).
    match &e.kind {
        Kind::InList { .. } if e.args.len() > 2 => {
            for i in 1..e.args.len() {
                let mut v = e.clone();
                v.args.remove(i);
                out.push(v);
            }
        }
        Kind::Func("coalesce" | "greatest" | "least" | "concat") if e.args.len() > 1 => {
            for i in 0..e.args.len() {
                let mut v = e.clone();
                v.args.remove(i);
                out.push(v);
            }
        }
        Kind::Case { simple, has_else } => {
            let start = usize::from(*simple);
            let pairs_end = e.args.len() - usize::from(*has_else);
            if pairs_end - start > 2 {
                for p in (start..pairs_end).step_by(2) {
                    let mut v = e.clone();
                    v.args.drain(p..p + 2);
                    out.push(v);
                }
            }
            if *has_else {
                let mut v = e.clone();
                v.args.pop();
                v.kind = Kind::Case {
                    simple: *simple,
                    has_else: false,
                };
                out.push(v);
            }
        }
        _ => {}
    }
    // Reduce inside.
    for i in 0..e.args.len() {
        for av in expr_variants(&e.args[i]) {
            let mut v = e.clone();
            v.args[i] = av;
            out.push(v);
        }
    }
    if let Some(q) = e.sub() {
        for qv in variants(q) {
            let mut v = e.clone();
            *v.sub_mut().expect("subquery") = qv;
            out.push(v);
        }
    }
    out
}
