//! Sequences: a relation file of one page that holds a sequence's state, changed outside
//! transactions (a value handed out is never given back, whatever the transaction
//! that asked for it does), WAL-logged ahead in batches.
//!
//! The page holds only what WAL put there: `last_value` and `is_called` as of the last
//! `INFO_SET` record, which reinitialises the page (`BLOCK_WILL_INIT`), so redo needs
//! no image and a torn write is repaired by replaying it. Values are handed out from a
//! counter in memory ([`SeqCounter`]); when it runs out, one record logs the state
//! [`SEQ_LOG_VALS`] values ahead, and the counter may hand out up to there. A crash
//! loses the counter and recovery restores the logged state, so values may be skipped
//! (at most one batch) but never repeated — PostgreSQL's `SEQ_LOG_VALS` scheme. Unlike
//! PostgreSQL's, the page never carries changes that were not logged: with incremental
//! checkpoints a page dirtied without WAL could have a recovery-time target move the
//! redo point past its last record before it is written.
//!
//! A value is returned only once the record that covers it is durable (the caller
//! flushes to [`SeqCounter::covered_by`]), so an answer a client saw survives a crash
//! even in a transaction that wrote nothing else.
//!
//! Layout: the page's special area is `last_value i64 | is_called u8 | 7 bytes pad`.

use walrus_base::{Lsn, PageId, Xid};

use crate::storage::page::{self, PageKind};
use crate::wal::record::{Rmgr, WalRecord};

/// The record that sets a sequence page.
pub const INFO_SET: u8 = 1;

/// Values logged ahead of the last one handed out (PostgreSQL's `SEQ_LOG_VALS`).
pub const SEQ_LOG_VALS: i64 = 32;

const SPECIAL: usize = 16;
const STATE_LEN: usize = 9;

/// What a sequence page holds: the last value handed out or logged, and whether
/// `nextval` has been called since the value was set (else it returns `last_value`
/// itself: a fresh sequence's first value is its START).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqPageState {
    pub last_value: i64,
    pub is_called: bool,
}

impl SeqPageState {
    fn encode(&self) -> Vec<u8> {
        let mut d = Vec::with_capacity(STATE_LEN);
        d.extend_from_slice(&self.last_value.to_le_bytes());
        d.push(self.is_called as u8);
        d
    }

    fn decode(d: &[u8]) -> Option<SeqPageState> {
        if d.len() < STATE_LEN {
            return None;
        }
        Some(SeqPageState {
            last_value: i64::from_le_bytes(d[..8].try_into().ok()?),
            is_called: d[8] != 0,
        })
    }
}

/// Formats `p` as sequence page `id` holding `state`.
pub fn init_page(p: &mut [u8], id: PageId, state: SeqPageState) {
    page::init(p, id, PageKind::Sequence, SPECIAL);
    page::special_mut(p)[..STATE_LEN].copy_from_slice(&state.encode());
}

/// The state a sequence page holds (`None`: not a sequence page).
pub fn read_page(p: &[u8]) -> Option<SeqPageState> {
    if page::kind(p) != Some(PageKind::Sequence) {
        return None;
    }
    SeqPageState::decode(page::special(p))
}

/// The record that sets page `id` to `state` (redo reinitialises the page from it).
pub fn set_record(id: PageId, state: SeqPageState) -> WalRecord {
    let mut rec = WalRecord::new(Rmgr::Sequence, INFO_SET, Xid::INVALID);
    rec.block(id, true, state.encode());
    rec
}

/// Page-level redo of a sequence record (pure: no pool access).
pub fn redo_block(
    info: u8,
    block_index: usize,
    data: &[u8],
    page_bytes: &mut [u8],
    id: PageId,
) -> Result<(), String> {
    match (info, block_index) {
        (INFO_SET, 0) => {
            let state = SeqPageState::decode(data).ok_or("short sequence record")?;
            init_page(page_bytes, id, state);
            Ok(())
        }
        _ => Err(format!(
            "unknown sequence record info {info} block {block_index}"
        )),
    }
}

/// A sequence's options as `nextval` needs them.
#[derive(Clone, Copy, Debug)]
pub struct SeqBounds {
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub cycle: bool,
}

/// Why `nextval` cannot give a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqLimit {
    /// Reached MAXVALUE (increment > 0) without CYCLE.
    Max(i64),
    /// Reached MINVALUE (increment < 0) without CYCLE.
    Min(i64),
}

impl SeqBounds {
    /// The value after `v` (wrapping around with CYCLE).
    pub fn step(&self, v: i64) -> Result<i64, SeqLimit> {
        let next = v.checked_add(self.increment);
        if self.increment > 0 {
            match next {
                Some(n) if n <= self.max => Ok(n),
                _ if self.cycle => Ok(self.min),
                _ => Err(SeqLimit::Max(self.max)),
            }
        } else {
            match next {
                Some(n) if n >= self.min => Ok(n),
                _ if self.cycle => Ok(self.max),
                _ => Err(SeqLimit::Min(self.min)),
            }
        }
    }
}

/// A sequence's values in memory: the page's state plus how many values past it are
/// already covered by WAL.
#[derive(Debug, Default)]
pub struct SeqCounter {
    /// `None` until read from the page.
    pub state: Option<SeqPageState>,
    /// Values `nextval` may still hand out without logging.
    pub logged_ahead: i64,
    /// End of the last record written for this sequence: a value from its batch may be
    /// returned only once the WAL is durable up to here.
    pub covered_by: Lsn,
}

impl SeqCounter {
    /// The next value, and the state to log first when the logged batch is used up
    /// (the caller logs it, sets `covered_by`, and only then lets the value out).
    pub fn next(&mut self, bounds: &SeqBounds) -> Result<(i64, Option<SeqPageState>), SeqLimit> {
        let state = self
            .state
            .expect("sequence counter read from its page first");
        let value = if state.is_called {
            bounds.step(state.last_value)?
        } else {
            state.last_value
        };
        self.state = Some(SeqPageState {
            last_value: value,
            is_called: true,
        });
        if self.logged_ahead > 0 {
            self.logged_ahead -= 1;
            return Ok((value, None));
        }
        // Log up to SEQ_LOG_VALS values ahead, stopping at a bound (without wrapping:
        // a cycle starts a new batch).
        let mut ahead = value;
        let mut n = 0;
        while n < SEQ_LOG_VALS {
            let step = ahead.checked_add(bounds.increment);
            match step {
                Some(s)
                    if (bounds.increment > 0 && s <= bounds.max)
                        || (bounds.increment < 0 && s >= bounds.min) =>
                {
                    ahead = s;
                    n += 1;
                }
                _ => break,
            }
        }
        self.logged_ahead = n;
        Ok((
            value,
            Some(SeqPageState {
                last_value: ahead,
                is_called: true,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walrus_base::{RelFileId, PAGE_SIZE};

    fn bounds(increment: i64, min: i64, max: i64, cycle: bool) -> SeqBounds {
        SeqBounds {
            increment,
            min,
            max,
            cycle,
        }
    }

    #[test]
    fn page_roundtrips_through_redo() {
        let id = PageId::new(RelFileId(9), 0);
        let state = SeqPageState {
            last_value: -42,
            is_called: true,
        };
        let rec = set_record(id, state);
        let mut p = vec![0u8; PAGE_SIZE];
        redo_block(INFO_SET, 0, &rec.blocks[0].data, &mut p, id).unwrap();
        assert_eq!(read_page(&p), Some(state));
        assert!(redo_block(INFO_SET, 0, &[1, 2], &mut p, id).is_err());
    }

    /// Every value handed out is at or below the last logged one, and a new batch is
    /// logged exactly when the old one is used up.
    #[test]
    fn values_never_pass_the_logged_state() {
        let b = bounds(3, 1, i64::MAX, false);
        let mut c = SeqCounter {
            state: Some(SeqPageState {
                last_value: 1,
                is_called: false,
            }),
            ..Default::default()
        };
        let mut logged = None;
        let mut logs = 0;
        for i in 0..100 {
            let (v, log) = c.next(&b).unwrap();
            assert_eq!(v, 1 + 3 * i);
            if let Some(s) = log {
                logs += 1;
                logged = Some(s.last_value);
            }
            assert!(v <= logged.unwrap());
        }
        assert_eq!(logs, 100 / (SEQ_LOG_VALS as usize + 1) + 1);
    }

    #[test]
    fn bounds_stop_or_cycle() {
        let mut c = SeqCounter {
            state: Some(SeqPageState {
                last_value: 2,
                is_called: true,
            }),
            ..Default::default()
        };
        assert_eq!(c.next(&bounds(1, 1, 3, false)).unwrap().0, 3);
        assert_eq!(c.next(&bounds(1, 1, 3, false)), Err(SeqLimit::Max(3)));
        assert_eq!(c.next(&bounds(1, 1, 3, true)).unwrap().0, 1);
        let mut d = SeqCounter {
            state: Some(SeqPageState {
                last_value: i64::MIN + 1,
                is_called: true,
            }),
            ..Default::default()
        };
        assert_eq!(
            d.next(&bounds(-1, i64::MIN, -1, false)).unwrap().0,
            i64::MIN
        );
        assert_eq!(
            d.next(&bounds(-1, i64::MIN, -1, false)),
            Err(SeqLimit::Min(i64::MIN))
        );
    }
}
