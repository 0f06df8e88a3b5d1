//! Every bound in the engine, with the reason for its number (TigerStyle: put a limit on
//! everything). A queue or batch that would grow past one of these applies back-pressure.

/// Largest WAL record body. A B-tree split logs two page images plus a little; 4 pages
/// leaves room for any record walrus writes, and must stay far below the WAL buffer size.
pub const WAL_RECORD_BYTES_MAX: usize = 4 * crate::PAGE_SIZE + 1024;

/// Smallest WAL buffer: it must hold several maximal records so that an inserter
/// waiting for space can always be satisfied by writing out older, completed records.
pub const WAL_BUFFER_BYTES_MIN: usize = 16 * WAL_RECORD_BYTES_MAX;

/// WAL insertion slots (PostgreSQL's NUM_XLOGINSERT_LOCKS is 8): enough that two cores
/// never wait on each other's copy, few enough that the flusher's scan is cheap.
pub const WAL_INSERT_SLOTS: usize = 8;

/// Pages a page writer writes per batch before it re-checks its targets.
pub const PAGE_WRITER_BATCH_PAGES_MAX: usize = 64;

/// Buffer-pool mapping partitions (PostgreSQL uses 128).
pub const PAGE_TABLE_PARTITIONS: usize = 64;

/// Largest tuple a heap page accepts (no TOAST yet): a quarter of a page leaves room for
/// HOT updates of the row in place.
pub const HEAP_TUPLE_BYTES_MAX: usize = crate::PAGE_SIZE / 4 * 3;

/// Largest B-tree key: a third of a page, so every split leaves at least two items a page.
pub const BTREE_KEY_BYTES_MAX: usize = crate::PAGE_SIZE / 3 - 64;

/// Columns per table (PostgreSQL allows 1600).
pub const COLUMNS_MAX: usize = 1600;
