//! Access methods: the heap (MVCC tuples) and the B-tree, plus the value encodings they
//! share. Each access method owns its WAL record kinds and their redo.

pub mod btree;
pub mod datum;
pub mod heap;
pub mod sequence;
