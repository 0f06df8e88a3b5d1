#![doc = include_str!("README.md")]

use std::collections::HashMap;
use std::sync::Arc;

use walrus_base::{RelFileId, Tid};

use crate::access::datum::{decode_row, encode_row, Datum, TypeId};
use crate::error::{Error, Result};

/// The catalog heap: one row per table or index, MVCC-versioned like any row, so DDL
/// is transactional and recovered by the same redo as data.
pub const CATALOG_RELFILE: RelFileId = RelFileId(1);

const KIND_TABLE: i16 = 1;
const KIND_INDEX: i16 = 2;
/// A table's planner statistics (ANALYZE), PostgreSQL's `pg_statistic` and
/// `pg_class.reltuples` in one row: `name` the table, `relfile` the table's relation file
/// when it was analyzed (statistics of a file TRUNCATE replaced, or of a dropped table's
/// namesake, are not the table's), the statistics themselves as text the SQL layer
/// writes and reads.
const KIND_STATS: i16 = 3;
/// A sequence (`CREATE SEQUENCE`, `serial`, identity columns): its options. Its value
/// lives in its own relation file's one page, changed outside transactions
/// (`access/sequence.rs`).
const KIND_SEQUENCE: i16 = 4;
/// A CHECK or FOREIGN KEY constraint (PostgreSQL's `pg_constraint` row for them):
/// `name` the constraint, field 3 its table, field 4 its definition. Its own row, so
/// adding or dropping one leaves the table's row alone. (UNIQUE and PRIMARY KEY
/// constraints are their indexes.)
const KIND_CONSTRAINT: i16 = 5;

#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: TypeId,
    pub not_null: bool,
    /// The declared type modifier in PostgreSQL's `atttypmod` encoding: -1 for none,
    /// `n + 4` for `varchar(n)` / `char(n)`, `((p << 16) | s) + 4` for `numeric(p,s)`.
    /// The engine stores it and never interprets it; the SQL layer applies it.
    pub typmod: i32,
    /// How a `TypeId::Text` column was declared (`text`, `varchar`, `char`), for the
    /// SQL layer's assignment rules and type names.
    pub declared: DeclaredType,
}

/// The SQL spelling of a text column: the engine has one text type, PostgreSQL three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeclaredType {
    /// As `ty` says (`text`, or any non-text type).
    #[default]
    Plain,
    /// `varchar` / `character varying`.
    Varchar,
    /// `char` / `character` (`bpchar`): blank-padded to its length.
    Char,
}

impl DeclaredType {
    fn to_u8(self) -> u8 {
        match self {
            DeclaredType::Plain => 0,
            DeclaredType::Varchar => 1,
            DeclaredType::Char => 2,
        }
    }
    fn from_u8(v: u8) -> Option<DeclaredType> {
        match v {
            0 => Some(DeclaredType::Plain),
            1 => Some(DeclaredType::Varchar),
            2 => Some(DeclaredType::Char),
            _ => None,
        }
    }
}

impl ColumnDef {
    /// A column without a type modifier.
    pub fn new(name: impl Into<String>, ty: TypeId, not_null: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            not_null,
            typmod: -1,
            declared: DeclaredType::Plain,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexDef {
    pub name: String,
    pub relfile: RelFileId,
    pub table: String,
    /// Positions of the key columns in the table.
    pub columns: Vec<usize>,
    pub unique: bool,
    pub primary: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableDef {
    pub name: String,
    pub relfile: RelFileId,
    pub columns: Vec<ColumnDef>,
    pub fillfactor: u8,
    pub indexes: Vec<IndexDef>,
    /// What an INSERT that leaves a column out (or says `DEFAULT`) writes there, by
    /// column position; empty when no column has a default.
    pub defaults: Vec<Option<ColumnDefault>>,
    /// Its CHECK and FOREIGN KEY constraints, by name (filled from their own catalog
    /// rows when the view is built; never encoded with the table).
    pub constraints: Vec<Arc<ConstraintDef>>,
    /// The FOREIGN KEY constraints of any table (itself included) that reference it.
    pub referenced_by: Vec<Arc<ConstraintDef>>,
    /// PostgreSQL's attribute numbers of the columns, by position, once a column was
    /// dropped (`attnum` keeps its gaps, as PostgreSQL's does); empty while they are
    /// 1..=n. Columns past its end (added later) number on from its largest.
    pub attnums: Vec<i16>,
}

/// A CHECK or FOREIGN KEY constraint of `table`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstraintDef {
    pub name: String,
    pub table: String,
    pub kind: ConstraintKind,
    pub deferrable: bool,
    pub initially_deferred: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintKind {
    /// `CHECK (expr)`: the expression as SQL text (the SQL layer parses and evaluates
    /// it; the engine never does).
    Check {
        expr: String,
    },
    ForeignKey(ForeignKeyDef),
}

/// `FOREIGN KEY (columns) REFERENCES ref_table (ref_columns)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignKeyDef {
    /// Positions of the referencing columns in the table.
    pub columns: Vec<usize>,
    pub ref_table: String,
    /// Positions of the referenced columns in `ref_table`, pairwise with `columns`.
    pub ref_columns: Vec<usize>,
    pub on_delete: FkAction,
    pub on_update: FkAction,
    /// MATCH FULL (else MATCH SIMPLE).
    pub match_full: bool,
}

/// What a change of a referenced key does to the rows that reference it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FkAction {
    NoAction,
    Restrict,
    Cascade,
    SetNull,
    SetDefault,
}

impl FkAction {
    /// PostgreSQL's `pg_constraint.confupdtype` / `confdeltype` letter.
    pub fn letter(self) -> char {
        match self {
            FkAction::NoAction => 'a',
            FkAction::Restrict => 'r',
            FkAction::Cascade => 'c',
            FkAction::SetNull => 'n',
            FkAction::SetDefault => 'd',
        }
    }

    fn from_letter(c: char) -> Option<FkAction> {
        Some(match c {
            'a' => FkAction::NoAction,
            'r' => FkAction::Restrict,
            'c' => FkAction::Cascade,
            'n' => FkAction::SetNull,
            'd' => FkAction::SetDefault,
            _ => return None,
        })
    }
}

impl ConstraintDef {
    pub fn foreign_key(&self) -> Option<&ForeignKeyDef> {
        match &self.kind {
            ConstraintKind::ForeignKey(fk) => Some(fk),
            ConstraintKind::Check { .. } => None,
        }
    }
}

/// A constraint's catalog row: `field 4` is `c<flags>:<expr>` for a CHECK,
/// `f<flags>:<cols>;<ref table len>:<ref table><ref cols>;<del><upd><match>` for a
/// foreign key, where flags are the deferrable and initially-deferred bits.
pub fn encode_constraint(c: &ConstraintDef) -> Vec<u8> {
    let flags = format!("{}{}", c.deferrable as u8, c.initially_deferred as u8);
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let spec = match &c.kind {
        ConstraintKind::Check { expr } => format!("c{flags}:{expr}"),
        ConstraintKind::ForeignKey(fk) => format!(
            "f{flags}:{};{}:{}{};{}{}{}",
            list(&fk.columns),
            fk.ref_table.len(),
            fk.ref_table,
            list(&fk.ref_columns),
            fk.on_delete.letter(),
            fk.on_update.letter(),
            if fk.match_full { 'f' } else { 's' },
        ),
    };
    let mut out = Vec::new();
    encode_row(
        &[
            Datum::Int2(KIND_CONSTRAINT),
            Datum::Text(c.name.clone()),
            Datum::Int8(0),
            Datum::Text(c.table.clone()),
            Datum::Text(spec),
            Datum::Bool(false),
            Datum::Bool(false),
            Datum::Int2(0),
        ],
        &mut out,
    );
    out
}

fn decode_constraint(name: String, table: String, spec: &str) -> Result<ConstraintDef> {
    let bad_spec = || bad("bad constraint definition");
    let (head, body) = spec.split_once(':').ok_or_else(bad_spec)?;
    let mut h = head.chars();
    let (Some(kind), Some(d), Some(i), None) = (h.next(), h.next(), h.next(), h.next()) else {
        return Err(bad_spec());
    };
    let list = |s: &str| -> Result<Vec<usize>> {
        s.split(',')
            .map(|x| x.parse::<usize>().map_err(|_| bad_spec()))
            .collect()
    };
    let kind = match kind {
        'c' => ConstraintKind::Check {
            expr: body.to_string(),
        },
        'f' => {
            let (cols, rest) = body.split_once(';').ok_or_else(bad_spec)?;
            let (len, rest) = rest.split_once(':').ok_or_else(bad_spec)?;
            let len: usize = len.parse().map_err(|_| bad_spec())?;
            if len > rest.len() || !rest.is_char_boundary(len) {
                return Err(bad_spec());
            }
            let (ref_table, rest) = rest.split_at(len);
            let (ref_cols, tail) = rest.split_once(';').ok_or_else(bad_spec)?;
            let mut t = tail.chars();
            let (Some(del), Some(upd), Some(m), None) = (t.next(), t.next(), t.next(), t.next())
            else {
                return Err(bad_spec());
            };
            ConstraintKind::ForeignKey(ForeignKeyDef {
                columns: list(cols)?,
                ref_table: ref_table.to_string(),
                ref_columns: list(ref_cols)?,
                on_delete: FkAction::from_letter(del).ok_or_else(bad_spec)?,
                on_update: FkAction::from_letter(upd).ok_or_else(bad_spec)?,
                match_full: m == 'f',
            })
        }
        _ => return Err(bad_spec()),
    };
    Ok(ConstraintDef {
        name,
        table,
        kind,
        deferrable: d == '1',
        initially_deferred: i == '1',
    })
}

/// A column's default: an expression kept as SQL text (the SQL layer parses and
/// evaluates it; the engine never does), or an identity column's sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnDefault {
    Expr(String),
    /// `GENERATED ALWAYS|BY DEFAULT AS IDENTITY`: values come from `sequence`.
    Identity {
        always: bool,
        sequence: String,
    },
}

impl TableDef {
    /// The attribute number (`pg_attribute.attnum`) of the column at position `i`.
    pub fn attnum(&self, i: usize) -> i16 {
        match self.attnums.get(i) {
            Some(&n) => n,
            None => {
                let last = self.attnums.iter().copied().max().unwrap_or(0);
                last + 1 + (i - self.attnums.len()) as i16
            }
        }
    }
    /// The default of column `i`, if it has one.
    pub fn default_of(&self, i: usize) -> Option<&ColumnDefault> {
        self.defaults.get(i).and_then(|d| d.as_ref())
    }

    /// An index whose key is exactly the columns `cols`, in any order (`unique`: only
    /// a unique one): what a foreign key's referenced columns are checked through.
    pub fn index_on(&self, cols: &[usize], unique: bool) -> Option<&IndexDef> {
        let mut want = cols.to_vec();
        want.sort_unstable();
        self.indexes.iter().find(|i| {
            let mut have = i.columns.clone();
            have.sort_unstable();
            (i.unique || !unique) && have == want
        })
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
    pub fn types(&self) -> Vec<TypeId> {
        self.columns.iter().map(|c| c.ty).collect()
    }
}

/// One decoded catalog row and where it lives (to update or delete it).
#[derive(Clone, Debug)]
pub enum CatalogEntry {
    Table { tid: Tid, def: TableDef },
    Index { tid: Tid, def: IndexDef },
    Stats { tid: Tid, stats: TableStatsEntry },
    Sequence { tid: Tid, def: SequenceDef },
    Constraint { tid: Tid, def: ConstraintDef },
}

/// One table's stored statistics (see `KIND_STATS`).
#[derive(Clone, Debug, PartialEq)]
pub struct TableStatsEntry {
    pub table: String,
    pub relfile: RelFileId,
    /// Opaque to the engine: the SQL layer's encoding.
    pub data: String,
}

pub fn encode_stats(s: &TableStatsEntry) -> Vec<u8> {
    let mut out = Vec::new();
    encode_row(
        &[
            Datum::Int2(KIND_STATS),
            Datum::Text(s.table.clone()),
            Datum::Int8(s.relfile.0 as i64),
            Datum::Text(String::new()),
            Datum::Text(s.data.clone()),
            Datum::Bool(false),
            Datum::Bool(false),
            Datum::Int2(0),
        ],
        &mut out,
    );
    out
}

const CATALOG_TYPES: [TypeId; 8] = [
    TypeId::Int2,
    TypeId::Text,
    TypeId::Int8,
    TypeId::Text,
    TypeId::Text,
    TypeId::Bool,
    TypeId::Bool,
    TypeId::Int2,
];

/// A table's defaults as one text field: per column with a default, `position,kind,len:`
/// then `len` bytes of text (kind `e` an expression, `a`/`d` an identity column ALWAYS /
/// BY DEFAULT whose text is its sequence). Length-prefixed, so the text may hold any
/// character.
fn encode_defaults(defaults: &[Option<ColumnDefault>]) -> String {
    let mut out = String::new();
    for (i, d) in defaults.iter().enumerate() {
        let (kind, text) = match d {
            None => continue,
            Some(ColumnDefault::Expr(e)) => ('e', e.as_str()),
            Some(ColumnDefault::Identity { always, sequence }) => {
                (if *always { 'a' } else { 'd' }, sequence.as_str())
            }
        };
        out.push_str(&format!("{i},{kind},{}:{text}", text.len()));
    }
    out
}

fn decode_defaults(s: &str, ncols: usize) -> Result<Vec<Option<ColumnDefault>>> {
    let mut out: Vec<Option<ColumnDefault>> = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (head, tail) = rest.split_once(':').ok_or_else(|| bad("bad default"))?;
        let mut f = head.split(',');
        let (Some(pos), Some(kind), Some(len), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad("bad default header"));
        };
        let pos: usize = pos.parse().map_err(|_| bad("bad default column"))?;
        let len: usize = len.parse().map_err(|_| bad("bad default length"))?;
        if pos >= ncols || !tail.is_char_boundary(len.min(tail.len())) || len > tail.len() {
            return Err(bad("default out of range"));
        }
        let text = tail[..len].to_string();
        rest = &tail[len..];
        let d = match kind {
            "e" => ColumnDefault::Expr(text),
            "a" | "d" => ColumnDefault::Identity {
                always: kind == "a",
                sequence: text,
            },
            _ => return Err(bad("bad default kind")),
        };
        if out.len() < ncols {
            out.resize(ncols, None);
        }
        out[pos] = Some(d);
    }
    Ok(out)
}

/// A sequence's options (PostgreSQL's `pg_sequence` row) and its owner.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceDef {
    pub name: String,
    pub relfile: RelFileId,
    /// `smallint`, `integer` or `bigint` (`AS type`; bigint by default).
    pub data_type: TypeId,
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub cache: i64,
    pub cycle: bool,
    /// `OWNED BY table.column`: dropped with that table (serial and identity columns).
    pub owned_by: Option<(String, String)>,
}

pub fn encode_sequence(q: &SequenceDef) -> Vec<u8> {
    let opts = format!(
        "{},{},{},{},{},{},{}",
        q.data_type.to_u8(),
        q.start,
        q.increment,
        q.min,
        q.max,
        q.cache,
        q.cycle as u8
    );
    let owner = q
        .owned_by
        .as_ref()
        .map(|(t, c)| format!("{t}\u{1f}{c}"))
        .unwrap_or_default();
    let mut out = Vec::new();
    encode_row(
        &[
            Datum::Int2(KIND_SEQUENCE),
            Datum::Text(q.name.clone()),
            Datum::Int8(q.relfile.0 as i64),
            Datum::Text(owner),
            Datum::Text(opts),
            Datum::Bool(false),
            Datum::Bool(false),
            Datum::Int2(0),
        ],
        &mut out,
    );
    out
}

/// A table row's column spec: `name \x1f type \x1f not_null`, followed by
/// `\x1f typmod \x1f declared` when the column has either. Rows written before the type
/// modifier existed have three fields and decode as typmod -1, plain.
pub fn encode_table(t: &TableDef) -> Vec<u8> {
    let cols: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut s = format!("{}\u{1f}{}\u{1f}{}", c.name, c.ty.to_u8(), c.not_null as u8);
            if c.typmod != -1 || c.declared != DeclaredType::Plain || !t.attnums.is_empty() {
                s.push_str(&format!("\u{1f}{}\u{1f}{}", c.typmod, c.declared.to_u8()));
            }
            if !t.attnums.is_empty() {
                s.push_str(&format!("\u{1f}{}", t.attnum(i)));
            }
            s
        })
        .collect();
    let mut out = Vec::new();
    encode_row(
        &[
            Datum::Int2(KIND_TABLE),
            Datum::Text(t.name.clone()),
            Datum::Int8(t.relfile.0 as i64),
            Datum::Text(encode_defaults(&t.defaults)),
            Datum::Text(cols.join("\u{1e}")),
            Datum::Bool(false),
            Datum::Bool(false),
            Datum::Int2(t.fillfactor as i16),
        ],
        &mut out,
    );
    out
}

pub fn encode_index(i: &IndexDef) -> Vec<u8> {
    let cols: Vec<String> = i.columns.iter().map(|c| c.to_string()).collect();
    let mut out = Vec::new();
    encode_row(
        &[
            Datum::Int2(KIND_INDEX),
            Datum::Text(i.name.clone()),
            Datum::Int8(i.relfile.0 as i64),
            Datum::Text(i.table.clone()),
            Datum::Text(cols.join(",")),
            Datum::Bool(i.unique),
            Datum::Bool(i.primary),
            Datum::Int2(0),
        ],
        &mut out,
    );
    out
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Decode {
        what: "catalog row",
        at: "catalog".into(),
        reason: reason.into(),
    }
}

pub fn decode_entry(tid: Tid, bytes: &[u8]) -> Result<CatalogEntry> {
    let v = decode_row(bytes, &CATALOG_TYPES).map_err(|e| bad(e.to_string()))?;
    let text = |d: &Datum| match d {
        Datum::Text(s) => Ok(s.clone()),
        _ => Err(bad("expected text")),
    };
    let int = |d: &Datum| match d {
        Datum::Int2(x) => Ok(*x as i64),
        Datum::Int8(x) => Ok(*x),
        _ => Err(bad("expected integer")),
    };
    let boolean = |d: &Datum| matches!(d, Datum::Bool(true));
    let kind = int(&v[0])? as i16;
    let name = text(&v[1])?;
    let relfile = RelFileId(int(&v[2])? as u32);
    match kind {
        KIND_TABLE => {
            let spec = text(&v[4])?;
            let mut columns = Vec::new();
            let mut attnums = Vec::new();
            for c in spec.split('\u{1e}').filter(|s| !s.is_empty()) {
                let parts: Vec<&str> = c.split('\u{1f}').collect();
                if !matches!(parts.len(), 3 | 5 | 6) {
                    return Err(bad("bad column spec"));
                }
                if parts.len() == 6 {
                    attnums.push(parts[5].parse::<i16>().map_err(|_| bad("bad attnum"))?);
                }
                let (typmod, declared) = if parts.len() >= 5 {
                    (
                        parts[3].parse::<i32>().map_err(|_| bad("bad typmod"))?,
                        parts[4]
                            .parse::<u8>()
                            .ok()
                            .and_then(DeclaredType::from_u8)
                            .ok_or_else(|| bad("bad declared type"))?,
                    )
                } else {
                    (-1, DeclaredType::Plain)
                };
                let ty = parts[1]
                    .parse::<u8>()
                    .ok()
                    .and_then(TypeId::from_u8)
                    .ok_or_else(|| bad("bad type"))?;
                columns.push(ColumnDef {
                    name: parts[0].to_string(),
                    ty,
                    not_null: parts[2] == "1",
                    typmod,
                    declared,
                });
            }
            let defaults = decode_defaults(&text(&v[3])?, columns.len())?;
            if !attnums.is_empty() && attnums.len() != columns.len() {
                return Err(bad("attnums for some columns only"));
            }
            Ok(CatalogEntry::Table {
                tid,
                def: TableDef {
                    name,
                    relfile,
                    columns,
                    fillfactor: int(&v[7])? as u8,
                    indexes: Vec::new(),
                    defaults,
                    constraints: Vec::new(),
                    referenced_by: Vec::new(),
                    attnums,
                },
            })
        }
        KIND_INDEX => {
            let cols = text(&v[4])?;
            let columns = cols
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<usize>().map_err(|_| bad("bad index column")))
                .collect::<Result<Vec<_>>>()?;
            Ok(CatalogEntry::Index {
                tid,
                def: IndexDef {
                    name,
                    relfile,
                    table: text(&v[3])?,
                    columns,
                    unique: boolean(&v[5]),
                    primary: boolean(&v[6]),
                },
            })
        }
        KIND_STATS => Ok(CatalogEntry::Stats {
            tid,
            stats: TableStatsEntry {
                table: name,
                relfile,
                data: text(&v[4])?,
            },
        }),
        KIND_SEQUENCE => {
            let opts = text(&v[4])?;
            let f: Vec<&str> = opts.split(',').collect();
            if f.len() != 7 {
                return Err(bad("bad sequence options"));
            }
            let n = |i: usize| f[i].parse::<i64>().map_err(|_| bad("bad sequence option"));
            let data_type = f[0]
                .parse::<u8>()
                .ok()
                .and_then(TypeId::from_u8)
                .ok_or_else(|| bad("bad sequence type"))?;
            let owner = text(&v[3])?;
            Ok(CatalogEntry::Sequence {
                tid,
                def: SequenceDef {
                    name,
                    relfile,
                    data_type,
                    start: n(1)?,
                    increment: n(2)?,
                    min: n(3)?,
                    max: n(4)?,
                    cache: n(5)?,
                    cycle: n(6)? != 0,
                    owned_by: owner
                        .split_once('\u{1f}')
                        .map(|(t, c)| (t.to_string(), c.to_string())),
                },
            })
        }
        KIND_CONSTRAINT => Ok(CatalogEntry::Constraint {
            tid,
            def: decode_constraint(name, text(&v[3])?, &text(&v[4])?)?,
        }),
        _ => Err(bad(format!("unknown catalog row kind {kind}"))),
    }
}

/// A consistent view of all tables, built from the catalog rows one snapshot sees.
#[derive(Clone, Debug, Default)]
pub struct CatalogView {
    pub tables: HashMap<String, Arc<TableDef>>,
    pub entries: Vec<CatalogEntry>,
    /// Each table's statistics from its last ANALYZE, when they are of its current
    /// relation file.
    pub statistics: HashMap<String, Arc<TableStatsEntry>>,
    pub sequences: HashMap<String, Arc<SequenceDef>>,
}

impl CatalogView {
    pub fn build(entries: Vec<CatalogEntry>) -> CatalogView {
        let mut tables: HashMap<String, TableDef> = HashMap::new();
        for e in &entries {
            if let CatalogEntry::Table { def, .. } = e {
                tables.insert(def.name.clone(), def.clone());
            }
        }
        for e in &entries {
            if let CatalogEntry::Index { def, .. } = e {
                if let Some(t) = tables.get_mut(&def.table) {
                    t.indexes.push(def.clone());
                }
            }
        }
        for e in &entries {
            if let CatalogEntry::Constraint { def, .. } = e {
                let def = Arc::new(def.clone());
                if let Some(fk) = def.foreign_key() {
                    if let Some(t) = tables.get_mut(&fk.ref_table) {
                        t.referenced_by.push(def.clone());
                    }
                }
                if let Some(t) = tables.get_mut(&def.table) {
                    t.constraints.push(def);
                }
            }
        }
        for t in tables.values_mut() {
            t.indexes.sort_by(|a, b| a.name.cmp(&b.name));
            t.constraints.sort_by(|a, b| a.name.cmp(&b.name));
            t.referenced_by
                .sort_by(|a, b| (&a.table, &a.name).cmp(&(&b.table, &b.name)));
        }
        let mut statistics = HashMap::new();
        for e in &entries {
            if let CatalogEntry::Stats { stats, .. } = e {
                if tables.get(&stats.table).map(|t| t.relfile) == Some(stats.relfile) {
                    statistics.insert(stats.table.clone(), Arc::new(stats.clone()));
                }
            }
        }
        let sequences = entries
            .iter()
            .filter_map(|e| match e {
                CatalogEntry::Sequence { def, .. } => {
                    Some((def.name.clone(), Arc::new(def.clone())))
                }
                _ => None,
            })
            .collect();
        CatalogView {
            tables: tables.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            entries,
            statistics,
            sequences,
        }
    }

    pub fn table(&self, name: &str) -> Result<Arc<TableDef>> {
        self.tables
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))
    }

    /// Whether a table, index or sequence is called `name` (they share one namespace, as
    /// in PostgreSQL's `pg_class`).
    pub fn relation_exists(&self, name: &str) -> bool {
        self.tables.contains_key(name)
            || self.sequences.contains_key(name)
            || self.index_names().any(|n| n == name)
    }

    pub fn sequence(&self, name: &str) -> Result<Arc<SequenceDef>> {
        self.sequences
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))
    }

    /// Where the catalog row of sequence `name` lives.
    pub fn sequence_tid(&self, name: &str) -> Option<Tid> {
        self.entries.iter().find_map(|e| match e {
            CatalogEntry::Sequence { tid, def } if def.name == name => Some(*tid),
            _ => None,
        })
    }

    pub fn index_names(&self) -> impl Iterator<Item = &str> {
        self.tables
            .values()
            .flat_map(|t| t.indexes.iter().map(|i| i.name.as_str()))
    }

    /// Where the statistics rows of `table` live (normally one; any relation file).
    pub fn stats_tids(&self, table: &str) -> Vec<Tid> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                CatalogEntry::Stats { tid, stats } if stats.table == table => Some(*tid),
                _ => None,
            })
            .collect()
    }

    /// The statistics row stored at `tid`.
    pub fn stats_at(&self, tid: Tid) -> Option<&TableStatsEntry> {
        self.entries.iter().find_map(|e| match e {
            CatalogEntry::Stats { tid: t, stats } if *t == tid => Some(stats),
            _ => None,
        })
    }

    /// Where the catalog row of `table`'s constraint `name` lives.
    pub fn constraint_tid(&self, table: &str, name: &str) -> Option<Tid> {
        self.entries.iter().find_map(|e| match e {
            CatalogEntry::Constraint { tid, def } if def.table == table && def.name == name => {
                Some(*tid)
            }
            _ => None,
        })
    }

    pub fn entry_tid(&self, kind_table: bool, name: &str) -> Option<Tid> {
        self.entries.iter().find_map(|e| match e {
            CatalogEntry::Table { tid, def } if kind_table && def.name == name => Some(*tid),
            CatalogEntry::Index { tid, def } if !kind_table && def.name == name => Some(*tid),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_index_rows_roundtrip() {
        let t = TableDef {
            name: "pgbench_accounts".into(),
            relfile: RelFileId(16390),
            columns: vec![
                ColumnDef::new("aid", TypeId::Int4, true),
                ColumnDef {
                    name: "filler".into(),
                    ty: TypeId::Text,
                    not_null: false,
                    typmod: 84 + 4,
                    declared: DeclaredType::Char,
                },
                ColumnDef {
                    name: "abalance".into(),
                    ty: TypeId::Numeric,
                    not_null: false,
                    typmod: ((10 << 16) | 2) + 4,
                    declared: DeclaredType::Plain,
                },
                ColumnDef {
                    name: "note".into(),
                    ty: TypeId::Text,
                    not_null: false,
                    typmod: -1,
                    declared: DeclaredType::Varchar,
                },
            ],
            fillfactor: 100,
            indexes: vec![],
            constraints: vec![],
            referenced_by: vec![],
            // Column numbers with the gaps dropped columns leave.
            attnums: vec![1, 3, 4, 6],
            defaults: vec![
                None,
                Some(ColumnDefault::Expr("'a,b:c'::text".into())),
                Some(ColumnDefault::Identity {
                    always: true,
                    sequence: "s\u{1e}q".into(),
                }),
                None,
            ],
        };
        match decode_entry(Tid::new(0, 1), &encode_table(&t)).unwrap() {
            CatalogEntry::Table { def, .. } => assert_eq!(def, t),
            other => panic!("decoded {other:?}"),
        }
        // A column added after the gaps numbers on from the largest.
        let mut added = t.clone();
        added.columns.push(added.columns[0].clone());
        added.defaults.push(None);
        assert_eq!(added.attnum(4), 7);
        match decode_entry(Tid::new(0, 1), &encode_table(&added)).unwrap() {
            CatalogEntry::Table { def, .. } => assert_eq!(def.attnums, [1, 3, 4, 6, 7]),
            other => panic!("decoded {other:?}"),
        }
        let i = IndexDef {
            name: "pgbench_accounts_pkey".into(),
            relfile: RelFileId(16391),
            table: "pgbench_accounts".into(),
            columns: vec![0],
            unique: true,
            primary: true,
        };
        match decode_entry(Tid::new(0, 2), &encode_index(&i)).unwrap() {
            CatalogEntry::Index { def, .. } => assert_eq!(def, i),
            other => panic!("decoded {other:?}"),
        }
        assert!(decode_entry(Tid::new(0, 3), b"\x01\x00garbage").is_err());
        for c in [
            ConstraintDef {
                name: "price_positive".into(),
                table: "items".into(),
                kind: ConstraintKind::Check {
                    expr: "price > 0 AND note <> ':;,'".into(),
                },
                deferrable: false,
                initially_deferred: false,
            },
            ConstraintDef {
                name: "items_order_fkey".into(),
                table: "items".into(),
                kind: ConstraintKind::ForeignKey(ForeignKeyDef {
                    columns: vec![2, 0],
                    ref_table: "or;d:ers".into(),
                    ref_columns: vec![0, 1],
                    on_delete: FkAction::Cascade,
                    on_update: FkAction::SetDefault,
                    match_full: true,
                }),
                deferrable: true,
                initially_deferred: true,
            },
        ] {
            match decode_entry(Tid::new(0, 4), &encode_constraint(&c)).unwrap() {
                CatalogEntry::Constraint { def, .. } => assert_eq!(def, c),
                other => panic!("decoded {other:?}"),
            }
        }
    }

    /// A table row written before columns had a type modifier (three-field column
    /// specs) still decodes, as typmod -1 and plain types.
    #[test]
    fn old_format_table_row_decodes() {
        let mut old = Vec::new();
        encode_row(
            &[
                Datum::Int2(KIND_TABLE),
                Datum::Text("pgbench_branches".into()),
                Datum::Int8(16384),
                Datum::Text(String::new()),
                Datum::Text(format!(
                    "bid\u{1f}{}\u{1f}1\u{1e}filler\u{1f}{}\u{1f}0",
                    TypeId::Int4.to_u8(),
                    TypeId::Text.to_u8()
                )),
                Datum::Bool(false),
                Datum::Bool(false),
                Datum::Int2(100),
            ],
            &mut old,
        );
        let def = match decode_entry(Tid::new(0, 1), &old).unwrap() {
            CatalogEntry::Table { def, .. } => def,
            other => panic!("decoded {other:?}"),
        };
        assert_eq!(
            def.columns,
            vec![
                ColumnDef::new("bid", TypeId::Int4, true),
                ColumnDef::new("filler", TypeId::Text, false),
            ]
        );
        assert_eq!(def.fillfactor, 100);
        // A plain column is still written in the old three-field form.
        assert_eq!(encode_table(&def), old);
    }
}
