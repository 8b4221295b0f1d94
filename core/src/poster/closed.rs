//! [`Closed`]: a future that resolves once the EVD is closed.
//!
//! Its waker waits in the close waiters ([`crate::waker_list`], where the
//! ordering against close is argued): `poll` registers, then re-checks
//! CLOSED; close sets CLOSED, then wakes every registered waker.

use super::Poster;
use crate::waker_list::Ticket;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of [`Poster::closed`]: resolves to `()` once the EVD is
/// closed.
///
/// Cancel-safe: dropping it takes its waker out of the close waiters.
#[must_use = "futures do nothing unless polled"]
pub struct Closed<'a, T> {
    poster: &'a Poster<T>,
    ticket: Ticket,
    /// It returned `Ready`.
    done: bool,
}

impl<T> Poster<T> {
    /// Wait until the EVD is closed, by any close:
    /// [`Consumer::close`](crate::Consumer::close), the consumer's drop or
    /// [`Poster::close`] (the last poster's drop cannot come while this
    /// future borrows a poster).
    ///
    /// Resolves at once if the EVD is closed already. A producer task can
    /// `select!` on it to stop producing when nobody will consume. The
    /// waiting costs posts and dequeues nothing: registering takes a lock
    /// only close also takes.
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
    /// let t = std::thread::spawn(move || block_on(poster.closed()));
    /// drop(consumer); // closes the EVD
    /// t.join().unwrap();
    /// ```
    pub fn closed(&self) -> Closed<'_, T> {
        Closed {
            poster: self,
            ticket: Ticket::default(),
            done: false,
        }
    }
}

impl<T> Future for Closed<'_, T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let shared = &*this.poster.shared;
        if !shared.is_closed() {
            shared
                .close_waiters()
                .register(&mut this.ticket, cx.waker());
            // Re-check after registering: a close whose lock came before
            // ours set CLOSED before it, and this load sees it.
            if !shared.is_closed() {
                return Poll::Pending;
            }
        }
        shared.close_waiters().leave(&mut this.ticket);
        this.done = true;
        Poll::Ready(())
    }
}

/// Terminated once it has returned `Ready`; polled again, it is `Ready` at
/// once (the EVD stays closed).
impl<T> futures_core::FusedFuture for Closed<'_, T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<T> Drop for Closed<'_, T> {
    fn drop(&mut self) {
        self.poster.shared.close_waiters().leave(&mut self.ticket);
    }
}

impl<T> std::fmt::Debug for Closed<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closed")
            .field("done", &self.done)
            .field("registered", &self.ticket.is_taken())
            .finish()
    }
}
