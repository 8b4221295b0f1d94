//! The throughput floor rows: rings of evd's slot layout (a `u64` stamp and the value) that only
//! move events. [`Reserve`] says how a poster takes its ticket: no read-modify-write at all (one
//! poster: the slot traffic alone), one CAS on a shared tail (as evd's reservation and
//! `ArrayQueue`'s tail), or one fetch-and-add (no retry loop, but a ticket cannot be handed back).
//! Not a product and not a peer: what a ring of these slots reaches on the machine of the run.

use crate::payload::Payload;
use crossbeam_utils::CachePadded;
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a poster takes its ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// The one poster counts its tickets itself: no RMW.
    Own,
    /// One CAS on a tail shared by every poster.
    CasTail,
    /// One fetch-and-add on a tail shared by every poster; a poster whose ticket's slot is still in
    /// use waits for the consumer to free it (a ticket cannot be handed back).
    FaaTail,
}

/// The stamp of a slot holding ticket `t`: never 0, which a fresh slot has.
fn published(t: u64) -> u64 {
    (t << 1) | 1
}

struct Slot<P> {
    /// `published(t)` once ticket `t`'s value is written.
    stamp: AtomicU64,
    /// Initialized while `stamp == published(t)` and ticket `t` is not taken.
    value: UnsafeCell<MaybeUninit<P>>,
}

/// `P` is a [`Payload`], `Copy`: values left in the ring need no drop.
struct Ring<P> {
    slots: Box<[Slot<P>]>,
    mask: u64,
    /// The consumer's next ticket; written only by the consumer.
    head: CachePadded<AtomicU64>,
    /// The next ticket, under [`Reserve::CasTail`].
    tail: CachePadded<AtomicU64>,
}

// SAFETY: each value moves from the poster that reserved its ticket to the one consumer exactly
// once, published by its slot's stamp (Release store, Acquire load) and freed for reuse by the head
// (Release store, Acquire load); a ticket has one owner (the only poster under `Own`, the winner of
// the tail CAS under `CasTail`); `P: Send`.
unsafe impl<P: Send> Sync for Ring<P> {}

/// A posting side: one under [`Reserve::Own`], any number ([`StampPoster::another`]) otherwise.
pub struct StampPoster<P> {
    ring: Arc<Ring<P>>,
    reserve: Reserve,
    /// The next ticket, under [`Reserve::Own`].
    own_tail: Cell<u64>,
    /// The last head loaded; reloaded only when the ring looks full.
    head_hint: Cell<u64>,
}

/// The consuming side.
pub struct StampConsumer<P> {
    ring: Arc<Ring<P>>,
    head: u64,
}

/// A ring of `capacity` (a power of two) slots whose posters take their tickets as `reserve` says.
pub fn stamp_ring<P: Payload>(
    capacity: usize,
    reserve: Reserve,
) -> (StampPoster<P>, StampConsumer<P>) {
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
        tail: CachePadded::new(AtomicU64::new(0)),
    });
    let poster = StampPoster {
        ring: ring.clone(),
        reserve,
        own_tail: Cell::new(0),
        head_hint: Cell::new(0),
    };
    (poster, StampConsumer { ring, head: 0 })
}

impl<P: Payload> StampPoster<P> {
    /// Another poster on the same ring: `None` under [`Reserve::Own`].
    pub fn another(&self) -> Option<Self> {
        (self.reserve != Reserve::Own).then(|| StampPoster {
            ring: self.ring.clone(),
            reserve: self.reserve,
            own_tail: Cell::new(0),
            head_hint: Cell::new(self.head_hint.get()),
        })
    }

    /// Whether ticket `t` would overrun the consumer: checked against the cached head first, then
    /// against a fresh one.
    #[inline]
    fn full(&self, t: u64) -> bool {
        let capacity = self.ring.mask + 1;
        if t.wrapping_sub(self.head_hint.get()) < capacity {
            return false;
        }
        // Acquire: the consumer moved the values out before it stored the head that frees their
        // slots.
        self.head_hint.set(self.ring.head.load(Ordering::Acquire));
        t.wrapping_sub(self.head_hint.get()) >= capacity
    }

    /// Post `p`, or hand it back if the ring is full.
    #[inline]
    pub fn try_send(&self, p: P) -> Result<(), P> {
        let r = &*self.ring;
        let t = match self.reserve {
            Reserve::Own => {
                let t = self.own_tail.get();
                if self.full(t) {
                    return Err(p);
                }
                self.own_tail.set(t + 1);
                t
            }
            Reserve::CasTail => loop {
                // Relaxed: the tail only hands out tickets; the slot's stamp and the head order the
                // data.
                let t = r.tail.load(Ordering::Relaxed);
                if self.full(t) {
                    return Err(p);
                }
                if r.tail
                    .compare_exchange_weak(t, t + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    break t;
                }
            },
            Reserve::FaaTail => {
                // Relaxed: as for the CAS.
                let t = r.tail.fetch_add(1, Ordering::Relaxed);
                let mut spins = 0u32;
                while self.full(t) {
                    spins += 1;
                    if spins.is_multiple_of(64) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                t
            }
        };
        let slot = &r.slots[(t & r.mask) as usize];
        // SAFETY: ticket `t` is this poster's alone (see `Ring`'s Sync), and the full check saw the
        // consumer take ticket `t - capacity`, so nobody reads or writes this value until the stamp
        // below.
        unsafe { (*slot.value.get()).write(p) };
        // Release: the value is written before the consumer sees the stamp.
        slot.stamp.store(published(t), Ordering::Release);
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
        // SAFETY: the stamp says ticket `h`'s value is written, and only this consumer takes it,
        // once (the head moves past it below).
        let p = unsafe { (*slot.value.get()).assume_init_read() };
        self.head = h + 1;
        // Release: the value was moved out before a poster reuses the slot.
        r.head.store(h + 1, Ordering::Release);
        Some(p)
    }
}
