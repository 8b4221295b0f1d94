//! The consumer's waker slot: the one [`Waker`] the next notification wakes,
//! replaced by the consumer (each async poll, each blocking wait) and taken
//! by whichever thread notifies.
//!
//! The algorithm is atomic-waker's (smol-rs `atomic-waker`, as in tokio and
//! futures): a two-bit lock word beside the waker cell. That crate's
//! `register` cannot keep our promise that user code which panics never
//! wedges the EVD: it clones the new waker, and drops the one it replaces,
//! while it holds its registering lock, so a `Waker::clone` or a waker's drop
//! that panics leaves the lock held for ever, and every later registration
//! and every wake is a no-op: the consumer's task, or its thread in a
//! blocking wait, sleeps through every notification. Here the replaced waker
//! is dropped after the lock is released, and a clone that panics releases
//! the lock on its way out.
//!
//! # The lock word
//!
//! | `state` | who holds the cell | left by |
//! |---|---|---|
//! | `WAITING` | nobody | a register (CAS to `REGISTERING`), a wake (`fetch_or` to `WAKING`) |
//! | `REGISTERING` | the consumer, replacing the waker | the consumer: CAS back to `WAITING` |
//! | `REGISTERING \| WAKING` | the consumer; a wake came meanwhile and found the cell held | the consumer: swap to `WAITING`, then it wakes the waker it stored |
//! | `WAKING` | a notifier, taking the waker out | that notifier (`fetch_and`) |
//!
//! Only the consumer registers (`&mut Consumer`, or a teardown that owns it),
//! so a register never meets another register; a wake never waits: it sets
//! `WAKING` and leaves if the cell is held, and the holder passes the wake on.
//! A register that finds `WAKING` (a notifier is taking the old waker out)
//! wakes its own waker at once instead of storing it: the caller polls again.
//!
//! # No lost wakeup
//!
//! The caller registers, then checks its condition (the arm CAS on the state
//! word); a notifier makes the condition true, then wakes. Either the wake
//! takes the cell after the registration released it, and wakes the new
//! waker; or it comes while the cell is held, and the registration wakes the
//! new waker itself; or it took the cell before the registration, and the
//! registration's `Acquire` on the lock word synchronizes with the wake's
//! `Release`, so the check after it sees the condition.
//!
//! # Panics in user code
//!
//! * The new waker's clone panics: the cell still holds the old waker
//!   untouched; the lock is released (`WAITING`), and a wake that came
//!   meanwhile is passed to the registering waker by reference (if that
//!   wake panics too, its panic is dropped: the clone's is already on its
//!   way). The clone's panic goes on to the caller.
//! * The replaced waker's drop panics: it is dropped after the lock is
//!   released and after any wake owed is delivered; the new waker is in
//!   place, unless a wake came while the registration held the cell (then
//!   the registration took the new waker out and woke it: the cell is
//!   empty, as after any wake). The panic goes on to the caller.
//! * The woken waker's wake panics: the lock was released before; the panic
//!   goes on to whoever woke it: the notifier, or the registration that
//!   delivered a wake that came while it held the cell (and that then
//!   still drops the replaced waker before the panic goes on).

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};
use crate::unwind::Panics;
use std::task::Waker;

/// Nobody holds the cell.
const WAITING: usize = 0;
/// The consumer holds the cell to replace the waker.
const REGISTERING: usize = 0b01;
/// A notifier holds the cell to take the waker, or (with `REGISTERING`) a
/// wake came while the consumer held it.
const WAKING: usize = 0b10;

/// One registered waker, replaced by the consumer and taken by notifiers.
pub(crate) struct WakerSlot {
    /// The lock word (table above).
    state: AtomicUsize,
    /// The waker the next wake takes. Read and written only by whoever moved
    /// `state` from `WAITING`, until it moves it back.
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the cell holds a `Waker` (`Send + Sync`) and is accessed only by the
// thread that holds the lock word (module doc), which hands it on with
// `Release` and takes it with `Acquire`.
unsafe impl Send for WakerSlot {}
// SAFETY: as for `Send`.
unsafe impl Sync for WakerSlot {}

impl Default for WakerSlot {
    fn default() -> Self {
        WakerSlot {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }
}

impl std::fmt::Debug for WakerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.load(Ordering::Relaxed);
        f.debug_struct("WakerSlot").field("state", &state).finish()
    }
}

impl WakerSlot {
    /// Make `waker` the one the next wake takes. The consumer only; it checks
    /// its condition after this.
    pub(crate) fn register(&self, waker: &Waker) {
        // Acquire: if a wake took the cell before, its `Release` when it gave
        // the cell back (and every write before that wake, such as the post
        // that made the condition true) happens before what follows here.
        match self
            .state
            .compare_exchange(WAITING, REGISTERING, Ordering::Acquire, Ordering::Acquire)
            .unwrap_or_else(|actual| actual)
        {
            WAITING => self.replace_held(waker),
            WAKING => {
                // A notifier is taking the old waker out: this registration
                // would race it. The wake is for this task: poll again.
                waker.wake_by_ref();
                // A model does not preempt a thread that polls again at
                // once: let the notifier finish its take first.
                #[cfg(any(loom, shuttle))]
                crate::sync::thread::yield_now();
            }
            state => {
                // Only the consumer registers, and never twice at once.
                debug_assert!(false, "a register met a register (state {state:#b})");
                // Fail safe in a release build: the caller polls again.
                waker.wake_by_ref();
            }
        }
    }

    /// `register` once it holds the cell (`REGISTERING`).
    fn replace_held(&self, waker: &Waker) {
        let release = Release { slot: self, waker };
        // SAFETY: `REGISTERING` is ours: no other thread reads or writes the
        // cell until we release it.
        let stored = unsafe {
            self.waker
                .with(|w| (*w).as_ref().map(|w| w.will_wake(waker)))
        };
        // A waker of the same task is kept: no clone, no drop.
        let replaced = match stored {
            Some(true) => None,
            // The clone is user code: should it panic, `release` drops on
            // the unwind and frees the lock with the old waker in place.
            // SAFETY: as above.
            _ => unsafe { self.waker.with_mut(|w| (*w).replace(waker.clone())) },
        };
        std::mem::forget(release);
        // AcqRel on success: Release hands the cell (the new waker) to the
        // next wake; Acquire is for the failure case below.
        match self
            .state
            .compare_exchange(REGISTERING, WAITING, Ordering::AcqRel, Ordering::Acquire)
        {
            // The replaced waker is user code too: dropped with the lock free.
            Ok(_) => drop(replaced),
            Err(actual) => {
                // A wake came while we held the cell; it left the waking to
                // us.
                debug_assert_eq!(actual, REGISTERING | WAKING);
                // SAFETY: the lock is still ours (only we clear it).
                let stored = unsafe { self.waker.with_mut(|w| (*w).take()) };
                // AcqRel: acquire every concurrent wake's `fetch_or` (the
                // writes before them), release our take of the cell.
                self.state.swap(WAITING, Ordering::AcqRel);
                // The wake owed comes before the replaced waker's drop, so a
                // drop that panics cannot lose it; should the wake panic,
                // the replaced waker is still dropped before that panic goes
                // on (the first of the two panics goes on).
                let mut panics = Panics::default();
                panics.run(|| stored.expect("a register stores a waker").wake());
                panics.drop(replaced);
                panics.resume();
            }
        }
    }

    /// Wake the registered waker, if there is one (it is taken out: the next
    /// wake finds none until the consumer registers again). Every notifier.
    pub(crate) fn wake(&self) {
        if let Some(waker) = self.take() {
            waker.wake();
        }
    }

    /// Take the registered waker out without waking it: the consumer is
    /// gone, and its waker (user code) is dropped by the caller, on the
    /// consumer's thread, not by whichever handle frees the EVD last. `None`
    /// if a notifier is taking it out now (it wakes and drops it). A
    /// notifier that comes meanwhile leaves the wake to this take and wakes
    /// nobody: right only because no consumer is left to wait.
    pub(crate) fn take_unwoken(&self) -> Option<Waker> {
        self.take()
    }

    /// Take the registered waker out, or leave the wake to the registering
    /// consumer.
    fn take(&self) -> Option<Waker> {
        // AcqRel: Release makes the notifier's writes before it (the post)
        // visible to the consumer that acquires the lock word next; Acquire
        // takes the cell as the last register released it.
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            WAITING => {
                // SAFETY: `WAKING` set from `WAITING` is ours: no other
                // thread touches the cell until we clear it.
                let waker = unsafe { self.waker.with_mut(|w| (*w).take()) };
                // Release: the next register's Acquire sees the cell empty.
                self.state.fetch_and(!WAKING, Ordering::Release);
                waker
            }
            // The consumer holds the cell (it wakes for us), or another
            // notifier is taking the waker out (one wake suffices), or the
            // consumer's drop is ([`WakerSlot::take_unwoken`]: nobody is
            // left to wake).
            _ => None,
        }
    }
}

/// Frees the lock of a registration whose waker clone panicked: the cell
/// keeps the old waker, and a wake that came meanwhile is passed to the
/// registering waker. Forgotten on the normal path.
struct Release<'a> {
    slot: &'a WakerSlot,
    waker: &'a Waker,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        // AcqRel: as the normal path's release.
        let was = self.slot.state.swap(WAITING, Ordering::AcqRel);
        if was & WAKING != 0 {
            // Unwinding already: a second panic would abort, so one from
            // this wake is swallowed.
            crate::unwind::caught(|| self.waker.wake_by_ref());
        }
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::WakerSlot;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::task::{Wake, Waker};

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    fn counted() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn a_wake_takes_the_registered_waker_once() {
        let slot = WakerSlot::default();
        slot.wake(); // nothing registered: nothing to wake
        let (c, w) = counted();
        slot.register(&w);
        slot.wake();
        slot.wake();
        assert_eq!(c.0.load(SeqCst), 1, "taken by the first wake");
        slot.register(&w);
        slot.wake();
        assert_eq!(c.0.load(SeqCst), 2, "registered again, woken again");
    }

    #[test]
    fn a_waker_of_the_same_task_is_kept_and_a_replaced_one_dropped() {
        let slot = WakerSlot::default();
        let (first, w1) = counted();
        slot.register(&w1);
        slot.register(&w1);
        assert_eq!(Arc::strong_count(&first), 3, "one clone in the slot");
        let (second, w2) = counted();
        slot.register(&w2);
        assert_eq!(Arc::strong_count(&first), 2, "the replaced clone dropped");
        slot.wake();
        assert_eq!((first.0.load(SeqCst), second.0.load(SeqCst)), (0, 1));
        assert_eq!(Arc::strong_count(&second), 2, "the woken clone dropped");
    }
}
