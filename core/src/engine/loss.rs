//! The loss word ([`state::loss`](crate::state::loss)): close's first step and the count of
//! events lost by lossy posts and not yet reported. Its own line, read on
//! the consumer's slow paths and written only by close, a lossy post that
//! gives up, and the consumer side taking a report.
//!
//! # Orderings
//!
//! * **Close** closes it first, `AcqRel`: its `Release` orders every loss
//!   committed before it ahead of the state word's `CLOSED`, which the same
//!   thread releases next (`Shared::finish_close`). No loss is committed
//!   once it is closed, so whoever sees `CLOSED` with `Acquire` sees the
//!   final count.
//! * **A commit** is `Relaxed`: the poster's RMW on the state word right
//!   after it (`Shared::commit_loss`) orders it for whoever's CAS on the
//!   word comes later (an arm, an upcall's exit), and they re-check this
//!   word after their CAS; close's order against it is this word's own
//!   modification order.
//! * **A take** is `Relaxed`: the count carries no data; what must be
//!   ordered with it (the arm, the end of stream) is ordered through the
//!   state word.
//! * **The consumer's empty check** ([`LossWord::close_begun`]) is `Acquire`,
//!   pairing with close's `Release`: while the word is open the EVD is open,
//!   and "empty" needs no load of the posters' line. The other loads are
//!   `Relaxed` hints: the decision reads the words again.

use crate::state::loss;
use crate::sync::{AtomicU64, Ordering};

/// The loss word (see the module docs).
pub(crate) struct LossWord(AtomicU64);

/// What [`LossWord::after_arm`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterArm {
    /// Nothing to do: the arm stands.
    Nothing,
    /// A loss report is pending: work, so the arm is taken back.
    Report,
    /// Close has begun: finish its second step, which takes the arm and
    /// notifies it.
    CloseBegun,
}

impl LossWord {
    #[inline]
    pub(crate) fn new() -> Self {
        LossWord(AtomicU64::new(0))
    }

    /// Apply `f` to the word until the CAS succeeds or `f` declines;
    /// returns the word installed, or `None`.
    #[inline]
    fn transition(&self, success: Ordering, mut f: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        let mut l = self.0.load(Ordering::Relaxed);
        loop {
            let new = f(l)?;
            match self
                .0
                .compare_exchange_weak(l, new, success, Ordering::Relaxed)
            {
                Ok(_) => return Some(new),
                Err(cur) => l = cur,
            }
        }
    }

    /// Close's first step ([`loss::close`]): no loss is committed after it.
    /// Idempotent.
    #[inline]
    pub(crate) fn close(&self) {
        // AcqRel: Release orders the committed losses before the state word's
        // CLOSED (released by `finish_close`, which follows in this thread).
        self.transition(Ordering::AcqRel, |l| {
            (!loss::is_closed(l)).then_some(loss::close(l))
        });
    }

    /// Commit one lost event ([`loss::commit`]); false if close has begun
    /// (then nothing was counted).
    #[inline]
    pub(crate) fn commit(&self) -> bool {
        // Relaxed: see the module docs.
        self.transition(Ordering::Relaxed, loss::commit).is_some()
    }

    /// Take the pending count ([`loss::take`]), if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<u64> {
        let mut lost = 0;
        // Relaxed: see the module docs.
        self.transition(Ordering::Relaxed, |l| {
            let (new, n) = loss::take(l)?;
            lost = n;
            Some(new)
        })?;
        Some(lost)
    }

    /// True if a loss report is waiting (a `Relaxed` load: a hint).
    #[inline(always)]
    pub(crate) fn pending(&self) -> bool {
        loss::pending(self.0.load(Ordering::Relaxed)) != 0
    }

    /// True if a loss report is waiting or close has begun (a `Relaxed`
    /// load: a hint for a waiter's back-off, which looks only at the slots).
    #[inline(always)]
    pub(crate) fn report_or_close_begun(&self) -> bool {
        let l = self.0.load(Ordering::Relaxed);
        loss::pending(l) != 0 || loss::is_closed(l)
    }

    /// What an arm (or a CNO enable) must re-check after its CAS, from one
    /// `Relaxed` load: a report pending (work), else whether close has begun
    /// (its closer may be stopped before the state word's step). The arm's
    /// `Acquire` CAS makes a loss visible whose poster's RMW on the state
    /// word came first; a close whose first step this load misses has not
    /// been seen by the arm, whose caller waits for the closer as before.
    #[inline(always)]
    pub(crate) fn after_arm(&self) -> AfterArm {
        let l = self.0.load(Ordering::Relaxed);
        if l == 0 {
            // Open, nothing lost: the one test on the arm's common path.
            AfterArm::Nothing
        } else if loss::pending(l) != 0 {
            AfterArm::Report
        } else if loss::is_closed(l) {
            AfterArm::CloseBegun
        } else {
            AfterArm::Nothing
        }
    }

    /// True once close has begun, with `Acquire` (pairs with close's
    /// `Release`): the consumer's check before it reads the state word.
    #[inline]
    pub(crate) fn close_begun(&self) -> bool {
        loss::is_closed(self.0.load(Ordering::Acquire))
    }
}
