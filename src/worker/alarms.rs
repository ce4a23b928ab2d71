//! A budget of false alarms: claims that a new-jobs notification asked for and that
//! found nothing.
//!
//! Any role that can connect may NOTIFY on the queue's channel, and a fleet's idle
//! workers are all woken by every insert (one of them takes the job). Each such wake costs
//! a claim, so a storm of notifications would cost a claim each. The budget lets
//! [`FALSE_ALARM_BURST`] of them through at once and [`FALSE_ALARMS_PER_SECOND`] after
//! that; past it, a new-jobs notification ends a quiet spell only once the budget has
//! a claim again, at most [`1 / FALSE_ALARMS_PER_SECOND`](FALSE_ALARMS_PER_SECOND) later.
//! Claims that take jobs cost nothing, and no other reason to claim (a slot freed, a
//! reconnect, a job coming due) is held back. Pure: no I/O, no lock, no clock of its own.

use std::time::{Duration, Instant};

/// False alarms allowed at once.
pub(crate) const FALSE_ALARM_BURST: f64 = 50.0;

/// False alarms allowed per second once the burst is spent: a storm costs at most this
/// many claims a second, and a real job that comes meanwhile waits at most 20 ms more.
pub(crate) const FALSE_ALARMS_PER_SECOND: f64 = 50.0;

/// The budget (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct FalseAlarms {
    /// Claims left in the budget at `at`.
    left: f64,
    at: Instant,
}

impl FalseAlarms {
    pub(crate) fn new(now: Instant) -> FalseAlarms {
        FalseAlarms {
            left: FALSE_ALARM_BURST,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.left = (self.left + since * FALSE_ALARMS_PER_SECOND).min(FALSE_ALARM_BURST);
        self.at = now;
    }

    /// A claim that a new-jobs notification asked for found nothing.
    pub(crate) fn spent(&mut self, now: Instant) {
        self.refill(now);
        self.left -= 1.0;
    }

    /// When a new-jobs notification may next end a quiet spell: `now`, or later while
    /// the budget is spent.
    pub(crate) fn heard_from(&self, now: Instant) -> Instant {
        let mut at = self.clone();
        at.refill(now);
        if at.left >= 1.0 {
            return now;
        }
        now + Duration::from_secs_f64((1.0 - at.left) / FALSE_ALARMS_PER_SECOND)
    }

    /// Whether a new-jobs notification may end a quiet spell now.
    pub(crate) fn heard(&self, now: Instant) -> bool {
        self.heard_from(now) <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_false_alarms_is_heard_and_a_storm_is_heard_at_the_budgets_pace() {
        let t0 = Instant::now();
        let mut alarms = FalseAlarms::new(t0);
        for _ in 0..50 {
            assert!(alarms.heard(t0));
            alarms.spent(t0);
        }
        assert!(!alarms.heard(t0), "the burst is spent");
        let next = alarms.heard_from(t0);
        assert_eq!(next - t0, Duration::from_millis(20));
        assert!(alarms.heard(next));
        // A storm for ten seconds: at most 50 a second are heard.
        let mut heard = 0;
        let mut t = t0;
        while t < t0 + Duration::from_secs(10) {
            if alarms.heard(t) {
                alarms.spent(t);
                heard += 1;
            }
            t += Duration::from_millis(1);
        }
        assert!((495..=505).contains(&heard), "{heard} heard in 10 s");
        // Quiet for a second: the whole burst is back, and no more.
        let later = t + Duration::from_secs(5);
        for _ in 0..50 {
            assert!(alarms.heard(later));
            alarms.spent(later);
        }
        assert!(!alarms.heard(later));
    }
}
