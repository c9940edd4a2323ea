//! The prolog's one time budget: `budget_seconds` from its start covers the worker, every
//! `scontrol` call and every lock wait, so slurmd sees the prolog end within `budget_seconds`
//! plus a moment (the test: + 2 s), whatever hangs. Each step gets what is left, never a fixed
//! allowance of its own.

use std::time::{Duration, Instant};

/// The smallest time a step that must still happen (a drain after a FAIL) is given, even when
/// the worker used the whole budget: within the + 2 s the budget promises.
pub const GRACE: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + d,
        }
    }

    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// This deadline, but at least [`GRACE`] from now (for the drain that must follow a FAIL).
    pub fn with_grace(&self) -> Deadline {
        Deadline {
            at: self.at.max(Instant::now() + GRACE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_left_shrinks_to_zero_and_grace_gives_a_little_more() {
        let d = Deadline::after(Duration::from_millis(30));
        assert!(!d.passed() && d.remaining() <= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        assert!(d.passed());
        assert_eq!(d.remaining(), Duration::ZERO);
        let g = d.with_grace();
        assert!(g.remaining() > Duration::from_millis(1000), "{g:?}");
        let far = Deadline::after(Duration::from_secs(60));
        assert!(far.with_grace().remaining() > Duration::from_secs(59));
    }
}
