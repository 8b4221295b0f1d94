//! The throughput floor rows: a single-poster ring of stamped slots (the
//! slot layout evd uses: a `u64` stamp and the value) that does no
//! read-modify-write at all, and the same ring with one compare-and-swap per
//! post on a word of the poster's own, as every multi-poster ring that
//! reserves with an RMW pays (evd's reservation CAS, ArrayQueue's tail CAS).
//!
//! Not a product and not a peer: the two rows bound what a ring with these
//! slots can do on the machine of the run. The first shows the cost of the
//! slot traffic alone; the second what one locked instruction per post adds
//! (on x86 it waits for the poster's previous slot stores to reach its
//! cache, that is for the line the consumer just read to come back). A
//! busy evd row near the second is at the speed of its design; a target
//! above the second's ratio to a peer is beyond any ring of that design on
//! that run.

use crate::payload::Payload;
use crossbeam_utils::CachePadded;
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The stamp of a slot holding ticket `t`: never 0, which a fresh slot has.
fn published(t: u64) -> u64 {
    (t << 1) | 1
}

struct Slot<P> {
    /// `published(t)` once ticket `t`'s value is written.
    stamp: AtomicU64,
    /// Initialized while `stamp == published(t)` and ticket `t` is not
    /// taken.
    value: UnsafeCell<MaybeUninit<P>>,
}

/// `P` is a [`Payload`], `Copy`: values left in the ring need no drop.
struct Ring<P> {
    slots: Box<[Slot<P>]>,
    mask: u64,
    /// The consumer's next ticket; written only by the consumer.
    head: CachePadded<AtomicU64>,
}

// SAFETY: each value moves from the one poster to the one consumer exactly
// once, published by its slot's stamp (Release store, Acquire load) and
// freed for reuse by the head (Release store, Acquire load); `P: Send`.
unsafe impl<P: Send> Sync for Ring<P> {}

/// The posting side (one only: it is not `Clone`).
pub struct StampPoster<P> {
    ring: Arc<Ring<P>>,
    /// The next ticket.
    tail: Cell<u64>,
    /// The last head loaded; reloaded only when the ring looks full.
    head_hint: Cell<u64>,
    /// The word of the one CAS per post, if this ring makes one.
    rmw: Option<CachePadded<AtomicU64>>,
}

/// The consuming side.
pub struct StampConsumer<P> {
    ring: Arc<Ring<P>>,
    head: u64,
}

/// A ring of `capacity` (a power of two) slots; with `rmw` every post makes
/// one compare-and-swap on a word of the poster's own before it writes.
///
/// ```
/// let (tx, mut rx) = evd_bench::stamp_ring::stamp_ring::<u64>(2, true);
/// assert!(tx.try_send(1).is_ok());
/// assert!(tx.try_send(2).is_ok());
/// assert_eq!(tx.try_send(3), Err(3));
/// assert_eq!((rx.try_recv(), rx.try_recv(), rx.try_recv()), (Some(1), Some(2), None));
/// ```
pub fn stamp_ring<P: Payload>(capacity: usize, rmw: bool) -> (StampPoster<P>, StampConsumer<P>) {
    assert!(capacity.is_power_of_two());
    let ring = Arc::new(Ring {
        slots: (0..capacity)
            .map(|_| Slot {
                stamp: AtomicU64::new(0),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect(),
        mask: capacity as u64 - 1,
        head: CachePadded::new(AtomicU64::new(0)),
    });
    let poster = StampPoster {
        ring: ring.clone(),
        tail: Cell::new(0),
        head_hint: Cell::new(0),
        rmw: rmw.then(|| CachePadded::new(AtomicU64::new(0))),
    };
    (poster, StampConsumer { ring, head: 0 })
}

impl<P: Payload> StampPoster<P> {
    /// Post `p`, or hand it back if the ring is full.
    #[inline]
    pub fn try_send(&self, p: P) -> Result<(), P> {
        let r = &*self.ring;
        let t = self.tail.get();
        let capacity = r.mask + 1;
        if t - self.head_hint.get() >= capacity {
            // Acquire: the consumer moved the values out before it stored
            // the head that frees their slots.
            self.head_hint.set(r.head.load(Ordering::Acquire));
            if t - self.head_hint.get() >= capacity {
                return Err(p);
            }
        }
        if let Some(word) = &self.rmw {
            let w = word.load(Ordering::Relaxed);
            // The cost under test; nothing depends on the result.
            let _ = word.compare_exchange(w, w + 1, Ordering::AcqRel, Ordering::Relaxed);
        }
        let slot = &r.slots[(t & r.mask) as usize];
        // SAFETY: this is the only poster and ticket `t` is its own; the
        // head check above saw the consumer take ticket `t - capacity`, so
        // nobody reads or writes this value until the stamp below.
        unsafe { (*slot.value.get()).write(p) };
        // Release: the value is written before the consumer sees the stamp.
        slot.stamp.store(published(t), Ordering::Release);
        self.tail.set(t + 1);
        Ok(())
    }
}

impl<P: Payload> StampConsumer<P> {
    /// The next value, if it has been posted.
    #[inline]
    pub fn try_recv(&mut self) -> Option<P> {
        let r = &*self.ring;
        let h = self.head;
        let slot = &r.slots[(h & r.mask) as usize];
        // Acquire: pairs with the poster's Release stamp store.
        if slot.stamp.load(Ordering::Acquire) != published(h) {
            return None;
        }
        // SAFETY: the stamp says ticket `h`'s value is written, and only
        // this consumer takes it, once (the head moves past it below).
        let p = unsafe { (*slot.value.get()).assume_init_read() };
        self.head = h + 1;
        // Release: the value was moved out before the poster reuses the slot.
        r.head.store(h + 1, Ordering::Release);
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_arrives_once_in_order_across_threads() {
        for rmw in [false, true] {
            let (tx, mut rx) = stamp_ring::<u64>(8, rmw);
            let n = 100_000u64;
            let poster = std::thread::spawn(move || {
                for i in 0..n {
                    let mut v = i;
                    while let Err(back) = tx.try_send(v) {
                        v = back;
                        std::hint::spin_loop();
                    }
                }
            });
            let mut next = 0;
            while next < n {
                if let Some(v) = rx.try_recv() {
                    assert_eq!(v, next);
                    next += 1;
                }
            }
            poster.join().unwrap();
            assert_eq!(rx.try_recv(), None);
        }
    }
}
