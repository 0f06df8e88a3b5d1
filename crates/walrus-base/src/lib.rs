//! Identifiers, positions and limits shared by every walrus crate.
//!
//! Every identifier that crosses a module boundary is a newtype here, so that a block
//! number can never be passed where an LSN is expected. `Lsn` prints as PostgreSQL's
//! `X/X` so logs line up with `pg_waldump` habits.

#![forbid(unsafe_code)]

use std::fmt;

pub mod hash;
pub mod limits;

/// Size of every page in every file walrus writes (heap, btree, clog, double-write).
pub const PAGE_SIZE: usize = 8192;
/// The sector size walrus assumes a device writes atomically (DESIGN §4: 4 KiB here).
pub const SECTOR_SIZE: usize = 4096;
const _: () = assert!(PAGE_SIZE.is_multiple_of(SECTOR_SIZE));

/// A byte position in the one endless write-ahead log.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);
    pub const MAX: Lsn = Lsn(u64::MAX);

    /// The LSN `bytes` after this one; overflow is a broken invariant, not an input error.
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, bytes: u64) -> Lsn {
        Lsn(self.0.checked_add(bytes).expect("LSN overflow"))
    }

    /// Bytes from `earlier` to `self` (zero if `earlier` is ahead).
    pub fn distance_from(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// A 64-bit transaction id. Never wraps, so there is no freezing.
///
/// `Xid(0)` is invalid, `Xid(1)` is the bootstrap transaction (always committed, used for
/// rows created by `init` and for frozen rows), normal xids start at [`Xid::FIRST_NORMAL`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Xid(pub u64);

impl Xid {
    pub const INVALID: Xid = Xid(0);
    pub const BOOTSTRAP: Xid = Xid(1);
    pub const FIRST_NORMAL: Xid = Xid(3);

    pub fn is_valid(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one relation file (one fork of a table or index). Ids below
/// [`RelFileId::FIRST_USER`] are reserved for the engine's own catalog.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct RelFileId(pub u32);

impl RelFileId {
    pub const FIRST_USER: RelFileId = RelFileId(16384);
}

impl fmt::Display for RelFileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A block (page) number inside one relation file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct BlockNumber(pub u32);

impl fmt::Display for BlockNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A page's identity: the file and the block in it. Every page stores its own `PageId`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct PageId {
    pub relfile: RelFileId,
    pub block: BlockNumber,
}

impl PageId {
    pub fn new(relfile: RelFileId, block: u32) -> PageId {
        PageId {
            relfile,
            block: BlockNumber(block),
        }
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "relfile {} block {}", self.relfile, self.block)
    }
}

/// A tuple's address: block and line-pointer number (1-based, as in PostgreSQL).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const INVALID: Tid = Tid {
        block: u32::MAX,
        offset: 0,
    };
    pub fn new(block: u32, offset: u16) -> Tid {
        Tid { block, offset }
    }
    pub fn is_valid(self) -> bool {
        self.offset != 0
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.block, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_displays_like_postgres() {
        assert_eq!(Lsn(0x1_0000_00A0).to_string(), "1/A0");
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(10).distance_from(Lsn(4)), 6);
        assert_eq!(Lsn(4).distance_from(Lsn(10)), 0);
    }

    #[test]
    #[should_panic(expected = "LSN overflow")]
    fn lsn_overflow_is_an_invariant_failure() {
        let _ = Lsn(u64::MAX).add(1);
    }
}
