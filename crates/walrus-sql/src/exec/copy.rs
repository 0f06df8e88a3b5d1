//! COPY ... FROM STDIN: loading text-format data rows into a table.

use walrus_engine::access::datum::Datum;
use walrus_engine::engine::Transaction;

use crate::error::{SqlError, SqlResult};
use crate::expr::assign;
use crate::utility;
use crate::value::parse_text;

/// Inserts the rows of `data` (complete lines; a `\\.` line ends it) into `table`;
/// returns how many.
pub(crate) fn copy_rows(
    t: &mut Transaction,
    table: &str,
    columns: &[String],
    data: &str,
) -> SqlResult<u64> {
    let def = t.table(table)?;
    let targets: Vec<usize> = if columns.is_empty() {
        (0..def.columns.len()).collect()
    } else {
        columns
            .iter()
            .map(|c| def.column_index(c).unwrap_or(usize::MAX))
            .collect()
    };
    let mut rows: Vec<Vec<Datum>> = Vec::new();
    for (lineno, line) in data.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        if line.is_empty() {
            continue;
        }
        let fields = utility::copy_fields(line);
        if fields.len() != targets.len() {
            return Err(SqlError::new(
                "22P04",
                format!(
                    "{} data for column list on line {}",
                    if fields.len() < targets.len() {
                        "missing"
                    } else {
                        "extra"
                    },
                    lineno + 1
                ),
            ));
        }
        let mut row = vec![Datum::Null; def.columns.len()];
        for (f, &ci) in fields.into_iter().zip(&targets) {
            if let Some(text) = f {
                let col = &def.columns[ci];
                row[ci] = parse_text(col.ty, &text)
                    .and_then(|v| assign(v, col))
                    .map_err(|e| SqlError {
                        message: format!("{} (COPY {table}, line {})", e.message, lineno + 1),
                        ..e
                    })?;
            }
        }
        rows.push(row);
    }
    // One batch per chunk: the heap is filled a page per WAL record. A bad line above
    // fails the whole COPY, so no row of a failing chunk needs writing first.
    Ok(t.insert_many(&def, &rows)?.len() as u64)
}
