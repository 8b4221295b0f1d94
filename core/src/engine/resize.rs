//! Resize: the consumer replaces the ring while posters run.
//!
//! `RESIZING` in the state word (set and cleared by [`super::word`]'s CASes)
//! holds every reservation off; the consumer moves the queued events into
//! the new ring, swaps the read-mostly line's buffer pointer (`Release`),
//! and clearing `RESIZING` (`Release`) publishes the pointer to the next
//! reservation (`Acquire`). The old ring is freed here: every ticket handed
//! out in it was published and moved out before the swap.
//!
//! A post that waits for room is refused by the resize instead of spinning
//! through it (the move may wait for a preempted poster's publish), and
//! waits in the room queue: every end of a resize, done or refused, makes
//! the room check of a head store and wakes every waiting poster, which
//! also tells those waiting on a full ring of the slots a growing resize
//! adds.

use super::Shared;
use crate::error::ResizeError;
use crate::ring::Buffer;
use crate::state;
use crate::sync::Ordering;

impl<T> Shared<T> {
    /// Move the queued events into `fresh` (of `2^log2` slots) and install it,
    /// while RESIZING holds posters off. Caller: the consumer.
    pub(crate) fn resize(&self, log2: u32, fresh: Buffer<T>) -> Result<(), ResizeError> {
        let new_cap = fresh.capacity();
        let w = self.begin_resize();
        let h = self.head();
        // The new ring must hold the permits too (given back, never taken, now).
        let queued = state::len(w, h);
        let promised = queued + state::permits(w);
        if promised > new_cap {
            // Posters resume against the unchanged ring.
            self.finish_resize(state::cap_log2(w));
            return Err(ResizeError::TooSmall {
                queued: promised as usize,
                capacity: new_cap as usize,
            });
        }
        // SAFETY: we are the consumer at head `h`, and RESIZING holds new
        // reservations off: `[h, h + queued)` are every ticket handed out.
        unsafe { Buffer::move_queued(self.buffer(), &fresh, h, queued) };
        // Every ticket of the old ring was published and moved out.
        let old = self.swap_buffer(fresh);
        self.finish_resize(log2);
        drop(old);
        Ok(())
    }

    /// Clear `RESIZING` with the capacity `2^log2`, then wake every poster
    /// waiting for room: those the resize refused wait for its end, and a
    /// larger ring has room for those that found it full. The light half of
    /// the room barrier orders the RMW that cleared `RESIZING` before the
    /// flag load, as after a head store: either a waiter's post after
    /// joining sees the word without `RESIZING` (and the new capacity), or
    /// this sees the waiter ([`crate::room`]). No waker's panic is raised.
    fn finish_resize(&self, log2: u32) {
        self.end_resize(log2);
        if self.consumer.room.check_after_head_store() {
            self.wake_all_room();
        }
    }

    /// Install the ring a resize built; returns the old one, to be dropped.
    /// Caller: [`Shared::resize`], while RESIZING holds every poster off,
    /// after every ticket of the old ring was published and moved out.
    fn swap_buffer(&self, fresh: Buffer<T>) -> Box<Buffer<T>> {
        // Release: a poster whose reservation reads the word that ends the
        // resize (released after this) sees the new pointer.
        let old = self
            .read_mostly
            .buffer
            .swap(Box::into_raw(Box::new(fresh)), Ordering::Release);
        // SAFETY: from `Box::into_raw` and replaced just now, so ours. No
        // poster touches it: every ticket reserved in it was published (the
        // caller's contract) and new ones use the new ring. Its values were
        // moved out, so dropping it frees only the slots.
        unsafe { Box::from_raw(old) }
    }
}
