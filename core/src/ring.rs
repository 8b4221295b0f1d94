//! The ring's storage: a power-of-two array of slots, each with a stamp that
//! says which ticket's event it holds.
//!
//! The stamp scheme follows Dmitry Vyukov's bounded MPMC queue and
//! crossbeam-queue's `ArrayQueue`, reduced to what a single consumer needs: a
//! poster that owns ticket `t` writes the value and then stores the stamp
//! `published(t)` with `Release`; the consumer at head `h` loads the stamp of
//! slot `h & mask` with `Acquire` and takes the value only if it equals
//! `published(h)`. Stamps of other laps (and the initial 0, which is even)
//! never match, so no reset is needed after a read. Whether a slot is free for
//! a poster is decided by the consumer's published head, not by the stamp: the
//! state word's full check guarantees ticket `t` is handed out only after the
//! consumer has taken ticket `t - capacity`.
//!
//! Why not build on `crossbeam_queue::ArrayQueue`: its head and tail are two
//! separate words, so the notification flags could not share a CAS with the
//! tail, and arm-then-check would need the second poll this crate removes.

use crate::state::{self, TICKET_MASK};
use crate::sync::{AtomicU64, Ordering, UnsafeCell};
use std::mem::MaybeUninit;

/// The largest capacity an EVD can have (2^32 events).
pub const MAX_CAPACITY: usize = 1 << state::MAX_CAP_LOG2;

/// Round a requested capacity up to the ring's power of two.
pub(crate) fn cap_log2_for(capacity: usize) -> Option<u32> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return None;
    }
    Some(capacity.next_power_of_two().trailing_zeros())
}

/// The stamp that marks a slot as holding ticket `t`'s event (odd, so that the
/// initial zero never matches).
#[inline(always)]
pub(crate) const fn published(t: u64) -> u64 {
    ((t & TICKET_MASK) << 1) | 1
}

/// One slot.
pub(crate) struct Slot<T> {
    /// `published(t)` once ticket `t`'s value is written; anything else otherwise.
    stamp: AtomicU64,
    /// The value; initialized exactly when `stamp == published(t)` and the
    /// consumer has not yet taken ticket `t`.
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A ring buffer of `mask + 1` slots.
pub(crate) struct Buffer<T> {
    slots: Box<[Slot<T>]>,
    mask: u64,
    /// The CPU has a write prefetch ([`crate::pace::has_prefetch_for_write`],
    /// read once when the buffer is made, beside `mask`, which every post
    /// reads anyway).
    prefetch: bool,
}

impl<T> Buffer<T> {
    /// Allocate `2^cap_log2` empty slots; `None` if the allocation fails.
    ///
    /// The slots are zeroed memory (stamp 0 means "nothing published"), taken
    /// from `alloc_zeroed`, so a large ring costs no page touching up front
    /// and an impossible size is a `None`, not an abort.
    #[cfg(not(any(loom, shuttle)))]
    pub(crate) fn try_new(cap_log2: u32) -> Option<Self> {
        use std::alloc::{Layout, alloc_zeroed};
        let cap = 1usize.checked_shl(cap_log2)?;
        let layout = Layout::array::<Slot<T>>(cap).ok()?;
        // SAFETY: `layout` has a non-zero size (a slot holds at least its
        // stamp, and cap >= 1).
        let p = unsafe { alloc_zeroed(layout) }.cast::<Slot<T>>();
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` points to `cap` slots allocated by the global allocator
        // with the layout of `[Slot<T>; cap]`, as `Box<[Slot<T>]>` expects.
        // All-zero bytes are a valid `Slot`: a zero `AtomicU64` and a
        // `MaybeUninit`, which any bytes are.
        let slots = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, cap)) };
        Some(Buffer {
            slots,
            mask: (cap - 1) as u64,
            prefetch: crate::pace::has_prefetch_for_write(),
        })
    }

    /// Allocate `2^cap_log2` empty slots (loom's and shuttle's atomics are
    /// not plain memory).
    #[cfg(any(loom, shuttle))]
    pub(crate) fn try_new(cap_log2: u32) -> Option<Self> {
        let cap = 1usize.checked_shl(cap_log2)?;
        let mut v: Vec<Slot<T>> = Vec::new();
        v.try_reserve_exact(cap).ok()?;
        v.extend((0..cap).map(|_| Slot {
            stamp: AtomicU64::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }));
        Some(Buffer {
            slots: v.into_boxed_slice(),
            mask: (cap - 1) as u64,
            prefetch: false,
        })
    }

    /// How many tickets ahead a post prefetches
    /// ([`PREFETCH_AHEAD`](crate::pace::PREFETCH_AHEAD)).
    const PREFETCH_AHEAD: u64 = crate::pace::PREFETCH_AHEAD;

    /// The number of slots.
    #[inline(always)]
    pub(crate) fn capacity(&self) -> u64 {
        self.mask + 1
    }

    #[inline(always)]
    fn slot(&self, t: u64) -> &Slot<T> {
        let i = (t & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // SAFETY: `slots.len() == mask + 1` (both set at construction and
        // never changed), so `t & mask` is in bounds. The compiler cannot see
        // that through the two fields, and every post and dequeue would pay
        // its bounds check.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// Write ticket `t`'s value and publish it.
    ///
    /// Takes a raw pointer, not `&self`: a resize may free this buffer as
    /// soon as it sees the stamp, while this call has not yet returned, and a
    /// `&Buffer` argument would be asserted live for the whole call. After the
    /// slot is found only `&Slot` is held, whose fields are interior-mutable
    /// (the same pattern as `Arc`'s release-then-free).
    ///
    /// # Safety
    /// `this` is live until the stamp store; the caller owns ticket `t` (a
    /// successful reservation) and the consumer has taken ticket
    /// `t - capacity` (the reservation's full check), so no one else reads or
    /// writes this slot's value until the stamp is stored.
    #[inline(always)]
    pub(crate) unsafe fn publish(this: *const Self, t: u64, value: T) {
        // SAFETY: live by the caller's contract; the `&Buffer` made here ends
        // with this block, and the pointer taken from it is only handed to a
        // prefetch, which never dereferences it.
        unsafe {
            if (*this).prefetch {
                // The slot a later post will write: ask for its line now (the
                // poster's half of `crate::pace`).
                let ahead: *const Slot<T> = (*this).slot(t.wrapping_add(Self::PREFETCH_AHEAD));
                crate::pace::prefetch_for_write(ahead);
            }
        }
        // SAFETY: as above.
        let slot = unsafe { (*this).slot(t) };
        // SAFETY: by the caller's contract this thread has exclusive access to
        // the value until the stamp below is stored.
        slot.value.with_mut(|p| unsafe { (*p).write(value) });
        // Release: the consumer's Acquire load of this stamp sees the value.
        slot.stamp.store(published(t), Ordering::Release);
    }

    /// True if ticket `t` has been published (and not yet taken).
    #[inline(always)]
    pub(crate) fn is_published(&self, t: u64) -> bool {
        // Acquire: pairs with the Release in `publish`, so a following `take`
        // reads the written value.
        self.slot(t).stamp.load(Ordering::Acquire) == published(t)
    }

    /// How many tickets from `from` on are published, counting at most
    /// `limit`: the consumer's scan, one stamp load per slot.
    #[inline(always)]
    pub(crate) fn published_run(&self, from: u64, limit: u64) -> u64 {
        let (slots, mask) = (&*self.slots, self.mask);
        let mut n = 0;
        while n < limit {
            let t = from.wrapping_add(n);
            debug_assert!(((t & mask) as usize) < slots.len());
            // SAFETY: as in `slot`: `slots.len() == mask + 1`.
            let slot = unsafe { slots.get_unchecked((t & mask) as usize) };
            // Acquire: pairs with the Release in `publish`, so a following
            // `take` reads the written value.
            if slot.stamp.load(Ordering::Acquire) != published(t) {
                break;
            }
            n += 1;
        }
        n
    }

    /// Move ticket `t`'s value out if it has been published: the consumer's
    /// one-event dequeue, with one slot lookup for the stamp and the value.
    ///
    /// # Safety
    /// The caller is the consumer (or holds the token) and `t` is its head;
    /// after a `Some` the head moves past `t` before anything reads the
    /// slot again, so the value is taken at most once.
    #[inline(always)]
    pub(crate) unsafe fn take_published(&self, t: u64) -> Option<T> {
        let slot = self.slot(t);
        // Acquire: pairs with the Release in `publish`, so the read below
        // sees the written value.
        if slot.stamp.load(Ordering::Acquire) != published(t) {
            return None;
        }
        // SAFETY: published and not yet taken (the caller's contract), so
        // initialized; the poster of the next lap cannot write until the
        // consumer publishes a head past `t`.
        Some(slot.value.with_mut(|p| unsafe { (*p).assume_init_read() }))
    }

    /// Move the events of tickets `[head, head + count)` from `old` into
    /// `fresh` under the same ticket numbers, waiting for any still being
    /// written (a resize).
    ///
    /// # Safety
    /// The caller is the consumer at `head`, every ticket in the range was
    /// handed out, and no ticket past it can be handed out meanwhile.
    pub(crate) unsafe fn move_queued(old: &Self, fresh: &Self, head: u64, count: u64) {
        let backoff = crate::sync::Backoff::new();
        for t in (0..count).map(|i| head.wrapping_add(i)) {
            // A poster that reserved before the resize is still writing: wait.
            while !old.is_published(t) {
                backoff.snooze();
            }
            // SAFETY: published and not taken; we are the consumer; the
            // ticket is republished in `fresh` with the same number, which
            // nobody else writes (no ticket is handed out meanwhile).
            unsafe { Self::publish(fresh, t, old.take(t)) };
        }
    }

    /// Move ticket `t`'s value out.
    ///
    /// # Safety
    /// The caller is the consumer (or holds the token), `t` is at or past its
    /// head, and `is_published(t)` returned true or `published_run` counted
    /// `t` (an Acquire load saw its stamp); the value is taken at most once.
    #[inline(always)]
    pub(crate) unsafe fn take(&self, t: u64) -> T {
        // SAFETY: published and not yet taken, so initialized; the poster of
        // the next lap cannot write until the consumer publishes a head past `t`.
        self.slot(t)
            .value
            .with_mut(|p| unsafe { (*p).assume_init_read() })
    }
}
