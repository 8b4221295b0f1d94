//! A list of wakers woken all at once, for waits whose condition is a change
//! of the state word that is rare and made by one RMW:
//!
//! * the **close waiters**: tasks awaiting
//!   [`Poster::closed`](crate::Poster::closed), woken by close (after it
//!   sets CLOSED);
//! * the **permit-limit waiters**: [`Poster::reserve`](crate::Poster::reserve)
//!   futures refused because [`Permit::MAX_OUT`](crate::Permit::MAX_OUT)
//!   permits are out, woken by the send or release that takes the count
//!   below the limit, and by close. They wait here, not in the room queue, because they
//!   wait for a permit to come back, not for a slot: a slot's wake that
//!   reached one of them would be wasted, and a post waiting for that slot
//!   would sleep on.
//!
//! A cold path only: a list is locked when a future registers or is
//! dropped, and by the RMW's thread after it. No plain post, dequeue or arm
//! touches it.
//!
//! # No lost wakeup
//!
//! ```text
//! waiting future (poll)                   the change (close, a permit back)
//! ---------------------                   ---------------------------------
//! condition met? ready                    RMW on the state word (the change)
//! lock; push or replace waker; unlock     lock; take every waker; unlock
//! condition met? ready                    wake each (outside the lock)
//! else pending
//! ```
//!
//! The two critical sections are ordered by the lock. If the changer's
//! comes second, it finds the waker and wakes it. If it comes first, its
//! RMW happens before its unlock, which happens before the future's lock,
//! which comes before the future's second load of the word: that load
//! sees the change, and the future goes on without a wake. Either way the
//! future is woken or sees the change. (Woken together, several limit
//! waiters may race for the one permit back; the losers register again.)
//!
//! A waker whose `wake` panics is not re-raised, as for the room wakes
//! ([`crate::room`]): the waking thread may be the consumer's drop or a
//! poster with an event in hand, and the other waiters must still be woken.
//! No user code runs under the lock: a registering waker is cloned before
//! it is taken, replaced and removed wakers are dropped after it is
//! released, and a removed one (its future done or dropped, perhaps by an
//! unwind, where a second panic aborts) is dropped with its panic caught.

use crate::sync::Mutex;
use std::task::Waker;

/// A registered future's place in a list, kept by the future.
#[derive(Debug, Default)]
pub(crate) struct Ticket(Option<u64>);

impl Ticket {
    /// The future has a waker in the list (or had one, woken since).
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

/// The wakers of the futures waiting for one change.
pub(crate) struct WakerList(Mutex<Waiters>);

impl WakerList {
    pub(crate) fn new() -> Self {
        WakerList(Mutex::new(Waiters::default()))
    }

    /// Register `waker` for `ticket` (replacing its earlier waker, or
    /// rejoining if a wake took it). The caller re-checks its condition
    /// after this.
    pub(crate) fn register(&self, ticket: &mut Ticket, waker: &Waker) {
        // Cloned before the lock is taken (user code: a clone that panics
        // leaves the list as it was, one that registers elsewhere in this
        // list does not deadlock); a clone not used is dropped after it.
        let mut fresh = Some(waker.clone());
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let replaced = match ticket.0 {
            Some(id) => match q.wakers.iter_mut().find(|(k, _)| *k == id) {
                Some((_, w)) if w.will_wake(waker) => None,
                Some((_, w)) => fresh.take().map(|f| std::mem::replace(w, f)),
                None => {
                    q.wakers.push((id, fresh.take().expect("cloned above")));
                    None
                }
            },
            None => {
                let id = q.next;
                q.next += 1;
                q.wakers.push((id, fresh.take().expect("cloned above")));
                ticket.0 = Some(id);
                None
            }
        };
        drop(q);
        // The replaced waker and an unused clone are dropped outside the
        // lock (user code; a panic reaches the poll, as a clone's would).
        drop(replaced);
        drop(fresh);
    }

    /// Take `ticket`'s waker out, if a wake has not; the future is done or
    /// dropped. The removed waker is dropped with its panic caught and not
    /// re-raised: the future may be dropped during an unwind (another
    /// branch of its task panicked), where a second panic aborts.
    pub(crate) fn leave(&self, ticket: &mut Ticket) {
        let Some(id) = ticket.0.take() else { return };
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let removed = q
            .wakers
            .iter()
            .position(|(k, _)| *k == id)
            .map(|i| q.wakers.swap_remove(i));
        drop(q);
        if let Some(w) = removed {
            crate::unwind::caught(move || drop(w));
        }
    }

    /// Wake every registered future. Called after the change.
    pub(crate) fn wake_all(&self) {
        let all = std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()).wakers);
        for (_, w) in all {
            // Not re-raised: see the module docs.
            crate::unwind::caught(|| w.wake());
        }
    }
}
