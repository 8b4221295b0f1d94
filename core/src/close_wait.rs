//! The close waiters: tasks awaiting [`Poster::closed`](crate::Poster::closed),
//! and how close wakes them.
//!
//! A cold path only: the list is locked when a `closed()` future registers
//! or is dropped, and once by close. No post, dequeue or arm touches it.
//!
//! # No lost wakeup
//!
//! ```text
//! closed() future (poll)                  close (finish_close)
//! ----------------------                  --------------------
//! CLOSED set? ready                       CLOSED set in the state word (AcqRel RMW)
//! lock; push or replace waker; unlock     lock; take every waker; unlock
//! CLOSED set? ready                       wake each (outside the lock)
//! else pending
//! ```
//!
//! The two critical sections are ordered by the lock. If close's comes
//! second, it finds the waker and wakes it. If close's comes first, its
//! CLOSED write happens before its unlock, which happens before the
//! future's lock, which comes before the future's second load of the word
//! (`Acquire`): that load sees CLOSED, and the future resolves without a
//! wake. Either way the future is woken or sees the EVD closed.
//!
//! A waker whose `wake` panics is not re-raised, as for the room wakes
//! ([`crate::room`]): the closing thread may be the consumer's drop, and the
//! other waiters and the consumer must still be woken.

use crate::sync::Mutex;
use std::task::Waker;

/// A registered future's place in the list, kept by the future.
#[derive(Debug, Default)]
pub(crate) struct Ticket(Option<u64>);

impl Ticket {
    /// The future has a waker in the list (or had one, woken by close).
    pub(crate) fn is_taken(&self) -> bool {
        self.0.is_some()
    }
}

#[derive(Default)]
struct Waiters {
    /// The next ticket's number.
    next: u64,
    /// Registered futures, by ticket.
    wakers: Vec<(u64, Waker)>,
}

/// The wakers of the futures awaiting close.
pub(crate) struct CloseWaiters(Mutex<Waiters>);

impl CloseWaiters {
    pub(crate) fn new() -> Self {
        CloseWaiters(Mutex::new(Waiters::default()))
    }

    /// Register `waker` for `ticket` (replacing its earlier waker, or
    /// rejoining if close took it). The caller re-checks CLOSED after this.
    pub(crate) fn register(&self, ticket: &mut Ticket, waker: &Waker) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let replaced = match ticket.0 {
            Some(id) => match q.wakers.iter_mut().find(|(k, _)| *k == id) {
                Some((_, w)) if w.will_wake(waker) => return,
                Some((_, w)) => Some(std::mem::replace(w, waker.clone())),
                None => {
                    q.wakers.push((id, waker.clone()));
                    None
                }
            },
            None => {
                let id = q.next;
                q.next += 1;
                q.wakers.push((id, waker.clone()));
                ticket.0 = Some(id);
                None
            }
        };
        drop(q);
        // The replaced waker is dropped outside the lock (user code).
        drop(replaced);
    }

    /// Take `ticket`'s waker out, if close has not; the future is done or
    /// dropped.
    pub(crate) fn leave(&self, ticket: &mut Ticket) {
        let Some(id) = ticket.0.take() else { return };
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let removed = q
            .wakers
            .iter()
            .position(|(k, _)| *k == id)
            .map(|i| q.wakers.swap_remove(i));
        drop(q);
        drop(removed);
    }

    /// Close: wake every registered future. Called after CLOSED is set.
    pub(crate) fn wake_all(&self) {
        let all = std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()).wakers);
        for (_, w) in all {
            // Not re-raised: see the module docs.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
        }
    }
}
