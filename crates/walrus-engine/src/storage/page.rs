//! The 8 KiB page: header, checksum, and the slotted-page item area shared by heap and
//! B-tree pages (DESIGN §2).
//!
//! ```text
//!  0        8          12        16       20    21     22      24      26        28   32
//!  +--------+----------+---------+--------+-----+------+-------+-------+---------+----+
//!  | lsn u64| crc u32  | relfile | block  |kind |flags |lower  |upper  |special  |pad |
//!  +--------+----------+---------+--------+-----+------+-------+-------+---------+----+
//!  32: prune_xid u64 (heap) | line pointers (4 bytes each) from 40 grow up to `lower`
//!  ... free space ...  items grow down from `special` to `upper` | special area
//! ```
//!
//! Invariants: `HEADER_SIZE <= lower <= upper <= special <= PAGE_SIZE`; a page is either
//! all zeros (a new page, legal after a crash during extension) or carries its own
//! relfile and block and a CRC32C seeded by them, so a misdirected write fails too.
//! All multi-byte fields are little-endian.

use std::cmp::Ordering;

use walrus_base::{Lsn, PageId, RelFileId, PAGE_SIZE};

pub const HEADER_SIZE: usize = 40;
const LP_SIZE: usize = 4;

/// What a page holds. Stored in the header so tools and checks can tell pages apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    New = 0,
    Heap = 1,
    BtreeMeta = 2,
    BtreeNode = 3,
    /// A sequence's one page (`access/sequence.rs`).
    Sequence = 4,
}

impl PageKind {
    pub fn from_u8(v: u8) -> Option<PageKind> {
        match v {
            0 => Some(PageKind::New),
            1 => Some(PageKind::Heap),
            2 => Some(PageKind::BtreeMeta),
            3 => Some(PageKind::BtreeNode),
            4 => Some(PageKind::Sequence),
            _ => None,
        }
    }
}

/// Line pointer states (PostgreSQL's LP_UNUSED/NORMAL/REDIRECT/DEAD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LpState {
    Unused,
    Normal,
    /// Points at another line pointer on the same page (HOT chain root after pruning).
    Redirect,
    /// The tuple is gone but index entries may still point here; only vacuum frees it.
    Dead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinePointer {
    pub state: LpState,
    /// Byte offset of the item, or the target line-pointer number for a redirect.
    pub off: u16,
    pub len: u16,
}

/// Result of verifying a page read from disk.
#[derive(Debug, PartialEq, Eq)]
pub enum PageCheck {
    Valid,
    /// All zeros: a block allocated but never written (legal after a crash).
    New,
    ChecksumMismatch {
        stored: u32,
        computed: u32,
    },
    Misdirected {
        found: PageId,
    },
}

/// A page-sized, 4 KiB-aligned buffer (aligned so `O_DIRECT` can use it).
#[repr(C, align(4096))]
#[derive(Clone)]
pub struct PageBuf(pub [u8; PAGE_SIZE]);

impl PageBuf {
    pub fn zeroed() -> Box<PageBuf> {
        Box::new(PageBuf([0u8; PAGE_SIZE]))
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8; PAGE_SIZE];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

#[inline]
fn rd16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}
fn wr16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn rd32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes"))
}
fn wr32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn rd64(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}
fn wr64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn lsn(p: &[u8]) -> Lsn {
    Lsn(rd64(p, 0))
}

/// Sets the page LSN. It never moves backwards: a page reflects a prefix of the WAL.
pub fn set_lsn(p: &mut [u8], lsn: Lsn) {
    let old = rd64(p, 0);
    assert!(
        lsn.0 >= old,
        "page LSN moving backwards: {} -> {}",
        Lsn(old),
        lsn
    );
    wr64(p, 0, lsn.0);
}

pub fn stored_checksum(p: &[u8]) -> u32 {
    rd32(p, 8)
}
pub fn page_id(p: &[u8]) -> PageId {
    PageId::new(RelFileId(rd32(p, 12)), rd32(p, 16))
}
pub fn kind(p: &[u8]) -> Option<PageKind> {
    PageKind::from_u8(p[20])
}
pub fn flags(p: &[u8]) -> u8 {
    p[21]
}
pub fn set_flags(p: &mut [u8], f: u8) {
    p[21] = f;
}
#[inline]
pub fn lower(p: &[u8]) -> usize {
    rd16(p, 22) as usize
}
pub fn upper(p: &[u8]) -> usize {
    rd16(p, 24) as usize
}
pub fn special_offset(p: &[u8]) -> usize {
    rd16(p, 26) as usize
}
pub fn prune_xid(p: &[u8]) -> u64 {
    rd64(p, 32)
}
pub fn set_prune_xid(p: &mut [u8], xid: u64) {
    wr64(p, 32, xid);
}

/// Whether the page is all zeros (never formatted). Any formatted page has a non-zero
/// special-space offset, which answers at once for them.
#[inline]
pub fn is_new(p: &[u8]) -> bool {
    if p.len() > 25 && (p[24] | p[25]) != 0 {
        return false;
    }
    p.iter().all(|&b| b == 0)
}

/// Formats an empty page. The LSN is kept (a re-initialised page must not go back in time).
pub fn init(p: &mut [u8], id: PageId, kind: PageKind, special_size: usize) {
    assert!(special_size <= PAGE_SIZE - HEADER_SIZE && special_size.is_multiple_of(8));
    let keep_lsn = rd64(p, 0);
    p.fill(0);
    wr64(p, 0, keep_lsn);
    wr32(p, 12, id.relfile.0);
    wr32(p, 16, id.block.0);
    p[20] = kind as u8;
    let special = PAGE_SIZE - special_size;
    wr16(p, 22, HEADER_SIZE as u16);
    wr16(p, 24, special as u16);
    wr16(p, 26, special as u16);
}

pub fn special(p: &[u8]) -> &[u8] {
    &p[special_offset(p)..]
}
pub fn special_mut(p: &mut [u8]) -> &mut [u8] {
    let s = special_offset(p);
    &mut p[s..]
}

/// CRC32C of the page with the checksum field taken as zero, seeded by relfile and block.
pub fn compute_checksum(p: &[u8], id: PageId) -> u32 {
    let mut seed = [0u8; 8];
    seed[..4].copy_from_slice(&id.relfile.0.to_le_bytes());
    seed[4..].copy_from_slice(&id.block.0.to_le_bytes());
    let c = crc32c::crc32c(&seed);
    let c = crc32c::crc32c_append(c, &p[..8]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &p[12..])
}

/// Stamps identity and checksum right before a page goes to disk (pair assertion: the
/// page must already claim to be `id`).
pub fn seal(p: &mut [u8], id: PageId) {
    assert_eq!(page_id(p), id, "writing a page under the wrong identity");
    let c = compute_checksum(p, id);
    wr32(p, 8, c);
}

/// Verifies a page just read from disk as block `id`.
pub fn verify(p: &[u8], id: PageId) -> PageCheck {
    if is_new(p) {
        return PageCheck::New;
    }
    let stored = stored_checksum(p);
    let computed = compute_checksum(p, id);
    if stored != computed {
        return PageCheck::ChecksumMismatch { stored, computed };
    }
    let found = page_id(p);
    if found != id {
        return PageCheck::Misdirected { found };
    }
    if kind(p).is_none()
        || lower(p) < HEADER_SIZE
        || lower(p) > upper(p)
        || upper(p) > special_offset(p)
        || special_offset(p) > PAGE_SIZE
    {
        // The CRC matched, so this is a page walrus itself wrote wrongly: report it the
        // same way as damage rather than trusting the header.
        return PageCheck::ChecksumMismatch {
            stored,
            computed: !stored,
        };
    }
    PageCheck::Valid
}

// ---- slotted-page item area -------------------------------------------------------------

/// Number of line pointers (the highest offset number in use or unused).
#[inline]
pub fn item_count(p: &[u8]) -> u16 {
    ((lower(p) - HEADER_SIZE) / LP_SIZE) as u16
}

#[inline]
fn lp_at(n: u16) -> usize {
    assert!(n >= 1, "offset numbers start at 1");
    HEADER_SIZE + (n as usize - 1) * LP_SIZE
}

#[inline]
pub fn line_pointer(p: &[u8], n: u16) -> LinePointer {
    let raw_off = rd16(p, lp_at(n));
    let len = rd16(p, lp_at(n) + 2);
    let state = match raw_off >> 14 {
        0 => LpState::Unused,
        1 => LpState::Normal,
        2 => LpState::Redirect,
        _ => LpState::Dead,
    };
    LinePointer {
        state,
        off: raw_off & 0x3FFF,
        len,
    }
}

pub fn set_line_pointer(p: &mut [u8], n: u16, lp: LinePointer) {
    assert!(lp.off < 0x4000);
    let st: u16 = match lp.state {
        LpState::Unused => 0,
        LpState::Normal => 1,
        LpState::Redirect => 2,
        LpState::Dead => 3,
    };
    let at = lp_at(n);
    wr16(p, at, lp.off | (st << 14));
    wr16(p, at + 2, lp.len);
}

/// Marks line pointer `n` redirected (to `target`), dead or unused, dropping its item.
pub fn set_lp_state(p: &mut [u8], n: u16, state: LpState, target: u16) {
    assert!(
        state != LpState::Normal,
        "a normal line pointer needs an item"
    );
    set_line_pointer(
        p,
        n,
        LinePointer {
            state,
            off: target,
            len: 0,
        },
    );
}

/// The bytes of a normal item.
#[inline]
pub fn item(p: &[u8], n: u16) -> &[u8] {
    let lp = line_pointer(p, n);
    debug_assert_eq!(lp.state, LpState::Normal);
    &p[lp.off as usize..lp.off as usize + lp.len as usize]
}

pub fn item_mut(p: &mut [u8], n: u16) -> &mut [u8] {
    let lp = line_pointer(p, n);
    debug_assert_eq!(lp.state, LpState::Normal);
    &mut p[lp.off as usize..lp.off as usize + lp.len as usize]
}

/// Free bytes between the line-pointer array and the item area.
pub fn free_space(p: &[u8]) -> usize {
    upper(p) - lower(p)
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Whether an item of `len` bytes fits, counting a new line pointer.
pub fn fits(p: &[u8], len: usize) -> bool {
    free_space(p) >= align8(len) + LP_SIZE
}

/// Adds an item. `Append` uses a new line pointer at the end (or the first unused one when
/// `reuse_unused`); `Insert(n)` shifts pointers `n..` up by one (B-tree order);
/// `Exactly(n)` places it at offset `n`, which must be unused or one past the end (redo
/// and heap reuse of a freed slot). Returns the offset number, or None when full.
#[derive(Clone, Copy, Debug)]
pub enum Placement {
    Append { reuse_unused: bool },
    Insert(u16),
    Exactly(u16),
}

pub fn add_item(p: &mut [u8], data: &[u8], how: Placement) -> Option<u16> {
    let count = item_count(p);
    let (n, new_lp) = match how {
        Placement::Append { reuse_unused } => {
            let free = if reuse_unused {
                (1..=count).find(|&i| line_pointer(p, i).state == LpState::Unused)
            } else {
                None
            };
            match free {
                Some(i) => (i, false),
                None => (count + 1, true),
            }
        }
        Placement::Insert(n) => {
            assert!(
                n >= 1 && n <= count + 1,
                "insert position {n} outside 1..={}",
                count + 1
            );
            (n, true)
        }
        Placement::Exactly(n) => {
            assert!(
                n >= 1 && n <= count + 1,
                "exact position {n} outside 1..={}",
                count + 1
            );
            if n <= count {
                assert_eq!(line_pointer(p, n).state, LpState::Unused, "slot {n} in use");
                (n, false)
            } else {
                (n, true)
            }
        }
    };
    let need = align8(data.len()) + if new_lp { LP_SIZE } else { 0 };
    if free_space(p) < need {
        return None;
    }
    let new_upper = upper(p) - align8(data.len());
    p[new_upper..new_upper + data.len()].copy_from_slice(data);
    wr16(p, 24, new_upper as u16);
    if new_lp {
        let lower_now = lower(p);
        wr16(p, 22, (lower_now + LP_SIZE) as u16);
        if let Placement::Insert(n) = how {
            // Shift line pointers n..=count up by one slot.
            let from = lp_at(n);
            p.copy_within(from..lower_now, from + LP_SIZE);
        }
    }
    set_line_pointer(
        p,
        n,
        LinePointer {
            state: LpState::Normal,
            off: new_upper as u16,
            len: data.len() as u16,
        },
    );
    Some(n)
}

/// Removes line pointer `n` entirely, shifting later ones down (B-tree deletion). The
/// item bytes become garbage reclaimed by the next [`compact`].
pub fn remove_item_shift(p: &mut [u8], n: u16) {
    let count = item_count(p);
    assert!(n >= 1 && n <= count);
    let at = lp_at(n);
    let lower_now = lower(p);
    p.copy_within(at + LP_SIZE..lower_now, at);
    wr16(p, 22, (lower_now - LP_SIZE) as u16);
}

/// Rewrites the item area so all free space is contiguous. Line-pointer numbers do not
/// change, so TIDs stay valid. Trailing unused line pointers are truncated.
pub fn compact(p: &mut [u8]) {
    let mut count = item_count(p);
    while count > 0 && line_pointer(p, count).state == LpState::Unused {
        count -= 1;
    }
    wr16(p, 22, (HEADER_SIZE + count as usize * LP_SIZE) as u16);
    // Items are read from one copy of the page while they are rewritten in place
    // (PostgreSQL's compactify_tuples does the same). Copying each item into its own Vec
    // made every prune, and every PRUNE replayed, one allocation per live tuple: a sixth
    // of recovery's time.
    let mut scratch = [0u8; PAGE_SIZE];
    scratch.copy_from_slice(&p[..PAGE_SIZE]);
    let mut top = special_offset(p);
    for n in 1..=count {
        if line_pointer(p, n).state != LpState::Normal {
            continue;
        }
        let data = item(&scratch, n);
        top -= align8(data.len());
        p[top..top + data.len()].copy_from_slice(data);
        set_line_pointer(
            p,
            n,
            LinePointer {
                state: LpState::Normal,
                off: top as u16,
                len: data.len() as u16,
            },
        );
    }
    wr16(p, 24, top as u16);
}

/// Bytes a [`compact`] would make free (ignores reclaimable unused line pointers).
pub fn free_space_after_compact(p: &[u8]) -> usize {
    let count = item_count(p);
    let used: usize = (1..=count)
        .map(|n| line_pointer(p, n))
        .filter(|lp| lp.state == LpState::Normal)
        .map(|lp| align8(lp.len as usize))
        .sum();
    special_offset(p) - lower(p) - used
}

/// Binary search over items `1..=count` with a caller comparison; returns the first
/// offset whose item is not less than the probe (`count + 1` if all are less).
pub fn lower_bound(p: &[u8], first: u16, mut cmp: impl FnMut(&[u8]) -> Ordering) -> u16 {
    let (mut lo, mut hi) = (first, item_count(p) + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if cmp(item(p, mid)) == Ordering::Less {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fresh() -> Box<PageBuf> {
        let mut p = PageBuf::zeroed();
        init(&mut p[..], PageId::new(RelFileId(7), 3), PageKind::Heap, 0);
        p
    }

    #[test]
    fn checksum_detects_flip_and_misdirection() {
        let mut p = fresh();
        add_item(
            &mut p[..],
            b"hello",
            Placement::Append {
                reuse_unused: false,
            },
        )
        .unwrap();
        let id = PageId::new(RelFileId(7), 3);
        seal(&mut p[..], id);
        assert_eq!(verify(&p[..], id), PageCheck::Valid);
        // Same bytes read as another block: the seed differs, so the checksum fails.
        assert!(matches!(
            verify(&p[..], PageId::new(RelFileId(7), 4)),
            PageCheck::ChecksumMismatch { .. }
        ));
        p[5000] ^= 0x10;
        assert!(matches!(
            verify(&p[..], id),
            PageCheck::ChecksumMismatch { .. }
        ));
        assert_eq!(verify(&[0u8; PAGE_SIZE], id), PageCheck::New);
    }

    #[test]
    fn items_insert_shift_and_compact_keep_offsets() {
        let mut p = fresh();
        let a = add_item(
            &mut p[..],
            b"aaaa",
            Placement::Append {
                reuse_unused: false,
            },
        );
        let c = add_item(
            &mut p[..],
            b"cccc",
            Placement::Append {
                reuse_unused: false,
            },
        );
        assert_eq!((a, c), (Some(1), Some(2)));
        add_item(&mut p[..], b"bb", Placement::Insert(2)).unwrap();
        assert_eq!(item(&p[..], 1), b"aaaa");
        assert_eq!(item(&p[..], 2), b"bb");
        assert_eq!(item(&p[..], 3), b"cccc");
        assert_eq!(lower_bound(&p[..], 1, |it| it.cmp(b"b".as_slice())), 2);
        set_line_pointer(
            &mut p[..],
            2,
            LinePointer {
                state: LpState::Dead,
                off: 0,
                len: 0,
            },
        );
        let before = free_space(&p[..]);
        compact(&mut p[..]);
        assert!(free_space(&p[..]) > before);
        assert_eq!(item(&p[..], 3), b"cccc");
    }

    proptest! {
        /// Compaction keeps every live item's bytes under its line-pointer number, frees
        /// at least what `free_space_after_compact` promised, and leaves the items packed
        /// below the special space without overlap.
        #[test]
        fn compact_keeps_live_items_and_frees_the_promised_space(
            items in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 1..300), 0u8..3), 1..40),
        ) {
            let mut p = fresh();
            let mut kept = Vec::new();
            for (data, fate) in &items {
                let Some(n) = add_item(&mut p[..], data, Placement::Append { reuse_unused: false })
                else { break };
                match fate {
                    0 => kept.push((n, data.clone())),
                    1 => set_line_pointer(&mut p[..], n, LinePointer { state: LpState::Dead, off: 0, len: 0 }),
                    _ => set_line_pointer(&mut p[..], n, LinePointer { state: LpState::Unused, off: 0, len: 0 }),
                }
            }
            let promised = free_space_after_compact(&p[..]);
            compact(&mut p[..]);
            for (n, data) in &kept {
                prop_assert_eq!(item(&p[..], *n), &data[..]);
            }
            let used: usize = kept.iter().map(|(_, d)| align8(d.len())).sum();
            prop_assert_eq!(upper(&p[..]), special_offset(&p[..]) - used);
            prop_assert!(special_offset(&p[..]) - lower(&p[..]) - used >= promised);
        }
    }

    #[test]
    fn page_fills_up_and_refuses() {
        let mut p = fresh();
        let mut n = 0;
        while add_item(
            &mut p[..],
            &[1u8; 100],
            Placement::Append {
                reuse_unused: false,
            },
        )
        .is_some()
        {
            n += 1;
        }
        assert_eq!(n, (PAGE_SIZE - HEADER_SIZE) / (104 + 4));
        assert!(!fits(&p[..], 100));
    }

    #[test]
    #[should_panic(expected = "page LSN moving backwards")]
    fn lsn_never_goes_back() {
        let mut p = fresh();
        set_lsn(&mut p[..], Lsn(100));
        set_lsn(&mut p[..], Lsn(99));
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_detected(
            items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..200), 0..30),
            bit in 0usize..(PAGE_SIZE * 8)
        ) {
            let id = PageId::new(RelFileId(42), 9);
            let mut p = PageBuf::zeroed();
            init(&mut p[..], id, PageKind::Heap, 16);
            for it in &items {
                let _ = add_item(&mut p[..], it, Placement::Append { reuse_unused: false });
            }
            set_lsn(&mut p[..], Lsn(12345));
            seal(&mut p[..], id);
            prop_assert_eq!(verify(&p[..], id), PageCheck::Valid);
            p[bit / 8] ^= 1 << (bit % 8);
            prop_assert_ne!(verify(&p[..], id), PageCheck::Valid);
        }

        #[test]
        fn verify_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), PAGE_SIZE)) {
            let _ = verify(&bytes, PageId::new(RelFileId(1), 1));
        }
    }
}
