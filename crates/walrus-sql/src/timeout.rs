//! `statement_timeout`: one timer thread for the whole process sets a session's interrupt
//! flag when its statement runs past the limit, as PostgreSQL's SIGALRM handler does. The
//! statement then stops where it next looks at the flag (between rows, in lock waits, in
//! `pg_sleep`), exactly as for a cancel request, and the session reports which of the two
//! it was. Statements without a timeout arm nothing.
//!
//! Timeout values follow PostgreSQL's GUC syntax for time settings: a number of
//! milliseconds, or a number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`); 0 disables.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{SqlError, SqlResult};

/// An armed timeout; dropping or disarming it before it fires cancels it.
pub(crate) struct Armed {
    timers: &'static Timers,
    key: (Instant, u64),
    fired: Arc<AtomicBool>,
}

struct Entry {
    interrupt: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
}

/// Armed timeouts by (deadline, arming number), and the last arming number.
#[derive(Default)]
struct Due {
    at: BTreeMap<(Instant, u64), Entry>,
    armed: u64,
}

#[derive(Default)]
struct Timers {
    due: Mutex<Due>,
    changed: Condvar,
}

/// The timer thread, started at the first armed timeout. A thread that cannot be
/// started (the process is out of threads or memory) is that statement's error, and the
/// next statement tries again.
fn timers() -> SqlResult<&'static Timers> {
    static TIMERS: OnceLock<&'static Timers> = OnceLock::new();
    static STARTING: Mutex<()> = Mutex::new(());
    if let Some(t) = TIMERS.get() {
        return Ok(t);
    }
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = TIMERS.get() {
        return Ok(t);
    }
    let t: &'static Timers = Box::leak(Box::default());
    std::thread::Builder::new()
        .name("walrus-timeouts".into())
        .spawn(move || fire_loop(t))
        .map_err(|e| {
            SqlError::new(
                "53000",
                format!("could not start the statement_timeout timer: {e}"),
            )
        })?;
    Ok(TIMERS.get_or_init(|| t))
}

fn fire_loop(t: &Timers) {
    let mut g = t.due.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while let Some(entry) = g.at.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let e = entry.remove();
            e.fired.store(true, Ordering::Release);
            e.interrupt.store(true, Ordering::Release);
        }
        g = match g.at.first_key_value().map(|(k, _)| k.0) {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                t.changed
                    .wait_timeout(g, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => t.changed.wait(g).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Sets `interrupt` after `after`, unless disarmed first.
pub(crate) fn arm(after: Duration, interrupt: Arc<AtomicBool>) -> SqlResult<Armed> {
    let t = timers()?;
    let fired = Arc::new(AtomicBool::new(false));
    let mut g = t.due.lock().unwrap_or_else(|e| e.into_inner());
    g.armed += 1;
    let key = (Instant::now() + after, g.armed);
    let first = g.at.first_key_value().is_none_or(|(k, _)| key < *k);
    g.at.insert(
        key,
        Entry {
            interrupt,
            fired: fired.clone(),
        },
    );
    drop(g);
    if first {
        t.changed.notify_one();
    }
    Ok(Armed {
        timers: t,
        key,
        fired,
    })
}

impl Armed {
    /// Cancels the timeout; returns whether it had already fired.
    pub(crate) fn disarm(self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.timers
            .due
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .at
            .remove(&self.key);
    }
}

/// Parses a time setting into milliseconds (`0`: disabled), as PostgreSQL does for
/// `statement_timeout` and `lock_timeout`.
pub(crate) fn parse_ms(name: &str, value: &str) -> SqlResult<u64> {
    let bad = || {
        SqlError::new(
            "22023",
            format!("invalid value for parameter \"{name}\": \"{value}\""),
        )
    };
    let v = value.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let num: f64 = num.parse().map_err(|_| bad())?;
    let per_unit_ms = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(bad()),
    };
    let ms = (num * per_unit_ms).round();
    if !(0.0..=i32::MAX as f64).contains(&ms) {
        return Err(SqlError::new(
            "22023",
            format!(
                "{value} is outside the valid range for parameter \"{name}\" (0 .. 2147483647)"
            ),
        ));
    }
    Ok(ms as u64)
}

/// How `SHOW` prints a time setting: in the largest unit that divides it, as PostgreSQL.
pub(crate) fn show_ms(ms: u64) -> String {
    match ms {
        0 => "0".into(),
        m if m % 86_400_000 == 0 => format!("{}d", m / 86_400_000),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}min", m / 60_000),
        m if m % 1000 == 0 => format!("{}s", m / 1000),
        m => format!("{m}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_settings_parse_and_print_as_postgresql() {
        for (input, ms, shown) in [
            ("0", 0, "0"),
            ("100", 100, "100ms"),
            ("5s", 5000, "5s"),
            ("1.5s", 1500, "1500ms"),
            ("2min", 120_000, "2min"),
            ("1h", 3_600_000, "1h"),
            ("250ms", 250, "250ms"),
        ] {
            let got = parse_ms("statement_timeout", input).unwrap();
            assert_eq!(got, ms, "{input}");
            assert_eq!(show_ms(got), shown, "{input}");
        }
        for bad in ["abc", "5 parsecs", "-1", "", "99999999999"] {
            let e = parse_ms("lock_timeout", bad).unwrap_err();
            assert_eq!(e.sqlstate, "22023", "{bad}: {e}");
        }
    }

    #[test]
    fn an_armed_timeout_fires_and_a_disarmed_one_does_not() {
        let flag = Arc::new(AtomicBool::new(false));
        let a = arm(Duration::from_millis(20), flag.clone()).unwrap();
        let start = Instant::now();
        while !flag.load(Ordering::Acquire) {
            assert!(start.elapsed() < Duration::from_secs(10), "never fired");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(a.disarm());
        let quiet = Arc::new(AtomicBool::new(false));
        let b = arm(Duration::from_millis(30), quiet.clone()).unwrap();
        assert!(!b.disarm());
        std::thread::sleep(Duration::from_millis(80));
        assert!(!quiet.load(Ordering::Acquire), "a disarmed timeout fired");
    }
}
