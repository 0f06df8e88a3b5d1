//! `page_protection = fpw`: full-page images in WAL (PostgreSQL's `full_page_writes`).
//!
//! The first change of a page after the checkpoint's redo LSN carries an image of the
//! whole page; redo restores that image without reading the page from disk, so a page
//! torn by a crash is overwritten before anything reads it (`BlockAction::RestoreImage`
//! in the decision table). Only the decision lives here: the WAL captures the image
//! (`wal::record::PageImage`, optionally lz4-compressed) and recovery restores it.

use walrus_base::Lsn;

use crate::storage::page;

/// How pages changed by a record are protected against torn writes at this moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePolicy {
    /// Log a full image at the first change of a page after the redo LSN.
    FirstChangeAfterRedo,
    Never,
}

impl ImagePolicy {
    /// Whether this policy ever attaches an image (the WAL keeps the answer in one
    /// flag, read lock-free by every inserter).
    #[inline]
    pub fn logs_images(self) -> bool {
        self == ImagePolicy::FirstChangeAfterRedo
    }
}

/// Whether a change to `page` (already changed, its LSN not yet advanced) must carry a
/// full image, the redo LSN being `redo`: yes when the page was last changed at or before
/// the redo LSN, i.e. this is its first change since. A block the record re-creates
/// (`will_init`) needs none: its redo never reads the page. The caller has checked that
/// the policy logs images at all; the WAL re-checks `redo` under its reserve lock, so
/// the decision is atomic with a checkpoint moving the redo LSN.
#[inline]
pub fn needs_image(will_init: bool, page: &[u8], redo: Lsn) -> bool {
    !will_init && page::lsn(page) <= redo
}
