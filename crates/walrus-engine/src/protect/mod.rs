#![doc = include_str!("README.md")]

pub mod atomic;
pub mod dwb;
pub mod fpw;

pub use fpw::ImagePolicy;

/// `page_protection`: how torn pages are repaired (DESIGN §4). Only the modes built so
/// far are accepted; the others are refused with a clear message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageProtection {
    Fpw,
    /// The batched double-write buffer (`dwb.rs`).
    Dwb,
    None,
    /// The device writes an 8 KiB page atomically (`RWF_ATOMIC` through `O_DIRECT`,
    /// `atomic.rs`): no page can tear, so neither images nor double writes are needed.
    /// Only chosen after the data directory's device said so (`atomic`, `auto`).
    Atomic,
}

/// The modes DESIGN §4 names that are not built yet: `page_protection` refuses them as
/// not supported, not as unknown values (`atomic` and `auto` are decided against the
/// data directory's device when it is opened: `atomic.rs`).
pub const PLANNED_MODES: [&str; 1] = ["standby"];

impl PageProtection {
    pub fn name(self) -> &'static str {
        match self {
            PageProtection::Fpw => "fpw",
            PageProtection::Dwb => "dwb",
            PageProtection::None => "none",
            PageProtection::Atomic => "atomic",
        }
    }

    /// The mode's code in the control file (0 means "not recorded").
    pub fn code(self) -> u32 {
        match self {
            PageProtection::Fpw => 1,
            PageProtection::Dwb => 2,
            PageProtection::None => 3,
            PageProtection::Atomic => 4,
        }
    }

    /// The inverse of [`PageProtection::code`].
    pub fn from_code(code: u32) -> Option<PageProtection> {
        match code {
            1 => Some(PageProtection::Fpw),
            2 => Some(PageProtection::Dwb),
            3 => Some(PageProtection::None),
            4 => Some(PageProtection::Atomic),
            _ => None,
        }
    }

    /// Whether checkpoints may take their redo point from the dirty-page queue
    /// (incremental): not with `fpw`, where an advancing redo point would log an image
    /// for nearly every change.
    pub fn allows_incremental_checkpoint(self) -> bool {
        !matches!(self, PageProtection::Fpw)
    }

    /// The mode called `name` that needs no look at the device (the inverse of
    /// [`PageProtection::name`] but for `atomic`, which [`crate::settings::Settings`]
    /// resolves against the data directory).
    pub fn from_name(name: &str) -> Option<PageProtection> {
        match name {
            "fpw" => Some(PageProtection::Fpw),
            "dwb" => Some(PageProtection::Dwb),
            "none" => Some(PageProtection::None),
            _ => None,
        }
    }

    /// What the WAL does for this mode: only `fpw` logs page images.
    pub fn image_policy(self) -> ImagePolicy {
        match self {
            PageProtection::Fpw => ImagePolicy::FirstChangeAfterRedo,
            PageProtection::Dwb | PageProtection::None | PageProtection::Atomic => {
                ImagePolicy::Never
            }
        }
    }
}

/// What to do with one block reference during redo: the recovery decision table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockAction {
    /// The record carries a full-page image: restore it without reading the page from
    /// disk (which may be torn), whatever the page LSN.
    RestoreImage,
    /// The record re-creates the page from scratch (WILL_INIT): no read needed.
    InitAndApply,
    /// Read the page (checksum verified: a torn page without an image is reported, never
    /// replayed onto) and apply the record if `record end > page LSN`.
    ReadAndApplyIfNewer,
}

/// The decision table (also in `recovery/README.md`; `decision_table_rows` walks every
/// row).
pub fn decide(has_image: bool, will_init: bool) -> BlockAction {
    match (has_image, will_init) {
        (true, _) => BlockAction::RestoreImage,
        (false, true) => BlockAction::InitAndApply,
        (false, false) => BlockAction::ReadAndApplyIfNewer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_table_rows() {
        // Every row of the README's table, in order.
        assert_eq!(decide(true, false), BlockAction::RestoreImage);
        assert_eq!(decide(true, true), BlockAction::RestoreImage);
        assert_eq!(decide(false, true), BlockAction::InitAndApply);
        assert_eq!(decide(false, false), BlockAction::ReadAndApplyIfNewer);
    }
}
