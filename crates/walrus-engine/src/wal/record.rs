//! WAL record format: building, encoding and decoding.
//!
//! ```text
//!  0       4       8          16          24        32    33    34       35     36        40
//!  +-------+-------+----------+-----------+---------+-----+-----+--------+------+---------+
//!  |len u32|crc u32| lsn u64  | prev u64  | xid u64 |rmgr |info |nblocks |flags |main_len |
//!  +-------+-------+----------+-----------+---------+-----+-----+--------+------+---------+
//!  then nblocks block references, then main data; the record is padded to 8 bytes.
//!  block ref: relfile u32 | block u32 | flags u8 | pad u8 | data_len u16
//!             [image_len u16 | hole_off u16 | hole_len u16 | pad u16 | image bytes]
//!             data bytes
//!  (the bracketed image part only when flags has BLOCK_HAS_IMAGE: most block references
//!  carry no image, and 8 bytes on each of them is WAL volume for nothing)
//! ```
//! `len` excludes padding; `crc` is CRC32C over `len` and bytes 8..len. `lsn` is the
//! record's own start, `prev` the start of the record before it: the reader accepts a
//! record only if both match, so a recycled segment's stale records and a stale record
//! left beyond an earlier end of WAL are both rejected (PostgreSQL's xl_prev).

use walrus_base::limits::WAL_RECORD_BYTES_MAX;
use walrus_base::{Lsn, PageId, RelFileId, Xid, PAGE_SIZE};

use crate::storage::page;

pub const HEADER_SIZE: usize = 40;
const BLOCK_HEADER_SIZE: usize = 12;
/// The image part of a block header, present only with `BLOCK_HAS_IMAGE`.
const BLOCK_IMAGE_HEADER_SIZE: usize = 8;

/// Resource managers: each owns its record kinds and their redo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Rmgr {
    Xlog = 1,
    Xact = 2,
    Storage = 3,
    Heap = 4,
    Btree = 5,
    Sequence = 6,
}

impl Rmgr {
    pub fn from_u8(v: u8) -> Option<Rmgr> {
        match v {
            1 => Some(Rmgr::Xlog),
            2 => Some(Rmgr::Xact),
            3 => Some(Rmgr::Storage),
            4 => Some(Rmgr::Heap),
            5 => Some(Rmgr::Btree),
            6 => Some(Rmgr::Sequence),
            _ => None,
        }
    }
}

pub const BLOCK_HAS_IMAGE: u8 = 1;
pub const BLOCK_IMAGE_LZ4: u8 = 2;
/// Redo initialises the page from the record; the old contents are irrelevant.
pub const BLOCK_WILL_INIT: u8 = 4;

/// One page a record changes, with its per-page redo data.
#[derive(Clone, Debug)]
pub struct BlockRef {
    pub page: PageId,
    pub flags: u8,
    pub data: Vec<u8>,
}

/// A record under construction by an access method.
#[derive(Clone, Debug)]
pub struct WalRecord {
    pub rmgr: Rmgr,
    pub info: u8,
    pub xid: Xid,
    pub blocks: Vec<BlockRef>,
    pub main: Vec<u8>,
}

impl WalRecord {
    pub fn new(rmgr: Rmgr, info: u8, xid: Xid) -> WalRecord {
        WalRecord {
            rmgr,
            info,
            xid,
            blocks: Vec::new(),
            main: Vec::new(),
        }
    }

    /// Adds a page reference; returns its index (the order redo sees them in).
    pub fn block(&mut self, page: PageId, will_init: bool, data: Vec<u8>) -> usize {
        let flags = if will_init { BLOCK_WILL_INIT } else { 0 };
        self.blocks.push(BlockRef { page, flags, data });
        self.blocks.len() - 1
    }

    pub fn with_main(mut self, main: Vec<u8>) -> WalRecord {
        self.main = main;
        self
    }
}

/// A full-page image: the page minus its free-space hole, optionally lz4-compressed. An
/// inserter owns its image's bytes (`Vec<u8>`); a decoded record borrows them from the
/// reader's buffer (`&[u8]`).
#[derive(Clone, Debug)]
pub struct PageImage<B = Vec<u8>> {
    pub bytes: B,
    pub compressed: bool,
    pub hole_off: u16,
    pub hole_len: u16,
}

impl PageImage {
    pub fn capture(p: &[u8], compress: bool) -> PageImage {
        let (lower, upper) = (page::lower(p), page::upper(p));
        let (hole_off, hole_len) = if !page::is_new(p)
            && lower >= page::HEADER_SIZE
            && upper >= lower
            && upper <= PAGE_SIZE
        {
            (lower, upper - lower)
        } else {
            (0, 0)
        };
        let mut raw = Vec::with_capacity(PAGE_SIZE - hole_len);
        raw.extend_from_slice(&p[..hole_off]);
        raw.extend_from_slice(&p[hole_off + hole_len..]);
        if compress {
            let c = lz4_flex::block::compress(&raw);
            if c.len() < raw.len() {
                return PageImage {
                    bytes: c,
                    compressed: true,
                    hole_off: hole_off as u16,
                    hole_len: hole_len as u16,
                };
            }
        }
        PageImage {
            bytes: raw,
            compressed: false,
            hole_off: hole_off as u16,
            hole_len: hole_len as u16,
        }
    }
}

impl<B: AsRef<[u8]>> PageImage<B> {
    /// Rebuilds the page into `out` (8 KiB).
    pub fn restore(&self, out: &mut [u8]) -> Result<(), String> {
        let raw_len = PAGE_SIZE - self.hole_len as usize;
        let decompressed;
        let raw: &[u8] = if self.compressed {
            decompressed = lz4_flex::block::decompress(self.bytes.as_ref(), raw_len)
                .map_err(|e| format!("bad lz4 image: {e}"))?;
            &decompressed
        } else {
            self.bytes.as_ref()
        };
        if raw.len() != raw_len || self.hole_off as usize > raw_len {
            return Err(format!("image has {} bytes, expected {raw_len}", raw.len()));
        }
        let (ho, hl) = (self.hole_off as usize, self.hole_len as usize);
        out[..ho].copy_from_slice(&raw[..ho]);
        out[ho..ho + hl].fill(0);
        out[ho + hl..].copy_from_slice(&raw[ho..]);
        Ok(())
    }
}

/// Encodes `rec` with optional images (one per block, `None` = no image).
pub fn encode(rec: &WalRecord, images: &[Option<PageImage>], out: &mut Vec<u8>) {
    assert_eq!(images.len(), rec.blocks.len());
    assert!(rec.blocks.len() <= u8::MAX as usize);
    out.clear();
    out.resize(HEADER_SIZE, 0);
    out[16..24].copy_from_slice(&0u64.to_le_bytes());
    out[24..32].copy_from_slice(&rec.xid.0.to_le_bytes());
    out[32] = rec.rmgr as u8;
    out[33] = rec.info;
    out[34] = rec.blocks.len() as u8;
    out[36..40].copy_from_slice(&(rec.main.len() as u32).to_le_bytes());
    for (b, img) in rec.blocks.iter().zip(images) {
        let mut flags = b.flags & BLOCK_WILL_INIT;
        let (ilen, hoff, hlen) = match img {
            Some(i) => {
                flags |= BLOCK_HAS_IMAGE;
                if i.compressed {
                    flags |= BLOCK_IMAGE_LZ4;
                }
                (i.bytes.len(), i.hole_off, i.hole_len)
            }
            None => (0, 0, 0),
        };
        assert!(b.data.len() <= u16::MAX as usize && ilen <= u16::MAX as usize);
        out.extend_from_slice(&b.page.relfile.0.to_le_bytes());
        out.extend_from_slice(&b.page.block.0.to_le_bytes());
        out.push(flags);
        out.push(0);
        out.extend_from_slice(&(b.data.len() as u16).to_le_bytes());
        if let Some(i) = img {
            out.extend_from_slice(&(ilen as u16).to_le_bytes());
            out.extend_from_slice(&hoff.to_le_bytes());
            out.extend_from_slice(&hlen.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&i.bytes);
        }
        out.extend_from_slice(&b.data);
    }
    out.extend_from_slice(&rec.main);
    assert!(
        out.len() <= WAL_RECORD_BYTES_MAX,
        "WAL record of {} bytes exceeds the limit",
        out.len()
    );
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
}

/// Stamps position fields and the CRC once the record's place in the log is known.
pub fn finish(buf: &mut [u8], lsn: Lsn, prev: Lsn) {
    buf[8..16].copy_from_slice(&lsn.0.to_le_bytes());
    buf[16..24].copy_from_slice(&prev.0.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[0..4]), &buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

pub fn padded_len(len: usize) -> u64 {
    ((len + 7) & !7) as u64
}

/// A decoded block reference; its data and image borrow the bytes it was decoded from.
#[derive(Clone, Debug)]
pub struct DecodedBlock<'a> {
    pub page: PageId,
    pub flags: u8,
    pub image: Option<PageImage<&'a [u8]>>,
    pub data: &'a [u8],
}

impl DecodedBlock<'_> {
    pub fn will_init(&self) -> bool {
        self.flags & BLOCK_WILL_INIT != 0
    }
}

#[derive(Clone, Debug)]
pub struct DecodedRecord<'a> {
    pub lsn: Lsn,
    /// End of the record (unpadded): the page LSN a change by this record sets.
    pub end_lsn: Lsn,
    pub prev: Lsn,
    pub xid: Xid,
    pub rmgr: Rmgr,
    pub info: u8,
    pub blocks: Vec<DecodedBlock<'a>>,
    pub main: &'a [u8],
    pub total_len: usize,
}

/// Length field of a header, if the header is plausible.
pub fn header_len(h: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(h[0..4].try_into().ok()?) as usize;
    (HEADER_SIZE..=WAL_RECORD_BYTES_MAX)
        .contains(&len)
        .then_some(len)
}

/// Decodes a complete record read at `at`, borrowing its payload from `buf` (so neither
/// replay nor the end-of-WAL scan copies record bodies). `Err` means "not a valid record
/// here" (the reader treats it as the end of WAL); it never panics on arbitrary bytes.
pub fn decode(buf: &[u8], at: Lsn) -> Result<DecodedRecord<'_>, String> {
    if buf.len() < HEADER_SIZE {
        return Err("short header".into());
    }
    let len = header_len(buf).ok_or("bad length")?;
    if buf.len() < len {
        return Err("short record".into());
    }
    let buf = &buf[..len];
    let crc = u32::from_le_bytes(buf[4..8].try_into().map_err(|_| "crc")?);
    if crc != crc32c::crc32c_append(crc32c::crc32c(&buf[0..4]), &buf[8..]) {
        return Err("checksum mismatch".into());
    }
    let u64at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    let lsn = Lsn(u64at(8));
    if lsn != at {
        return Err(format!("record claims {lsn}, read at {at}"));
    }
    let rmgr = Rmgr::from_u8(buf[32]).ok_or("unknown rmgr")?;
    let nblocks = buf[34] as usize;
    let main_len = u32::from_le_bytes(buf[36..40].try_into().expect("4")) as usize;
    let mut pos = HEADER_SIZE;
    let mut blocks = Vec::with_capacity(nblocks);
    for _ in 0..nblocks {
        let h = buf
            .get(pos..pos + BLOCK_HEADER_SIZE)
            .ok_or("truncated block header")?;
        let u16at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let relfile = u32::from_le_bytes(h[0..4].try_into().expect("4"));
        let block = u32::from_le_bytes(h[4..8].try_into().expect("4"));
        let flags = h[8];
        let data_len = u16at(10) as usize;
        pos += BLOCK_HEADER_SIZE;
        let image = if flags & BLOCK_HAS_IMAGE != 0 {
            let h = buf
                .get(pos..pos + BLOCK_IMAGE_HEADER_SIZE)
                .ok_or("truncated image header")?;
            let u16at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
            let image_len = u16at(0) as usize;
            let (hole_off, hole_len) = (u16at(2), u16at(4));
            pos += BLOCK_IMAGE_HEADER_SIZE;
            let bytes = buf.get(pos..pos + image_len).ok_or("truncated image")?;
            pos += image_len;
            if hole_off as usize + hole_len as usize > PAGE_SIZE {
                return Err("bad image hole".into());
            }
            Some(PageImage {
                bytes,
                compressed: flags & BLOCK_IMAGE_LZ4 != 0,
                hole_off,
                hole_len,
            })
        } else {
            None
        };
        let data = buf.get(pos..pos + data_len).ok_or("truncated block data")?;
        pos += data_len;
        blocks.push(DecodedBlock {
            page: PageId::new(RelFileId(relfile), block),
            flags,
            image,
            data,
        });
    }
    let main = buf.get(pos..pos + main_len).ok_or("truncated main data")?;
    if pos + main_len != len {
        return Err("length mismatch".into());
    }
    Ok(DecodedRecord {
        lsn,
        end_lsn: lsn.add(len as u64),
        prev: Lsn(u64at(16)),
        xid: Xid(u64at(24)),
        rmgr,
        info: buf[33],
        blocks,
        main,
        total_len: len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_decode_roundtrip(
            info in any::<u8>(), xid in 1u64..u64::MAX,
            blocks in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..300),
                proptest::option::of((proptest::collection::vec(any::<u8>(), 0..600),
                    0u16..4000, 0u16..4000, any::<bool>()))), 0..4),
            main in proptest::collection::vec(any::<u8>(), 0..500),
            at in 0u64..(1 << 40),
        ) {
            let at = at & !7;
            let mut rec = WalRecord::new(Rmgr::Heap, info, Xid(xid)).with_main(main.clone());
            for (r, b, init, d, _) in &blocks {
                rec.block(PageId::new(RelFileId(*r), *b), *init, d.clone());
            }
            // Some blocks carry an image (only those have the image part of the header).
            let images: Vec<Option<PageImage>> = blocks
                .iter()
                .map(|(.., img)| img.clone().map(|(bytes, hole_off, hole_len, compressed)| {
                    PageImage { bytes, compressed, hole_off, hole_len }
                }))
                .collect();
            let mut buf = Vec::new();
            encode(&rec, &images, &mut buf);
            finish(&mut buf, Lsn(at), Lsn(at.saturating_sub(64)));
            let d = decode(&buf, Lsn(at)).unwrap();
            prop_assert_eq!(d.info, info);
            prop_assert_eq!(d.xid, Xid(xid));
            prop_assert_eq!(d.main, &main[..]);
            prop_assert_eq!(d.blocks.len(), blocks.len());
            for ((db, (r, b, init, data, _)), img) in d.blocks.iter().zip(&blocks).zip(&images) {
                prop_assert_eq!(db.page, PageId::new(RelFileId(*r), *b));
                prop_assert_eq!(db.will_init(), *init);
                prop_assert_eq!(db.data, &data[..]);
                prop_assert_eq!(db.image.as_ref().map(|i| (i.bytes, i.compressed, i.hole_off, i.hole_len)),
                    img.as_ref().map(|i| (&i.bytes[..], i.compressed, i.hole_off, i.hole_len)));
            }
            // Read at the wrong place: rejected by the self-LSN.
            prop_assert!(decode(&buf, Lsn(at + 8)).is_err());
        }

        #[test]
        fn any_bit_flip_is_rejected(main in proptest::collection::vec(any::<u8>(), 1..200), bit in any::<usize>()) {
            let rec = WalRecord::new(Rmgr::Xact, 1, Xid(5)).with_main(main);
            let mut buf = Vec::new();
            encode(&rec, &[], &mut buf);
            finish(&mut buf, Lsn(4096), Lsn(0));
            let bit = bit % (buf.len() * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&buf, Lsn(4096)).is_err());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = decode(&bytes, Lsn(0));
        }
    }

    #[test]
    fn page_image_roundtrip_with_hole_and_lz4() {
        let id = PageId::new(RelFileId(3), 1);
        let mut p = vec![0u8; PAGE_SIZE];
        page::init(&mut p, id, page::PageKind::Heap, 0);
        page::add_item(
            &mut p,
            &[7u8; 300],
            page::Placement::Append {
                reuse_unused: false,
            },
        )
        .unwrap();
        for compress in [false, true] {
            let img = PageImage::capture(&p, compress);
            assert!(img.bytes.len() < 1000, "hole removed: {}", img.bytes.len());
            let mut out = vec![0xAAu8; PAGE_SIZE];
            img.restore(&mut out).unwrap();
            assert_eq!(out, p);
        }
    }
}
