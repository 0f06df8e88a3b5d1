//! Sequences: CREATE / ALTER / DROP SEQUENCE in the catalog (transactional, like any
//! DDL), and `nextval` / `setval` on the sequence's page, which are not: a value handed
//! out stays handed out whether the transaction that asked commits or not. How values
//! are logged ahead and why none repeats after a crash: `access/sequence.rs`.

use std::sync::Arc;

use parking_lot::Mutex;
use walrus_base::{PageId, RelFileId};

use super::{Engine, Inner, Transaction};
use crate::access::sequence::{self, SeqBounds, SeqCounter, SeqLimit, SeqPageState};
use crate::catalog::{self, SequenceDef};
use crate::error::{Error, Result};

fn page_of(def: &SequenceDef) -> PageId {
    PageId::new(def.relfile, 0)
}

fn bounds(def: &SequenceDef) -> SeqBounds {
    SeqBounds {
        increment: def.increment,
        min: def.min,
        max: def.max,
        cycle: def.cycle,
    }
}

impl Transaction {
    /// CREATE SEQUENCE (`def.relfile` is assigned here): a relation file whose page
    /// starts at `def.start`, not yet called.
    pub fn create_sequence(&mut self, def: SequenceDef) -> Result<Arc<SequenceDef>> {
        self.before_write()?;
        let inner = self.inner.clone();
        let _ddl = inner.ddl_lock.lock();
        if self.catalog()?.relation_exists(&def.name) {
            return Err(Error::DuplicateTable(def.name.clone()));
        }
        let relfile = self.new_relfile()?;
        let def = SequenceDef { relfile, ..def };
        write_state(
            &inner.pool,
            &def,
            SeqPageState {
                last_value: def.start,
                is_called: false,
            },
        )?;
        self.catalog_insert(&catalog::encode_sequence(&def))?;
        inner.pool.set_relation_name(relfile, &def.name);
        self.catalog()?.sequence(&def.name)
    }

    /// ALTER SEQUENCE: new options (same relation file); `restart` sets the value the
    /// next `nextval` returns, at once and for everyone, as `setval(.., false)` would.
    pub fn alter_sequence(
        &mut self,
        name: &str,
        new: SequenceDef,
        restart: Option<i64>,
    ) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let _ddl = inner.ddl_lock.lock();
        let view = self.catalog()?;
        let old = view.sequence(name)?;
        let tid = view
            .sequence_tid(name)
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
        let new = SequenceDef {
            relfile: old.relfile,
            ..new
        };
        self.catalog_delete(tid)?;
        self.catalog_insert(&catalog::encode_sequence(&new))?;
        if let Some(v) = restart {
            setval(&inner, &new, v, false)?;
        }
        Ok(())
    }

    /// DROP SEQUENCE: the catalog row now, the file when the transaction commits.
    pub fn drop_sequence(&mut self, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let _ddl = inner.ddl_lock.lock();
        let view = self.catalog()?;
        let def = view.sequence(name)?;
        let tid = view
            .sequence_tid(name)
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
        self.catalog_delete(tid)?;
        self.dropped.push(def.relfile);
        Ok(())
    }

    pub fn sequence(&mut self, name: &str) -> Result<Arc<SequenceDef>> {
        self.catalog()?.sequence(name)
    }
}

impl Engine {
    /// `nextval`: the sequence's next value, durable before it is returned (module
    /// docs). Sessions asking at once take turns on the sequence's counter; only one
    /// in [`sequence::SEQ_LOG_VALS`] writes WAL.
    pub fn nextval(&self, def: &SequenceDef) -> Result<i64> {
        let inner = &self.inner;
        let counter = counter(inner, def.relfile);
        let (value, covered_by) = {
            let mut c = counter.lock();
            loaded(inner, def, &mut c)?;
            let (value, log) = c.next(&bounds(def)).map_err(|l| {
                let (which, bound) = match l {
                    SeqLimit::Max(b) => ("maximum", b),
                    SeqLimit::Min(b) => ("minimum", b),
                };
                Error::SequenceLimit {
                    message: format!(
                        "nextval: reached {which} value of sequence \"{}\" ({bound})",
                        def.name
                    ),
                    sqlstate: "2200H",
                }
            })?;
            if let Some(ahead) = log {
                c.covered_by = write_state(&inner.pool, def, ahead)?;
            }
            (value, c.covered_by)
        };
        inner.pool.wal.flush(covered_by);
        Ok(value)
    }

    /// `setval(seq, value, is_called)`: at once and for everyone, outside transactions.
    pub fn setval(&self, def: &SequenceDef, value: i64, is_called: bool) -> Result<()> {
        setval(&self.inner, def, value, is_called)
    }

    /// At a clean shutdown, before the last checkpoint: each sequence's exact state is
    /// logged, so after a restart `nextval` goes on where it stopped instead of after
    /// the batch logged ahead (what a crash does).
    pub(super) fn log_exact_sequence_states(&self) -> Result<()> {
        let pool = &self.inner.pool;
        let counters: Vec<_> = self
            .inner
            .sequences
            .lock()
            .iter()
            .map(|(r, c)| (*r, c.clone()))
            .collect();
        for (relfile, counter) in counters {
            let mut c = counter.lock();
            let Some(state) = c.state else { continue };
            if c.logged_ahead == 0 || !pool.relfiles.exists(relfile) {
                continue;
            }
            let id = PageId::new(relfile, 0);
            let pin = pool.read_page(id)?;
            let mut w = pin.write();
            if sequence::read_page(&w).is_none() {
                continue;
            }
            sequence::init_page(&mut w, id, state);
            c.covered_by = pool.log_change(&sequence::set_record(id, state), &mut [&mut w]);
            c.logged_ahead = 0;
        }
        Ok(())
    }
}

fn counter(inner: &Inner, relfile: RelFileId) -> Arc<Mutex<SeqCounter>> {
    inner.sequences.lock().entry(relfile).or_default().clone()
}

/// The counter's state, read from the sequence's page the first time.
fn loaded(inner: &Inner, def: &SequenceDef, c: &mut SeqCounter) -> Result<SeqPageState> {
    if let Some(s) = c.state {
        return Ok(s);
    }
    let pin = inner.pool.read_page(page_of(def))?;
    let r = pin.read();
    let s = sequence::read_page(&r).ok_or_else(|| {
        Error::DataCorrupted(format!("sequence \"{}\" has no sequence page", def.name))
    })?;
    c.state = Some(s);
    c.logged_ahead = 0;
    Ok(s)
}

fn setval(inner: &Inner, def: &SequenceDef, value: i64, is_called: bool) -> Result<()> {
    if value < def.min || value > def.max {
        return Err(Error::SequenceLimit {
            message: format!(
                "setval: value {value} is out of bounds for sequence \"{}\" ({}..{})",
                def.name, def.min, def.max
            ),
            sqlstate: "22003",
        });
    }
    let counter = counter(inner, def.relfile);
    let lsn = {
        let mut c = counter.lock();
        let state = SeqPageState {
            last_value: value,
            is_called,
        };
        let lsn = write_state(&inner.pool, def, state)?;
        c.state = Some(state);
        c.logged_ahead = 0;
        c.covered_by = lsn;
        lsn
    };
    inner.pool.wal.flush(lsn);
    Ok(())
}

/// Sets `def`'s page to `state` and logs it; returns the record's end.
fn write_state(
    pool: &crate::buffer::BufferPool,
    def: &SequenceDef,
    state: SeqPageState,
) -> Result<walrus_base::Lsn> {
    let id = page_of(def);
    let pin = if pool.relfiles.nblocks(def.relfile)? == 0 {
        let block = pool.relfiles.allocate_block(def.relfile)?;
        assert_eq!(block, 0, "a sequence has one page");
        pool.new_page(id)?
    } else {
        pool.read_page(id)?
    };
    let mut w = pin.write();
    sequence::init_page(&mut w, id, state);
    Ok(pool.log_change(&sequence::set_record(id, state), &mut [&mut w]))
}
