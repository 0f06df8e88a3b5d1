//! SQL values (`Datum`), the row encoding stored in heap tuples, and the memcomparable
//! key encoding the B-tree compares with `memcmp`.
//!
//! Row layout (all integers little-endian):
//! ```text
//! u16 column count | null bitmap (ceil(n/8) bytes, bit set = NULL) | values...
//! fixed: bool 1, int2 2, int4 4, int8 8, float8 8, timestamp(tz) 8, date 4
//! text / numeric / json / jsonb: u32 length + UTF-8 bytes; bytea: u32 length + bytes
//! uuid 16, time 8 (microseconds since midnight), interval 16 (months i32, days i32,
//! microseconds i64)
//! array: u32 length + (u32 element count | null bitmap | element values as above)
//! timetz 12 (microseconds i64, zone i32 seconds west of UTC)
//! regproc / regclass / regtype / regnamespace: u32 length + (oid u32 | UTF-8 name)
//! int2vector: u32 length + the int2 items
//! ```
//! Key layout, per column: tag `0x01` (value) or `0x02` (NULL, so NULLs sort last), then
//! an order-preserving body: integers big-endian with the sign bit flipped, float8 with
//! the IEEE total-order transform, text with `0x00` escaped as `0x00 0xFF` and ended by
//! `0x00 0x01`, numeric as sign + exponent + digits.

use std::cmp::Ordering;

use walrus_base::Tid;

/// A value's type. Scalars are numbered in declaration order (the catalog stores the
/// number); a one-dimensional array of a scalar is `0x80 | scalar`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TypeId {
    Bool,
    Int2,
    Int4,
    Int8,
    Float8,
    Numeric,
    Text,
    Timestamp,
    TimestampTz,
    Date,
    /// Bytes (PostgreSQL's `bytea`).
    Bytea,
    /// A 128-bit UUID.
    Uuid,
    /// Time of day without zone: microseconds since midnight (0..=24:00:00).
    Time,
    /// PostgreSQL's `interval`: months, days and microseconds kept apart.
    Interval,
    /// `json`: the input text as given (validated).
    Json,
    /// `jsonb`: PostgreSQL's normalized text form (keys ordered, duplicates dropped).
    Jsonb,
    /// A one-dimensional array of a scalar type (never of an array).
    Array(&'static TypeId),
    /// `timetz`: a time of day and its zone offset.
    TimeTz,
    /// PostgreSQL's object-identifier types: an OID printed as the object's name. Values
    /// carry the name resolved when they were made (`Datum::Reg`).
    RegProc,
    RegClass,
    RegType,
    RegNamespace,
    /// PostgreSQL's `int2vector` (`pg_index.indkey`): int2 items, no NULLs, subscripts
    /// from 0, printed space-separated.
    Int2Vector,
}

/// Every scalar type in storage-number order (`TypeId::to_u8`); array types point into
/// it, so `TypeId` stays `Copy`.
static SCALAR_TYPES: [TypeId; 22] = [
    TypeId::Bool,
    TypeId::Int2,
    TypeId::Int4,
    TypeId::Int8,
    TypeId::Float8,
    TypeId::Numeric,
    TypeId::Text,
    TypeId::Timestamp,
    TypeId::TimestampTz,
    TypeId::Date,
    TypeId::Bytea,
    TypeId::Uuid,
    TypeId::Time,
    TypeId::Interval,
    TypeId::Json,
    TypeId::Jsonb,
    TypeId::TimeTz,
    TypeId::RegProc,
    TypeId::RegClass,
    TypeId::RegType,
    TypeId::RegNamespace,
    TypeId::Int2Vector,
];

/// The array flag in a stored type number.
const ARRAY_FLAG: u8 = 0x80;

impl TypeId {
    pub fn pg_oid(self) -> u32 {
        match self {
            TypeId::Bool => 16,
            TypeId::Int2 => 21,
            TypeId::Int4 => 23,
            TypeId::Int8 => 20,
            TypeId::Float8 => 701,
            TypeId::Numeric => 1700,
            TypeId::Text => 25,
            TypeId::Timestamp => 1114,
            TypeId::TimestampTz => 1184,
            TypeId::Date => 1082,
            TypeId::Bytea => 17,
            TypeId::Uuid => 2950,
            TypeId::Time => 1083,
            TypeId::Interval => 1186,
            TypeId::Json => 114,
            TypeId::Jsonb => 3802,
            TypeId::TimeTz => 1266,
            TypeId::RegProc => 24,
            TypeId::RegClass => 2205,
            TypeId::RegType => 2206,
            TypeId::RegNamespace => 4089,
            TypeId::Int2Vector => 22,
            TypeId::Array(e) => e.array_oid(),
        }
    }
    /// The OID of the array type whose elements are `self` (PostgreSQL's `typarray`).
    pub fn array_oid(self) -> u32 {
        match self {
            TypeId::Bool => 1000,
            TypeId::Int2 => 1005,
            TypeId::Int4 => 1007,
            TypeId::Int8 => 1016,
            TypeId::Float8 => 1022,
            TypeId::Numeric => 1231,
            TypeId::Text => 1009,
            TypeId::Timestamp => 1115,
            TypeId::TimestampTz => 1185,
            TypeId::Date => 1182,
            TypeId::Bytea => 1001,
            TypeId::Uuid => 2951,
            TypeId::Time => 1183,
            TypeId::Interval => 1187,
            TypeId::Json => 199,
            TypeId::Jsonb => 3807,
            TypeId::TimeTz => 1270,
            TypeId::RegProc => 1008,
            TypeId::RegClass => 2210,
            TypeId::RegType => 2211,
            TypeId::RegNamespace => 4090,
            TypeId::Int2Vector => 1006,
            TypeId::Array(_) => 0,
        }
    }
    /// Every scalar type walrus has.
    pub fn scalars() -> &'static [TypeId] {
        &SCALAR_TYPES
    }
    /// The one-dimensional array type of a scalar; `None` for an array (walrus has no
    /// multi-dimensional arrays).
    pub fn array_of(self) -> Option<TypeId> {
        match self {
            TypeId::Array(_) => None,
            s => SCALAR_TYPES.iter().find(|t| **t == s).map(TypeId::Array),
        }
    }
    /// An array type's element type.
    pub fn elem(self) -> Option<TypeId> {
        match self {
            TypeId::Array(e) => Some(*e),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TypeId::Bool => "boolean",
            TypeId::Int2 => "smallint",
            TypeId::Int4 => "integer",
            TypeId::Int8 => "bigint",
            TypeId::Float8 => "double precision",
            TypeId::Numeric => "numeric",
            TypeId::Text => "text",
            TypeId::Timestamp => "timestamp without time zone",
            TypeId::TimestampTz => "timestamp with time zone",
            TypeId::Date => "date",
            TypeId::Bytea => "bytea",
            TypeId::Uuid => "uuid",
            TypeId::Time => "time without time zone",
            TypeId::Interval => "interval",
            TypeId::Json => "json",
            TypeId::Jsonb => "jsonb",
            TypeId::TimeTz => "time with time zone",
            TypeId::RegProc => "regproc",
            TypeId::RegClass => "regclass",
            TypeId::RegType => "regtype",
            TypeId::RegNamespace => "regnamespace",
            TypeId::Int2Vector => "int2vector",
            TypeId::Array(e) => match e {
                TypeId::Bool => "boolean[]",
                TypeId::Int2 => "smallint[]",
                TypeId::Int4 => "integer[]",
                TypeId::Int8 => "bigint[]",
                TypeId::Float8 => "double precision[]",
                TypeId::Numeric => "numeric[]",
                TypeId::Text => "text[]",
                TypeId::Timestamp => "timestamp without time zone[]",
                TypeId::TimestampTz => "timestamp with time zone[]",
                TypeId::Date => "date[]",
                TypeId::Bytea => "bytea[]",
                TypeId::Uuid => "uuid[]",
                TypeId::Time => "time without time zone[]",
                TypeId::Interval => "interval[]",
                TypeId::Json => "json[]",
                TypeId::Jsonb => "jsonb[]",
                TypeId::TimeTz => "time with time zone[]",
                TypeId::RegProc => "regproc[]",
                TypeId::RegClass => "regclass[]",
                TypeId::RegType => "regtype[]",
                TypeId::RegNamespace => "regnamespace[]",
                TypeId::Int2Vector => "int2vector[]",
                TypeId::Array(_) => "anyarray",
            },
        }
    }
    pub fn to_u8(self) -> u8 {
        match self {
            TypeId::Array(e) => ARRAY_FLAG | e.to_u8(),
            s => SCALAR_TYPES.iter().position(|t| *t == s).unwrap_or(0) as u8,
        }
    }
    pub fn from_u8(v: u8) -> Option<TypeId> {
        if v & ARRAY_FLAG != 0 {
            return SCALAR_TYPES
                .get((v & !ARRAY_FLAG) as usize)
                .map(TypeId::Array);
        }
        SCALAR_TYPES.get(v as usize).copied()
    }
    fn fixed_width(self) -> Option<usize> {
        match self {
            TypeId::Bool => Some(1),
            TypeId::Int2 => Some(2),
            TypeId::Int4 | TypeId::Date => Some(4),
            TypeId::Int8
            | TypeId::Float8
            | TypeId::Timestamp
            | TypeId::TimestampTz
            | TypeId::Time => Some(8),
            TypeId::Uuid | TypeId::Interval => Some(16),
            TypeId::TimeTz => Some(12),
            TypeId::Numeric
            | TypeId::Text
            | TypeId::Bytea
            | TypeId::Json
            | TypeId::Jsonb
            | TypeId::Array(_)
            | TypeId::RegProc
            | TypeId::RegClass
            | TypeId::RegType
            | TypeId::RegNamespace
            | TypeId::Int2Vector => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Datum {
    Null,
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float8(f64),
    /// Canonical decimal text for now.
    Numeric(String),
    Text(String),
    /// Microseconds since 2000-01-01, as PostgreSQL.
    Timestamp(i64),
    TimestampTz(i64),
    /// Days since 2000-01-01.
    Date(i32),
    Bytea(Vec<u8>),
    /// The 16 bytes in their text order.
    Uuid([u8; 16]),
    /// Microseconds since midnight.
    Time(i64),
    Interval(Interval),
    /// The text as given (valid JSON).
    Json(String),
    /// The normalized text (PostgreSQL's jsonb output form).
    Jsonb(String),
    /// A one-dimensional array (boxed to keep `Datum` small).
    Array(Box<ArrayValue>),
    /// `timetz`: microseconds since midnight and the zone in seconds *west* of UTC
    /// (PostgreSQL's `TimeTzADT`: `10:00+05:30` has zone -19800).
    TimeTz(i64, i32),
    /// A `regproc`/`regclass`/`regtype`/`regnamespace` value (boxed to keep `Datum`
    /// small).
    Reg(Box<RegValue>),
    /// An `int2vector`: its items in order (never NULL).
    Int2Vector(Vec<i16>),
}

/// An object-identifier value: the OID (what it compares and casts to `oid` by) and the
/// name it prints as, resolved from the catalog when the value was made (PostgreSQL
/// looks the name up at output; walrus's value I/O has no catalog at hand).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegValue {
    /// `RegProc`, `RegClass`, `RegType` or `RegNamespace`.
    pub ty: TypeId,
    pub oid: u32,
    pub name: String,
}

impl Datum {
    /// The instant a timetz stands for on its day, for ordering: its time in UTC.
    fn timetz_utc(micros: i64, zone_west: i32) -> i64 {
        micros + zone_west as i64 * 1_000_000
    }
}

/// PostgreSQL's interval: the three fields are kept apart (`1 mon` is not `30 days`),
/// but compare by their span with a month of 30 days and a day of 24 hours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

impl Interval {
    /// The microseconds PostgreSQL compares intervals by (30-day months, 24-hour days).
    pub fn span(self) -> i128 {
        (self.months as i128 * 30 + self.days as i128) * 86_400_000_000 + self.micros as i128
    }
}

/// A one-dimensional array with lower bound 1: every item is `Null` or of type `elem`.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayValue {
    pub elem: TypeId,
    pub items: Vec<Datum>,
}

impl Datum {
    pub fn type_id(&self) -> Option<TypeId> {
        Some(match self {
            Datum::Null => return None,
            Datum::Bool(_) => TypeId::Bool,
            Datum::Int2(_) => TypeId::Int2,
            Datum::Int4(_) => TypeId::Int4,
            Datum::Int8(_) => TypeId::Int8,
            Datum::Float8(_) => TypeId::Float8,
            Datum::Numeric(_) => TypeId::Numeric,
            Datum::Text(_) => TypeId::Text,
            Datum::Timestamp(_) => TypeId::Timestamp,
            Datum::TimestampTz(_) => TypeId::TimestampTz,
            Datum::Date(_) => TypeId::Date,
            Datum::Bytea(_) => TypeId::Bytea,
            Datum::Uuid(_) => TypeId::Uuid,
            Datum::Time(_) => TypeId::Time,
            Datum::Interval(_) => TypeId::Interval,
            Datum::Json(_) => TypeId::Json,
            Datum::Jsonb(_) => TypeId::Jsonb,
            Datum::Array(a) => a.elem.array_of()?,
            Datum::TimeTz(..) => TypeId::TimeTz,
            Datum::Reg(r) => r.ty,
            Datum::Int2Vector(_) => TypeId::Int2Vector,
        })
    }
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DatumError {
    #[error("row data is truncated")]
    Truncated,
    #[error("row has {found} columns, table has {expected}")]
    ColumnCount { found: usize, expected: usize },
    #[error("invalid UTF-8 in a text value")]
    BadUtf8,
    #[error("invalid key encoding: {0}")]
    BadKey(&'static str),
}

pub fn encode_row(values: &[Datum], out: &mut Vec<u8>) {
    assert!(values.len() <= u16::MAX as usize);
    out.extend_from_slice(&(values.len() as u16).to_le_bytes());
    encode_values(values, out);
}

/// The null bitmap and values of a row or an array's items.
fn encode_values(values: &[Datum], out: &mut Vec<u8>) {
    let bitmap_at = out.len();
    out.resize(bitmap_at + values.len().div_ceil(8), 0);
    for (i, v) in values.iter().enumerate() {
        if v.is_null() {
            out[bitmap_at + i / 8] |= 1 << (i % 8);
        } else {
            encode_value(v, out);
        }
    }
}

/// Appends one non-NULL value's stored form (a NULL is only a bitmap bit: nothing).
fn encode_value(v: &Datum, out: &mut Vec<u8>) {
    match v {
        Datum::Null => {}
        Datum::Bool(b) => out.push(*b as u8),
        Datum::Int2(x) => out.extend_from_slice(&x.to_le_bytes()),
        Datum::Int4(x) => out.extend_from_slice(&x.to_le_bytes()),
        Datum::Date(x) => out.extend_from_slice(&x.to_le_bytes()),
        Datum::Int8(x) | Datum::Timestamp(x) | Datum::TimestampTz(x) => {
            out.extend_from_slice(&x.to_le_bytes())
        }
        Datum::Float8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Datum::Numeric(s) | Datum::Text(s) | Datum::Json(s) | Datum::Jsonb(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Datum::Time(x) => out.extend_from_slice(&x.to_le_bytes()),
        Datum::Interval(iv) => {
            out.extend_from_slice(&iv.months.to_le_bytes());
            out.extend_from_slice(&iv.days.to_le_bytes());
            out.extend_from_slice(&iv.micros.to_le_bytes());
        }
        Datum::Array(a) => {
            let len_at = out.len();
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&(a.items.len() as u32).to_le_bytes());
            encode_values(&a.items, out);
            let len = (out.len() - len_at - 4) as u32;
            out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        }
        Datum::Bytea(b) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        Datum::Uuid(u) => out.extend_from_slice(u),
        Datum::TimeTz(us, zone) => {
            out.extend_from_slice(&us.to_le_bytes());
            out.extend_from_slice(&zone.to_le_bytes());
        }
        Datum::Reg(r) => {
            out.extend_from_slice(&(4 + r.name.len() as u32).to_le_bytes());
            out.extend_from_slice(&r.oid.to_le_bytes());
            out.extend_from_slice(r.name.as_bytes());
        }
        Datum::Int2Vector(items) => {
            out.extend_from_slice(&(2 * items.len() as u32).to_le_bytes());
            for x in items {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// Rows of one table written straight into the stored row encoding, back to back in one
/// buffer: a bulk load (COPY) converts each field into its stored bytes without a
/// `Datum` or an allocation per value or row. Values go in column by column through
/// [`RowWriter`], which checks each against its column's type, so every finished row
/// is a well-formed row of a table with these column types. Cleared and reused
/// between batches.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedRows {
    types: Vec<TypeId>,
    not_null: Vec<bool>,
    data: Vec<u8>,
    /// Where each finished row ends in `data` (a row starts where the previous ends).
    ends: Vec<usize>,
}

/// Why a [`RowWriter`] refused a value or a row.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RowWriteError {
    #[error("column {column} is of type {expected}, not {given}")]
    WrongType {
        column: usize,
        expected: &'static str,
        given: &'static str,
    },
    #[error("row has {expected} columns, {written} were written")]
    ColumnCount { expected: usize, written: usize },
    /// A NULL in a NOT NULL column (the column's index): checked when the row is
    /// finished, after every value was converted, as PostgreSQL checks constraints
    /// after input conversion.
    #[error("null value in NOT NULL column {0}")]
    NotNull(usize),
}

impl EncodedRows {
    /// An empty batch for a table whose columns have `types`, `not_null` marking the
    /// columns that refuse NULL.
    pub fn new(types: Vec<TypeId>, not_null: Vec<bool>) -> EncodedRows {
        assert_eq!(types.len(), not_null.len(), "one NOT NULL flag per column");
        assert!(
            types.len() <= u16::MAX as usize,
            "column count fits the row header"
        );
        EncodedRows {
            types,
            not_null,
            data: Vec::new(),
            ends: Vec::new(),
        }
    }

    pub fn types(&self) -> &[TypeId] {
        &self.types
    }

    pub fn not_null(&self) -> &[bool] {
        &self.not_null
    }

    /// Finished rows held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of the rows held.
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    /// Row `i`'s stored bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    /// The rows' stored bytes in order.
    pub fn rows(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }

    /// Drops every row, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// Starts a row. A writer dropped before [`RowWriter::finish`] (an error in a
    /// value) takes its partial row away with it.
    pub fn start_row(&mut self) -> RowWriter<'_> {
        let start = self.data.len();
        let n = self.types.len();
        self.data.extend_from_slice(&(n as u16).to_le_bytes());
        let bitmap_at = self.data.len();
        self.data.resize(bitmap_at + n.div_ceil(8), 0);
        RowWriter {
            rows: self,
            start,
            bitmap_at,
            column: 0,
            finished: false,
        }
    }
}

/// One row being written into an [`EncodedRows`], its values in column order.
pub struct RowWriter<'a> {
    rows: &'a mut EncodedRows,
    start: usize,
    bitmap_at: usize,
    /// The column the next value is for.
    column: usize,
    finished: bool,
}

impl RowWriter<'_> {
    /// The next column's type, checked to be `given`.
    fn next_column(&mut self, given: TypeId) -> Result<(), RowWriteError> {
        match self.rows.types.get(self.column) {
            Some(&t) if t == given => Ok(()),
            Some(&t) => Err(RowWriteError::WrongType {
                column: self.column,
                expected: t.name(),
                given: given.name(),
            }),
            None => Err(RowWriteError::ColumnCount {
                expected: self.rows.types.len(),
                written: self.column + 1,
            }),
        }
    }

    pub fn null(&mut self) -> Result<(), RowWriteError> {
        if self.column >= self.rows.types.len() {
            return Err(RowWriteError::ColumnCount {
                expected: self.rows.types.len(),
                written: self.column + 1,
            });
        }
        self.rows.data[self.bitmap_at + self.column / 8] |= 1 << (self.column % 8);
        self.column += 1;
        Ok(())
    }

    pub fn int2(&mut self, v: i16) -> Result<(), RowWriteError> {
        self.next_column(TypeId::Int2)?;
        self.rows.data.extend_from_slice(&v.to_le_bytes());
        self.column += 1;
        Ok(())
    }

    pub fn int4(&mut self, v: i32) -> Result<(), RowWriteError> {
        self.next_column(TypeId::Int4)?;
        self.rows.data.extend_from_slice(&v.to_le_bytes());
        self.column += 1;
        Ok(())
    }

    pub fn int8(&mut self, v: i64) -> Result<(), RowWriteError> {
        self.next_column(TypeId::Int8)?;
        self.rows.data.extend_from_slice(&v.to_le_bytes());
        self.column += 1;
        Ok(())
    }

    /// A text value followed by `spaces` blanks (`char(n)`'s padding), written once.
    pub fn text_padded(&mut self, s: &str, spaces: usize) -> Result<(), RowWriteError> {
        self.next_column(TypeId::Text)?;
        let data = &mut self.rows.data;
        data.extend_from_slice(&((s.len() + spaces) as u32).to_le_bytes());
        data.extend_from_slice(s.as_bytes());
        data.resize(data.len() + spaces, b' ');
        self.column += 1;
        Ok(())
    }

    pub fn text(&mut self, s: &str) -> Result<(), RowWriteError> {
        self.text_padded(s, 0)
    }

    /// Any value (NULL included), checked against the column's type.
    pub fn datum(&mut self, v: &Datum) -> Result<(), RowWriteError> {
        let Some(given) = v.type_id() else {
            return self.null();
        };
        self.next_column(given)?;
        encode_value(v, &mut self.rows.data);
        self.column += 1;
        Ok(())
    }

    /// Ends the row: every column written, no NULL in a NOT NULL column.
    pub fn finish(mut self) -> Result<(), RowWriteError> {
        let expected = self.rows.types.len();
        if self.column != expected {
            return Err(RowWriteError::ColumnCount {
                expected,
                written: self.column,
            });
        }
        let bitmap = &self.rows.data[self.bitmap_at..self.bitmap_at + expected.div_ceil(8)];
        if let Some(c) =
            (0..expected).find(|&c| self.rows.not_null[c] && bitmap[c / 8] & (1 << (c % 8)) != 0)
        {
            return Err(RowWriteError::NotNull(c));
        }
        self.rows.ends.push(self.rows.data.len());
        self.finished = true;
        Ok(())
    }
}

impl Drop for RowWriter<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.rows.data.truncate(self.start);
        }
    }
}

fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], DatumError> {
    let s = b
        .get(*at..at.checked_add(n).ok_or(DatumError::Truncated)?)
        .ok_or(DatumError::Truncated)?;
    *at += n;
    Ok(s)
}

fn take_array<const N: usize>(b: &[u8], at: &mut usize) -> Result<[u8; N], DatumError> {
    take(b, at, N)?
        .try_into()
        .map_err(|_| DatumError::Truncated)
}

fn decode_value(b: &[u8], at: &mut usize, ty: TypeId) -> Result<Datum, DatumError> {
    Ok(match ty {
        TypeId::Bool => Datum::Bool(take(b, at, 1)?[0] != 0),
        TypeId::Int2 => Datum::Int2(i16::from_le_bytes(take_array::<2>(b, at)?)),
        TypeId::Int4 => Datum::Int4(i32::from_le_bytes(take_array::<4>(b, at)?)),
        TypeId::Date => Datum::Date(i32::from_le_bytes(take_array::<4>(b, at)?)),
        TypeId::Int8 => Datum::Int8(i64::from_le_bytes(take_array::<8>(b, at)?)),
        TypeId::Timestamp => Datum::Timestamp(i64::from_le_bytes(take_array::<8>(b, at)?)),
        TypeId::TimestampTz => Datum::TimestampTz(i64::from_le_bytes(take_array::<8>(b, at)?)),
        TypeId::Float8 => Datum::Float8(f64::from_le_bytes(take_array::<8>(b, at)?)),
        TypeId::Uuid => Datum::Uuid(take_array::<16>(b, at)?),
        TypeId::Bytea => {
            let len = u32::from_le_bytes(take_array::<4>(b, at)?) as usize;
            Datum::Bytea(take(b, at, len)?.to_vec())
        }
        TypeId::Time => Datum::Time(i64::from_le_bytes(take_array::<8>(b, at)?)),
        TypeId::TimeTz => Datum::TimeTz(
            i64::from_le_bytes(take_array::<8>(b, at)?),
            i32::from_le_bytes(take_array::<4>(b, at)?),
        ),
        TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace => {
            let len = u32::from_le_bytes(take_array::<4>(b, at)?) as usize;
            let body = take(b, at, len)?;
            let (oid, name) = body.split_at_checked(4).ok_or(DatumError::Truncated)?;
            Datum::Reg(Box::new(RegValue {
                ty,
                oid: u32::from_le_bytes(oid.try_into().map_err(|_| DatumError::Truncated)?),
                name: std::str::from_utf8(name)
                    .map_err(|_| DatumError::BadUtf8)?
                    .to_string(),
            }))
        }
        TypeId::Int2Vector => {
            let len = u32::from_le_bytes(take_array::<4>(b, at)?) as usize;
            let body = take(b, at, len)?;
            if !len.is_multiple_of(2) {
                return Err(DatumError::Truncated);
            }
            Datum::Int2Vector(
                body.chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            )
        }
        TypeId::Interval => Datum::Interval(Interval {
            months: i32::from_le_bytes(take_array::<4>(b, at)?),
            days: i32::from_le_bytes(take_array::<4>(b, at)?),
            micros: i64::from_le_bytes(take_array::<8>(b, at)?),
        }),
        TypeId::Numeric | TypeId::Text | TypeId::Json | TypeId::Jsonb => {
            let len = u32::from_le_bytes(take_array::<4>(b, at)?) as usize;
            let s = std::str::from_utf8(take(b, at, len)?)
                .map_err(|_| DatumError::BadUtf8)?
                .to_string();
            match ty {
                TypeId::Text => Datum::Text(s),
                TypeId::Json => Datum::Json(s),
                TypeId::Jsonb => Datum::Jsonb(s),
                _ => Datum::Numeric(s),
            }
        }
        TypeId::Array(elem) => {
            let len = u32::from_le_bytes(take_array::<4>(b, at)?) as usize;
            let body = take(b, at, len)?;
            let mut pos = 0;
            let n = u32::from_le_bytes(take_array::<4>(body, &mut pos)?) as usize;
            let bitmap = take(body, &mut pos, n.div_ceil(8))?;
            let mut items = Vec::with_capacity(n.min(body.len()));
            for i in 0..n {
                if bitmap[i / 8] & (1 << (i % 8)) != 0 {
                    items.push(Datum::Null);
                } else {
                    items.push(decode_value(body, &mut pos, *elem)?);
                }
            }
            if pos != body.len() {
                return Err(DatumError::Truncated);
            }
            Datum::Array(Box::new(ArrayValue { elem: *elem, items }))
        }
    })
}

/// Parses a row's column count and null bitmap; returns them and the offset of the first
/// value.
fn row_header<'a>(
    bytes: &'a [u8],
    types: &[TypeId],
) -> Result<(usize, &'a [u8], usize), DatumError> {
    let mut at = 0;
    let count = take(bytes, &mut at, 2)?;
    let n = u16::from_le_bytes([count[0], count[1]]) as usize;
    if n > types.len() {
        return Err(DatumError::ColumnCount {
            found: n,
            expected: types.len(),
        });
    }
    let bitmap = take(bytes, &mut at, n.div_ceil(8))?;
    Ok((n, bitmap, at))
}

/// Decodes a row stored for a table whose columns have `types`. Rows stored with fewer
/// columns (columns added later) read the missing ones as NULL.
pub fn decode_row(bytes: &[u8], types: &[TypeId]) -> Result<Vec<Datum>, DatumError> {
    let (n, bitmap, mut at) = row_header(bytes, types)?;
    let mut out = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        if i >= n || bitmap[i / 8] & (1 << (i % 8)) != 0 {
            out.push(Datum::Null);
        } else {
            out.push(decode_value(bytes, &mut at, *ty)?);
        }
    }
    if at != bytes.len() {
        return Err(DatumError::Truncated);
    }
    Ok(out)
}

/// Decodes the columns `wanted` marks and reads the others as NULL without decoding
/// them (no allocation for a skipped text): scans that need few columns of wide rows.
pub fn decode_row_columns(
    bytes: &[u8],
    types: &[TypeId],
    wanted: &[bool],
) -> Result<Vec<Datum>, DatumError> {
    let mut out = Vec::with_capacity(types.len());
    RowColumns::new(types, wanted).decode_into(bytes, &mut out)?;
    Ok(out)
}

/// How a scan decodes the `wanted` columns of a table's rows, worked out once per scan
/// rather than per row. Nothing past the last wanted column is read (a wide trailing
/// text is not even skipped); `wanted` shorter than `types` wants the rest.
///
/// When every column up to the last wanted one is fixed-width, each wanted column sits
/// at a fixed offset from the row's first value in any row that stores every column and
/// has none of those NULL (pgbench's `aid, bid, abalance` before `filler`): such a row
/// is read straight at those offsets, without walking the values before them. Any
/// other row takes the general walk; both give the same answer (a property test).
pub struct RowColumns<'a> {
    types: &'a [TypeId],
    wanted: &'a [bool],
    /// Columns read: up to and including the last wanted one.
    last: usize,
    /// (column, offset from the first value, type) of each wanted column, when every
    /// column below `last` is fixed-width.
    fixed: Option<Vec<(usize, usize, TypeId)>>,
    /// With `fixed`: the bytes of the values of the first `last` columns.
    fixed_len: usize,
    /// Columns whose slot is always NULL (not wanted, or past `last`).
    unwanted: Vec<usize>,
}

impl<'a> RowColumns<'a> {
    pub fn new(types: &'a [TypeId], wanted: &'a [bool]) -> RowColumns<'a> {
        let want = |i: usize| wanted.get(i).copied().unwrap_or(true);
        let last = if wanted.len() < types.len() {
            types.len()
        } else {
            wanted.iter().rposition(|&w| w).map_or(0, |p| p + 1)
        };
        let mut fixed = Some(Vec::new());
        let mut at = 0;
        for (i, ty) in types[..last].iter().enumerate() {
            match (ty.fixed_width(), fixed.as_mut()) {
                (Some(w), Some(cols)) => {
                    if want(i) {
                        cols.push((i, at, *ty));
                    }
                    at += w;
                }
                _ => fixed = None,
            }
        }
        RowColumns {
            types,
            wanted,
            last,
            fixed,
            fixed_len: at,
            unwanted: (0..types.len())
                .filter(|&i| i >= last || !want(i))
                .collect(),
        }
    }

    /// Decodes one row into `out` (its contents replaced), so a scan reuses one row
    /// buffer instead of allocating a vector per row.
    pub fn decode_into(&self, bytes: &[u8], out: &mut Vec<Datum>) -> Result<(), DatumError> {
        let types = self.types;
        // The previous row's slots are overwritten in place, and a slot already NULL is
        // left alone: building each value in a temporary and pushing it cost a
        // store-forwarding stall per column (40% of a filtered sum's scan).
        if out.len() != types.len() {
            out.clear();
            out.resize(types.len(), Datum::Null);
        }
        if self.decode_fixed(bytes, out)? {
            return Ok(());
        }
        let (n, bitmap, mut at) = row_header(bytes, types)?;
        let last = self.last;
        for (i, (ty, slot)) in types.iter().zip(out.iter_mut()).enumerate() {
            if i >= last || i >= n || bitmap[i / 8] & (1 << (i % 8)) != 0 {
                set_null(slot);
            } else if self.wanted.get(i).copied().unwrap_or(true) {
                put_value(slot, bytes, &mut at, *ty)?;
            } else {
                skip_value(bytes, &mut at, *ty)?;
                set_null(slot);
            }
        }
        // A row read to its end must end there.
        if last == types.len() && at != bytes.len() {
            return Err(DatumError::Truncated);
        }
        Ok(())
    }

    /// The fixed-offset read (see the type's doc); false: this row needs the walk.
    fn decode_fixed(&self, bytes: &[u8], out: &mut [Datum]) -> Result<bool, DatumError> {
        let Some(cols) = &self.fixed else {
            return Ok(false);
        };
        let n = self.types.len();
        let stored = match bytes {
            [lo, hi, ..] => u16::from_le_bytes([*lo, *hi]) as usize,
            _ => return Ok(false),
        };
        let values = 2 + n.div_ceil(8);
        let end = values + self.fixed_len;
        // Every column stored, and a row read to its end ends there.
        if stored != n || bytes.len() < end || (self.last == n && bytes.len() != end) {
            return Ok(false);
        }
        let bitmap = &bytes[2..values];
        let (full, bits) = (self.last / 8, self.last % 8);
        if bitmap[..full].iter().any(|&b| b != 0)
            || (bits != 0 && bitmap[full] & ((1u8 << bits) - 1) != 0)
        {
            return Ok(false);
        }
        for &(i, offset, ty) in cols {
            let mut at = values + offset;
            put_value(&mut out[i], bytes, &mut at, ty)?;
        }
        for &i in &self.unwanted {
            set_null(&mut out[i]);
        }
        Ok(true)
    }
}

/// Sets a slot to NULL, touching it only when it is not already.
#[inline]
fn set_null(slot: &mut Datum) {
    if !matches!(slot, Datum::Null) {
        *slot = Datum::Null;
    }
}

/// Decodes one stored value of type `ty` at `at` into `slot`. An integer slot that
/// already holds an integer is updated in place: assigning a whole `Datum` first drops
/// the old one, an out-of-line call per value (5% of a filtered sum's scan).
#[inline(always)]
fn put_value(slot: &mut Datum, bytes: &[u8], at: &mut usize, ty: TypeId) -> Result<(), DatumError> {
    match ty {
        TypeId::Int4 => {
            let v = i32::from_le_bytes(take_array::<4>(bytes, at)?);
            match slot {
                Datum::Int4(x) => *x = v,
                _ => *slot = Datum::Int4(v),
            }
        }
        TypeId::Int8 => {
            let v = i64::from_le_bytes(take_array::<8>(bytes, at)?);
            match slot {
                Datum::Int8(x) => *x = v,
                _ => *slot = Datum::Int8(v),
            }
        }
        _ => *slot = decode_value(bytes, at, ty)?,
    }
    Ok(())
}

/// Moves `at` past one stored value of type `ty`.
fn skip_value(bytes: &[u8], at: &mut usize, ty: TypeId) -> Result<(), DatumError> {
    match ty.fixed_width() {
        Some(w) => {
            take(bytes, at, w)?;
        }
        None => {
            let len = u32::from_le_bytes(
                take(bytes, at, 4)?
                    .try_into()
                    .map_err(|_| DatumError::Truncated)?,
            ) as usize;
            take(bytes, at, len)?;
        }
    }
    Ok(())
}

/// Writes the new version of the stored row `old` (of a table whose columns have
/// `types`) into `out`: the columns in `sets` take their new values and every other
/// column keeps its stored bytes, copied without being decoded. An UPDATE of one column
/// of a wide row so neither decodes nor re-encodes the others (a pgbench account's
/// 84-byte `filler` cost a UTF-8 check and two allocations per updated row). Columns
/// `old` does not store (added later) read as NULL, as [`decode_row`] reads them.
///
/// Each value in `sets` must already be of its column's type (or NULL): the caller
/// checks; a column named twice takes its last value.
pub fn splice_row(
    old: &[u8],
    types: &[TypeId],
    sets: &[(usize, Datum)],
    out: &mut Vec<u8>,
) -> Result<(), DatumError> {
    assert!(types.len() <= u16::MAX as usize);
    let (n, bitmap, mut at) = row_header(old, types)?;
    out.clear();
    out.extend_from_slice(&(types.len() as u16).to_le_bytes());
    let bitmap_at = out.len();
    out.resize(bitmap_at + types.len().div_ceil(8), 0);
    for (i, ty) in types.iter().enumerate() {
        let stored = i < n && bitmap[i / 8] & (1 << (i % 8)) == 0;
        let start = at;
        if stored {
            skip_value(old, &mut at, *ty)?;
        }
        let null = match sets.iter().rev().find(|(c, _)| *c == i) {
            Some((_, v)) => {
                debug_assert!(v.type_id().is_none_or(|t| t == *ty), "column {i}: {v:?}");
                encode_value(v, out);
                v.is_null()
            }
            None => {
                out.extend_from_slice(&old[start..at]);
                !stored
            }
        };
        if null {
            out[bitmap_at + i / 8] |= 1 << (i % 8);
        }
    }
    if at != old.len() {
        return Err(DatumError::Truncated);
    }
    Ok(())
}

/// Where column `index`'s value lies in the stored row `bytes` (`None`: NULL or not
/// stored): two versions of a row hold the same value in a column exactly when these
/// bytes are equal, the binary test PostgreSQL's HOT check makes (`heap_attr_equals`).
pub fn value_span(
    bytes: &[u8],
    types: &[TypeId],
    index: usize,
) -> Result<Option<std::ops::Range<usize>>, DatumError> {
    let mut spans = ValueSpans::new(bytes, types)?;
    let Some(ty) = types.get(index) else {
        return Err(DatumError::ColumnCount {
            found: index + 1,
            expected: types.len(),
        });
    };
    for ty in &types[..index] {
        spans.next(*ty)?;
    }
    spans.next(*ty)
}

/// [`value_span`] of each of the first `count` columns, in one walk of the row.
pub fn value_spans(
    bytes: &[u8],
    types: &[TypeId],
    count: usize,
    out: &mut Vec<Option<std::ops::Range<usize>>>,
) -> Result<(), DatumError> {
    out.clear();
    let mut spans = ValueSpans::new(bytes, types)?;
    for ty in &types[..count.min(types.len())] {
        out.push(spans.next(*ty)?);
    }
    Ok(())
}

/// A walk over a stored row's values, column by column.
struct ValueSpans<'a> {
    bytes: &'a [u8],
    stored: usize,
    bitmap: &'a [u8],
    column: usize,
    at: usize,
}

impl<'a> ValueSpans<'a> {
    fn new(bytes: &'a [u8], types: &[TypeId]) -> Result<ValueSpans<'a>, DatumError> {
        let (stored, bitmap, at) = row_header(bytes, types)?;
        Ok(ValueSpans {
            bytes,
            stored,
            bitmap,
            column: 0,
            at,
        })
    }

    /// The next column's span (it has type `ty`).
    fn next(&mut self, ty: TypeId) -> Result<Option<std::ops::Range<usize>>, DatumError> {
        let i = self.column;
        self.column += 1;
        if i >= self.stored || self.bitmap[i / 8] & (1 << (i % 8)) != 0 {
            return Ok(None);
        }
        let start = self.at;
        skip_value(self.bytes, &mut self.at, ty)?;
        Ok(Some(start..self.at))
    }
}

/// Decodes only column `index`, skipping the ones before it.
pub fn decode_column(bytes: &[u8], types: &[TypeId], index: usize) -> Result<Datum, DatumError> {
    let Some(span) = value_span(bytes, types, index)? else {
        return Ok(Datum::Null);
    };
    let mut at = span.start;
    decode_value(bytes, &mut at, types[index])
}

// ---- keys --------------------------------------------------------------------------

fn float_key(x: f64) -> u64 {
    let x = if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f64::NAN
    } else {
        x
    };
    let bits = x.to_bits();
    if x.is_nan() {
        return u64::MAX;
    }
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// Parses decimal text into (negative, exponent, significant digits without leading or
/// trailing zeros); value = 0.d1d2d3… × 10^exponent.
fn parse_decimal(s: &str) -> Option<(bool, i32, Vec<u8>)> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|c| c - b'0').collect();
    let first = digits.iter().position(|&d| d != 0);
    let Some(first) = first else {
        return Some((false, 0, Vec::new()));
    };
    let last = digits.iter().rposition(|&d| d != 0).unwrap_or(first);
    let exponent = int.len() as i32 - first as i32;
    Some((neg, exponent, digits[first..=last].to_vec()))
}

fn encode_numeric(s: &str, out: &mut Vec<u8>) {
    match parse_decimal(s) {
        None => {
            // Not a number (NaN in PostgreSQL sorts above all numbers).
            out.push(0x04);
        }
        Some((_, _, d)) if d.is_empty() => out.push(0x02),
        Some((neg, exp, digits)) => {
            // 0x01 negative < 0x02 zero < 0x03 positive; negatives invert the rest.
            let mut body = Vec::with_capacity(digits.len() + 6);
            body.extend_from_slice(&((exp as i64 + (1 << 31)) as u32).to_be_bytes());
            body.extend(digits.iter().map(|d| d + 1));
            body.push(0); // terminator: shorter digit strings sort first
            if neg {
                out.push(0x01);
                out.extend(body.iter().map(|b| !b));
            } else {
                out.push(0x03);
                out.extend(body);
            }
        }
    }
}

/// Variable-length bytes in key order: each 0x00 escaped as 0x00 0xFF, ended by 0x00
/// 0x01, so a prefix sorts first.
fn escaped_key_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Appends the memcomparable encoding of `values` (byte order = SQL order, NULLS LAST).
pub fn encode_key(values: &[Datum], out: &mut Vec<u8>) {
    for v in values {
        if v.is_null() {
            out.push(0x02);
            continue;
        }
        out.push(0x01);
        match v {
            Datum::Null => {}
            Datum::Bool(b) => out.push(*b as u8),
            Datum::Int2(x) => out.extend_from_slice(&((*x as u16) ^ 0x8000).to_be_bytes()),
            Datum::Int4(x) | Datum::Date(x) => {
                out.extend_from_slice(&((*x as u32) ^ 0x8000_0000).to_be_bytes())
            }
            Datum::Int8(x) | Datum::Timestamp(x) | Datum::TimestampTz(x) | Datum::Time(x) => {
                out.extend_from_slice(&((*x as u64) ^ (1 << 63)).to_be_bytes())
            }
            Datum::Float8(x) => out.extend_from_slice(&float_key(*x).to_be_bytes()),
            Datum::Text(s) | Datum::Json(s) | Datum::Jsonb(s) => {
                escaped_key_bytes(s.as_bytes(), out)
            }
            Datum::Interval(iv) => {
                out.extend_from_slice(&((iv.span() as u128) ^ (1 << 127)).to_be_bytes())
            }
            // Items in order, each tagged (0x01 value, 0x02 NULL), then 0x00: a prefix
            // sorts first, as PostgreSQL compares arrays.
            Datum::Array(a) => {
                encode_key(&a.items, out);
                out.push(0x00);
            }
            Datum::Bytea(b) => escaped_key_bytes(b, out),
            Datum::Uuid(u) => out.extend_from_slice(u),
            Datum::Numeric(s) => encode_numeric(s, out),
            // The UTC time, then the zone: PostgreSQL's timetz order.
            Datum::TimeTz(us, zone) => {
                let utc = Datum::timetz_utc(*us, *zone);
                out.extend_from_slice(&((utc as u64) ^ (1 << 63)).to_be_bytes());
                out.extend_from_slice(&((*zone as u32) ^ 0x8000_0000).to_be_bytes());
            }
            Datum::Reg(r) => out.extend_from_slice(&r.oid.to_be_bytes()),
            // As an int2 array: items in order, a prefix first.
            Datum::Int2Vector(items) => {
                for x in items {
                    out.push(0x01);
                    out.extend_from_slice(&((*x as u16) ^ 0x8000).to_be_bytes());
                }
                out.push(0x00);
            }
        }
    }
}

pub fn encode_tid_suffix(tid: Tid, out: &mut Vec<u8>) {
    out.extend_from_slice(&tid.block.to_be_bytes());
    out.extend_from_slice(&tid.offset.to_be_bytes());
}

pub fn split_tid_suffix(key: &[u8]) -> Option<(&[u8], Tid)> {
    let n = key.len().checked_sub(6)?;
    let (k, t) = key.split_at(n);
    Some((
        k,
        Tid::new(
            u32::from_be_bytes(t[0..4].try_into().ok()?),
            u16::from_be_bytes([t[4], t[5]]),
        ),
    ))
}

/// SQL comparison of two values (NULLS LAST; integers of different widths compare by
/// value; numeric by value).
pub fn compare_datums(a: &Datum, b: &Datum) -> Ordering {
    use Datum::*;
    // Object-identifier values compare as their OID, also with `oid` values (int8).
    let as_i64 = |d: &Datum| match d {
        Int2(x) => Some(*x as i64),
        Int4(x) => Some(*x as i64),
        Int8(x) => Some(*x),
        Reg(r) => Some(r.oid as i64),
        _ => None,
    };
    match (a, b) {
        (Null, Null) => Ordering::Equal,
        (Null, _) => Ordering::Greater,
        (_, Null) => Ordering::Less,
        _ if as_i64(a).is_some() && as_i64(b).is_some() => as_i64(a).cmp(&as_i64(b)),
        (Float8(x), Float8(y)) => float_key(*x).cmp(&float_key(*y)),
        (Text(x), Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bool(x), Bool(y)) => x.cmp(y),
        (Timestamp(x), Timestamp(y)) | (TimestampTz(x), TimestampTz(y)) => x.cmp(y),
        (Date(x), Date(y)) => x.cmp(y),
        (Bytea(x), Bytea(y)) => x.cmp(y),
        (Uuid(x), Uuid(y)) => x.cmp(y),
        (Time(x), Time(y)) => x.cmp(y),
        (TimeTz(x, zx), TimeTz(y, zy)) => {
            (Datum::timetz_utc(*x, *zx), zx).cmp(&(Datum::timetz_utc(*y, *zy), zy))
        }
        (Interval(x), Interval(y)) => x.span().cmp(&y.span()),
        (Json(x), Json(y)) | (Jsonb(x), Jsonb(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Array(x), Array(y)) => {
            for (p, q) in x.items.iter().zip(&y.items) {
                let o = compare_datums(p, q);
                if o.is_ne() {
                    return o;
                }
            }
            x.items.len().cmp(&y.items.len())
        }
        (Int2Vector(x), Int2Vector(y)) => x.cmp(y),
        (Numeric(_), Numeric(_)) => {
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            encode_key(std::slice::from_ref(a), &mut ka);
            encode_key(std::slice::from_ref(b), &mut kb);
            ka.cmp(&kb)
        }
        _ => format!("{a:?}").cmp(&format!("{b:?}")),
    }
}

/// A uuid's text form, as PostgreSQL prints it: lower-case hex in 8-4-4-4-12 groups.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_datum(ty: TypeId) -> BoxedStrategy<Datum> {
        let v = match ty {
            TypeId::Bool => any::<bool>().prop_map(Datum::Bool).boxed(),
            TypeId::Int2 => any::<i16>().prop_map(Datum::Int2).boxed(),
            TypeId::Int4 => any::<i32>().prop_map(Datum::Int4).boxed(),
            TypeId::Int8 => any::<i64>().prop_map(Datum::Int8).boxed(),
            TypeId::Float8 => prop_oneof![
                any::<f64>(),
                Just(-0.0),
                Just(0.0),
                Just(f64::INFINITY),
                Just(f64::NEG_INFINITY)
            ]
            .prop_map(Datum::Float8)
            .boxed(),
            TypeId::Numeric => (any::<bool>(), 0u32..100000, 0u32..1000)
                .prop_map(|(n, i, f)| {
                    Datum::Numeric(format!("{}{}.{:03}", if n { "-" } else { "" }, i, f))
                })
                .boxed(),
            TypeId::Text => "[a\\x00b\\xffé]{0,6}".prop_map(Datum::Text).boxed(),
            TypeId::Timestamp => any::<i64>().prop_map(Datum::Timestamp).boxed(),
            TypeId::TimestampTz => any::<i64>().prop_map(Datum::TimestampTz).boxed(),
            TypeId::Date => any::<i32>().prop_map(Datum::Date).boxed(),
            TypeId::Bytea => proptest::collection::vec(any::<u8>(), 0..6)
                .prop_map(Datum::Bytea)
                .boxed(),
            TypeId::Uuid => any::<[u8; 16]>().prop_map(Datum::Uuid).boxed(),
            TypeId::Time => (0i64..=86_400_000_000).prop_map(Datum::Time).boxed(),
            TypeId::Interval => (any::<i32>(), any::<i32>(), any::<i64>())
                .prop_map(|(months, days, micros)| {
                    Datum::Interval(Interval {
                        months,
                        days,
                        micros,
                    })
                })
                .boxed(),
            TypeId::Json => "[a\\[\\]{}é]{0,6}".prop_map(Datum::Json).boxed(),
            TypeId::Jsonb => "[a\\[\\]{}é]{0,6}".prop_map(Datum::Jsonb).boxed(),
            TypeId::TimeTz => (0i64..=86_400_000_000, -57_599i32..=57_599)
                .prop_map(|(us, zone)| Datum::TimeTz(us, zone))
                .boxed(),
            TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace => {
                (any::<u32>(), "[a-z_é]{0,6}")
                    .prop_map(move |(oid, name)| Datum::Reg(Box::new(RegValue { ty, oid, name })))
                    .boxed()
            }
            TypeId::Int2Vector => proptest::collection::vec(any::<i16>(), 0..4)
                .prop_map(Datum::Int2Vector)
                .boxed(),
            TypeId::Array(e) => proptest::collection::vec(arb_datum(*e), 0..4)
                .prop_map(move |items| Datum::Array(Box::new(ArrayValue { elem: *e, items })))
                .boxed(),
        };
        prop_oneof![1 => Just(Datum::Null), 8 => v].boxed()
    }

    fn arb_type() -> impl Strategy<Value = TypeId> {
        prop_oneof![
            (0..SCALAR_TYPES.len() as u8).prop_map(|v| TypeId::from_u8(v).expect("valid")),
            (0..SCALAR_TYPES.len() as u8).prop_map(|v| TypeId::from_u8(0x80 | v).expect("valid")),
        ]
    }

    fn arb_rows() -> impl Strategy<Value = (Vec<TypeId>, Vec<Datum>, Vec<Datum>)> {
        proptest::collection::vec(arb_type(), 1..4).prop_flat_map(|types| {
            let a: Vec<_> = types.iter().map(|t| arb_datum(*t)).collect();
            let b: Vec<_> = types.iter().map(|t| arb_datum(*t)).collect();
            (Just(types), a, b)
        })
    }

    fn same(a: &Datum, b: &Datum) -> bool {
        match (a, b) {
            (Datum::Float8(x), Datum::Float8(y)) => x.to_bits() == y.to_bits(),
            (Datum::Array(x), Datum::Array(y)) => {
                x.elem == y.elem
                    && x.items.len() == y.items.len()
                    && x.items.iter().zip(&y.items).all(|(p, q)| same(p, q))
            }
            _ => a == b,
        }
    }

    proptest! {
        /// A row written value by value into `EncodedRows` is byte for byte the row
        /// `encode_row` makes of the same values, and a row abandoned midway leaves
        /// nothing behind.
        #[test]
        fn row_writer_matches_encode_row((types, a, b) in arb_rows()) {
            let mut rows = EncodedRows::new(types.clone(), vec![false; types.len()]);
            for values in [&a, &b] {
                let mut w = rows.start_row();
                for v in values.iter() {
                    match v {
                        Datum::Int2(x) => w.int2(*x).unwrap(),
                        Datum::Int4(x) => w.int4(*x).unwrap(),
                        Datum::Int8(x) => w.int8(*x).unwrap(),
                        Datum::Text(t) => w.text(t).unwrap(),
                        other => w.datum(other).unwrap(),
                    }
                }
                w.finish().unwrap();
                // A partial row, dropped: gone.
                let mut partial = rows.start_row();
                partial.datum(&values[0]).unwrap();
                drop(partial);
            }
            prop_assert_eq!(rows.len(), 2);
            for (i, values) in [&a, &b].into_iter().enumerate() {
                let mut want = Vec::new();
                encode_row(values, &mut want);
                prop_assert_eq!(rows.row(i), &want[..]);
            }
            let total: usize = rows.rows().map(|r| r.len()).sum();
            prop_assert_eq!(total, rows.byte_len());
        }

        #[test]
        fn row_roundtrip((types, a, b) in arb_rows()) {
            let mut buf = Vec::new();
            encode_row(&a, &mut buf);
            let d = decode_row(&buf, &types).unwrap();
            for (x, y) in d.iter().zip(&a) {
                prop_assert!(same(x, y), "{x:?} vs {y:?}");
            }
            for (i, want) in a.iter().enumerate() {
                prop_assert!(same(&decode_column(&buf, &types, i).unwrap(), want));
            }
            // Decoding some columns: those are as stored, the others NULL.
            for mask in 0u32..(1 << a.len().min(6)) {
                let wanted: Vec<bool> = (0..a.len()).map(|i| i >= 6 || mask & (1 << i) != 0).collect();
                let some = decode_row_columns(&buf, &types, &wanted).unwrap();
                prop_assert_eq!(some.len(), a.len());
                for (i, (x, y)) in some.iter().zip(&a).enumerate() {
                    if wanted[i] {
                        prop_assert!(same(x, y), "{x:?} vs {y:?}");
                    } else {
                        prop_assert!(x.is_null());
                    }
                }
                // One buffer reused across rows, as a scan does: row `b` decoded in
                // full, then `a` with this mask (fixed-offset or walked, the slots `b`
                // filled must read as `a`'s values or NULL).
                let mut buf_b = Vec::new();
                encode_row(&b, &mut buf_b);
                let mut reused = decode_row(&buf_b, &types).unwrap();
                RowColumns::new(&types, &wanted).decode_into(&buf, &mut reused).unwrap();
                for (x, y) in reused.iter().zip(&some) {
                    prop_assert!(same(x, y), "{x:?} vs {y:?}");
                }
            }
        }

        /// A spliced row is byte for byte the row `encode_row` makes of the old values
        /// with the set columns replaced, for every subset of columns set; a row stored
        /// with fewer columns (some added later) splices as if those were NULL. A
        /// column's span holds the same bytes in two rows exactly when the two encode
        /// the same value there.
        #[test]
        fn splice_row_matches_encode_row((types, a, b) in arb_rows()) {
            let mut old = Vec::new();
            encode_row(&a, &mut old);
            let mut out = vec![7u8; 3]; // stale bytes a splice must clear
            for mask in 0u32..(1 << a.len()) {
                let sets: Vec<(usize, Datum)> = (0..a.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| (i, b[i].clone()))
                    .collect();
                splice_row(&old, &types, &sets, &mut out).unwrap();
                let mut want_values = a.clone();
                for (i, v) in &sets {
                    want_values[*i] = v.clone();
                }
                let mut want = Vec::new();
                encode_row(&want_values, &mut want);
                prop_assert_eq!(&out, &want);
                let mut all = Vec::new();
                value_spans(&out, &types, a.len(), &mut all).unwrap();
                for i in 0..a.len() {
                    let (x, y) = (value_span(&old, &types, i).unwrap(), value_span(&out, &types, i).unwrap());
                    prop_assert_eq!(&all[i], &y);
                    let (mut ex, mut ey) = (Vec::new(), Vec::new());
                    encode_row(std::slice::from_ref(&a[i]), &mut ex);
                    encode_row(std::slice::from_ref(&want_values[i]), &mut ey);
                    prop_assert_eq!(x.map(|r| &old[r]) == y.map(|r| &out[r]), ex == ey);
                }
            }
            // The old row stored only its first column.
            let mut short = Vec::new();
            encode_row(&a[..1], &mut short);
            let sets = [(a.len() - 1, b[a.len() - 1].clone())];
            splice_row(&short, &types, &sets, &mut out).unwrap();
            let mut want_values = vec![Datum::Null; a.len()];
            want_values[0] = a[0].clone();
            want_values[a.len() - 1] = b[a.len() - 1].clone();
            let mut want = Vec::new();
            encode_row(&want_values, &mut want);
            prop_assert_eq!(&out, &want);
        }

        #[test]
        fn key_order_matches_sql_order((_types, a, b) in arb_rows()) {
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            encode_key(&a, &mut ka);
            encode_key(&b, &mut kb);
            let sql = a.iter().zip(&b).map(|(x, y)| compare_datums(x, y)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal);
            let numeric_text_equal = a.iter().zip(&b).all(|(x, y)| compare_datums(x, y).is_eq());
            if numeric_text_equal {
                prop_assert_eq!(ka.cmp(&kb), Ordering::Equal);
            } else {
                prop_assert_eq!(ka.cmp(&kb), sql, "{:?} vs {:?}", a, b);
            }
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), types in proptest::collection::vec(arb_type(), 0..5)) {
            let _ = decode_row(&bytes, &types);
            if !types.is_empty() {
                let _ = decode_column(&bytes, &types, types.len() - 1);
                let _ = value_span(&bytes, &types, types.len() - 1);
                let mut out = Vec::new();
                let _ = splice_row(&bytes, &types, &[(0, Datum::Null)], &mut out);
            }
        }
    }

    #[test]
    fn timetz_and_reg_values_round_trip_and_order_as_postgresql() {
        // 10:00+01 is 09:00 UTC: before 09:30+00; equal UTC times order by zone west.
        let ten_plus_one = Datum::TimeTz(10 * 3_600_000_000, -3600);
        let half_past_nine_utc = Datum::TimeTz(9 * 3_600_000_000 + 1_800_000_000, 0);
        let nine_utc = Datum::TimeTz(9 * 3_600_000_000, 0);
        assert_eq!(
            compare_datums(&ten_plus_one, &half_past_nine_utc),
            Ordering::Less
        );
        assert_eq!(compare_datums(&nine_utc, &ten_plus_one), Ordering::Greater);
        let reg = Datum::Reg(Box::new(RegValue {
            ty: TypeId::RegClass,
            oid: 1259,
            name: "pg_class".into(),
        }));
        assert_eq!(compare_datums(&reg, &Datum::Int8(1259)), Ordering::Equal);
        let types = [TypeId::TimeTz, TypeId::RegClass, TypeId::Int4];
        let row = vec![ten_plus_one.clone(), reg.clone(), Datum::Int4(7)];
        let mut buf = Vec::new();
        encode_row(&row, &mut buf);
        assert_eq!(decode_row(&buf, &types).unwrap(), row);
        assert_eq!(decode_column(&buf, &types, 2).unwrap(), Datum::Int4(7));
        let key = |d: &Datum| {
            let mut k = Vec::new();
            encode_key(std::slice::from_ref(d), &mut k);
            k
        };
        assert!(key(&ten_plus_one) < key(&half_past_nine_utc));
        assert!(key(&ten_plus_one) < key(&nine_utc));
    }

    #[test]
    fn numeric_keys_order_by_value() {
        let vals = [
            "-10", "-1.5", "-0.25", "0", "0.001", "1.5", "1.50", "9.99", "10", "100.000",
        ];
        let keys: Vec<Vec<u8>> = vals
            .iter()
            .map(|v| {
                let mut k = Vec::new();
                encode_key(&[Datum::Numeric(v.to_string())], &mut k);
                k
            })
            .collect();
        for w in keys.windows(2) {
            assert!(w[0] <= w[1]);
        }
        assert_eq!(keys[5], keys[6], "1.5 = 1.50");
        assert!(keys[8] < keys[9], "10 < 100");
        let mut a = Vec::new();
        encode_key(&[Datum::Numeric("10".into())], &mut a);
        let mut b = Vec::new();
        encode_key(&[Datum::Numeric("100.000".into())], &mut b);
        assert!(a < b);
    }

    #[test]
    fn row_writer_refuses_wrong_types_counts_and_nulls() {
        let mut rows = EncodedRows::new(vec![TypeId::Int4, TypeId::Text], vec![true, false]);
        let mut w = rows.start_row();
        assert!(matches!(
            w.int8(1),
            Err(RowWriteError::WrongType { column: 0, .. })
        ));
        w.int4(1).unwrap();
        assert!(matches!(
            w.finish(),
            Err(RowWriteError::ColumnCount {
                expected: 2,
                written: 1
            })
        ));
        let mut w = rows.start_row();
        w.null().unwrap();
        w.text("x").unwrap();
        assert_eq!(
            w.null(),
            Err(RowWriteError::ColumnCount {
                expected: 2,
                written: 3
            })
        );
        assert_eq!(w.finish(), Err(RowWriteError::NotNull(0)));
        let mut w = rows.start_row();
        w.int4(7).unwrap();
        w.text_padded("ab", 3).unwrap();
        w.finish().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            decode_row(rows.row(0), rows.types()).unwrap(),
            vec![Datum::Int4(7), Datum::Text("ab   ".into())]
        );
        rows.clear();
        assert!(rows.is_empty() && rows.byte_len() == 0);
    }

    #[test]
    fn text_prefix_sorts_first_and_nulls_last() {
        let k = |d: Datum| {
            let mut v = Vec::new();
            encode_key(&[d], &mut v);
            v
        };
        assert!(k(Datum::Text("ab".into())) < k(Datum::Text("ab\0".into())));
        assert!(k(Datum::Text("ab\0".into())) < k(Datum::Text("abc".into())));
        assert!(k(Datum::Int4(i32::MAX)) < k(Datum::Null));
        assert!(k(Datum::Int4(-1)) < k(Datum::Int4(0)));
        let (kk, t) = {
            let mut v = k(Datum::Int8(5));
            encode_tid_suffix(Tid::new(7, 3), &mut v);
            let (a, t) = split_tid_suffix(&v).unwrap();
            (a.to_vec(), t)
        };
        assert_eq!(kk, k(Datum::Int8(5)));
        assert_eq!(t, Tid::new(7, 3));
    }
}
