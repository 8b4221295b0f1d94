//! The CNO's shared engine: the slot table, the free list and the ready ring,
//! with every atomic operation on a slot word ([`super::slot`]) and its
//! ordering argued here; and the typed binding an EVD's consumer keeps.
//!
//! The ready ring is an EVD of slot indices (`u32`) with room for every slot.
//! Each slot is in it at most once (`IN_RING`), so a push never finds it
//! full; the CNO's waiter is that EVD's consumer, so waiting, timeouts, the
//! async future and the eventfd are the EVD's own.
//!
//! There are twice as many slots as bindings: a slot released while its
//! index is still queued is bound again only after the CNO's waiter popped
//! it (`FREEING`), and the spare slots keep such slots from refusing a bind.

use super::slot;
use crate::PostError;
use crate::error::{CnoError, CreateError};
use crate::notify::{CnoTarget, Reached};
use crate::poster::Poster;
use crate::state::Notify;
use crate::sync::{Arc, AtomicBool, AtomicU64, Backoff, Mutex, Ordering};
use crate::unwind::Panics;
use crossbeam_utils::CachePadded;
use std::collections::VecDeque;

/// One binding's entry: its slot word and its key.
struct Slot {
    /// The slot word ([`slot`]): IN_RING, PENDING, FIRED.
    state: AtomicU64,
    /// The binding's key. Written by `bind` before the binding can trigger
    /// (before the EVD's enable CAS releases it); read by the pop before its
    /// CAS on `state` (see [`CnoCore::take`]).
    key: AtomicU64,
}

/// Slots not bound, the count of bindings, and the keys nobody holds.
struct FreeList {
    /// Free slot indices, oldest first.
    free: VecDeque<u32>,
    /// Live bindings (at most `CnoCore::max`).
    bound: usize,
    /// Slots released while their index was queued (FREEING): the waiter's
    /// pop moves them to `free`, or a bind with no free slot reclaims one.
    freeing: Vec<u32>,
    /// For each key below the slot count: how many live bindings hold it.
    /// A key the CNO hands out is one nobody holds. (A binding moved to
    /// another slot keeps its key, so a free slot's index may be held.)
    key_holders: Box<[u32]>,
    /// Keys below the slot count in the order nobody came to hold them
    /// (never held ones first, lowest first), each with the number of the
    /// release that let it go (0: never held). An entry is current while
    /// its key is unheld and `last_release` still names it; the others are
    /// skipped, and dropped when they outnumber the keys.
    unheld: VecDeque<(u64, u64)>,
    /// For each key below the slot count: the number of the release that
    /// let it go last (0: never held).
    last_release: Box<[u64]>,
    /// Releases that let a key go, so far.
    releases: u64,
}

impl FreeList {
    /// The free list of `slots` slots, every one free, with the room each
    /// list can ever need (so that binding and unbinding never allocate);
    /// `None` if that memory cannot be had.
    fn try_new(slots: usize) -> Option<Self> {
        let mut free = VecDeque::new();
        free.try_reserve_exact(slots).ok()?;
        free.extend(0..slots as u32);
        // `hold` prunes `unheld` once it has more than twice the keys.
        let mut unheld = VecDeque::new();
        unheld.try_reserve_exact(2 * slots + 1).ok()?;
        unheld.extend((0..slots as u64).map(|k| (k, 0)));
        Some(FreeList {
            free,
            bound: 0,
            freeing: filled(0, slots, |_| 0)?,
            key_holders: filled(slots, slots, |_| 0)?.into(),
            unheld,
            last_release: filled(slots, slots, |_| 0)?.into(),
            releases: 0,
        })
    }

    /// A key for a binding that asked for none: the one nobody has held
    /// for the longest (never held ones first), so a freed key, which a
    /// waiter may still hold from an earlier pop, names a new EVD as late
    /// as possible. There are twice as many keys as bindings, so one is
    /// unheld.
    fn new_key(&mut self) -> u64 {
        while let Some((key, n)) = self.unheld.pop_front() {
            if self.key_holders[key as usize] == 0 && self.last_release[key as usize] == n {
                return key;
            }
        }
        unreachable!("at most half the keys below the slot count are held")
    }

    /// Count a binding's hold on `key` (`+1`) or its release (`-1`).
    fn hold(&mut self, key: u64, by: i32) {
        let Some(k) = usize::try_from(key)
            .ok()
            .filter(|&k| k < self.key_holders.len())
        else {
            return;
        };
        let n = &mut self.key_holders[k];
        *n = n
            .checked_add_signed(by)
            .expect("a key released once per hold");
        if *n == 0 {
            self.releases += 1;
            self.last_release[k] = self.releases;
            self.unheld.push_back((key, self.releases));
            if self.unheld.len() > 2 * self.key_holders.len() {
                let (holders, last) = (&self.key_holders, &self.last_release);
                self.unheld
                    .retain(|&(k, n)| holders[k as usize] == 0 && last[k as usize] == n);
            }
        }
    }
}

/// `len` values of `f` (by index) with room for `room`, or `None` if that
/// memory cannot be had (a large CNO's tables are refused with an error, as
/// its ready ring is, rather than aborting the process).
fn filled<T>(len: usize, room: usize, f: impl FnMut(usize) -> T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(room).ok()?;
    v.extend((0..len).map(f));
    Some(v)
}

/// The CNO's shared state: held by the [`Cno`](crate::Cno), every
/// [`CnoHandle`](crate::CnoHandle) and every EVD that was bound to it.
pub(crate) struct CnoCore {
    slots: Box<[CachePadded<Slot>]>,
    /// The most bindings at once.
    max: usize,
    /// Locked only to bind and unbind, and by the waiter's pop of a released
    /// slot (never by a post).
    free: Mutex<FreeList>,
    /// The ready ring's posting side; its consumer is the `Cno`. Dropping the
    /// `Cno` closes the ring.
    ready: Poster<u32>,
    /// The `Cno` was dropped (set before its ring closes). Read by enables
    /// and by triggers that find their index in the ring already; its own
    /// line, written once.
    gone: CachePadded<AtomicBool>,
}

impl CnoCore {
    /// The slots a CNO for `max` bindings has, and its ready ring's room.
    pub(crate) fn slots_for(max: usize) -> Option<usize> {
        max.checked_mul(2).filter(|&n| n <= u32::MAX as usize)
    }

    /// A CNO for `max` bindings whose ready ring (room for every slot) is fed
    /// through `ready`.
    ///
    /// # Errors
    /// [`CreateError::AllocFailed`] (with the slot count) if the slot table
    /// or the free list cannot be allocated.
    pub(crate) fn new(max: usize, ready: Poster<u32>) -> Result<Self, CreateError> {
        let slots = Self::slots_for(max).expect("checked by the caller");
        debug_assert!(ready.capacity() >= slots);
        let failed = CreateError::AllocFailed { capacity: slots };
        let slot = |_| {
            CachePadded::new(Slot {
                state: AtomicU64::new(0),
                key: AtomicU64::new(0),
            })
        };
        Ok(CnoCore {
            max,
            slots: filled(slots, slots, slot).ok_or(failed)?.into(),
            free: Mutex::new(FreeList::try_new(slots).ok_or(failed)?),
            ready,
            gone: CachePadded::new(AtomicBool::new(false)),
        })
    }

    /// The most bindings at once.
    pub(crate) fn capacity(&self) -> usize {
        self.max
    }

    fn with_free<R>(&self, f: impl FnOnce(&mut FreeList) -> R) -> R {
        f(&mut self.free.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Bindings now.
    pub(crate) fn bound(&self) -> usize {
        self.with_free(|f| f.bound)
    }

    /// Take a free slot for a binding with `key` (if `None`, the key no
    /// live binding has held for the longest, [`FreeList::new_key`]).
    /// `counted`: a new binding (a move within this CNO is not). Returns the
    /// slot and the key.
    pub(crate) fn bind(&self, key: Option<u64>, counted: bool) -> Result<(u32, u64), CnoError> {
        self.take_slot(key, counted, true)
    }

    /// [`CnoCore::bind`] for a binding that moves within this CNO to a slot
    /// whose index is not in the ready ring (so that its next trigger joins
    /// the ring at its tail), keeping `key`; `None` if every spare slot
    /// waits for the waiter's pop (taking one of those back would only
    /// trade one stale entry for another).
    pub(crate) fn bind_fresh(&self, key: u64) -> Option<u32> {
        self.take_slot(Some(key), false, false)
            .ok()
            .map(|(slot, _)| slot)
    }

    /// [`CnoCore::bind`], taking back a releasing slot only if `reclaim`.
    fn take_slot(
        &self,
        key: Option<u64>,
        counted: bool,
        reclaim: bool,
    ) -> Result<(u32, u64), CnoError> {
        let full = CnoError::Full { capacity: self.max };
        let (slot, key) = self.with_free(|f| {
            if counted && f.bound == self.max {
                return Err(full);
            }
            let slot = match f.free.pop_front() {
                Some(slot) => slot,
                None if !reclaim => return Err(full),
                // Every free slot is bound or waits for the waiter's pop of
                // its stale index (rare, with twice the slots): take one of
                // those back. Under the lock, so its pop cannot free it too.
                None => {
                    let slot = f.freeing.pop().ok_or(full)?;
                    let cell = &self.slots[slot as usize].state;
                    // AcqRel, as `release`: ordered after it, before the
                    // triggers of the new binding.
                    let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |s| {
                        Some(slot::reclaim(s))
                    });
                    slot
                }
            };
            f.bound += usize::from(counted);
            let key = key.unwrap_or_else(|| f.new_key());
            f.hold(key, 1);
            Ok((slot, key))
        })?;
        // Release: a pop that sees a trigger of this binding (through the
        // EVD's enable and reservation, then the trigger's slot CAS) sees
        // this key; see `take`.
        self.slots[slot as usize].key.store(key, Ordering::Release);
        Ok((slot, key))
    }

    /// Give `slot` back (`counted` as for [`CnoCore::bind`]). The caller
    /// removed its pending key first and no trigger of its binding can come
    /// (the disable barrier). A slot whose index is still queued is freed by
    /// the waiter's pop instead.
    pub(crate) fn release(&self, slot: u32, counted: bool) {
        let cell = &self.slots[slot as usize].state;
        // Under the lock: a pop that finds FREEING looks for the slot in
        // `freeing` under it, so the slot is there by then.
        self.with_free(|f| {
            // Relaxed: written by the bind of this binding, which the
            // consumer releasing it made (or saw, moving it between threads).
            f.hold(self.slots[slot as usize].key.load(Ordering::Relaxed), -1);
            let mut s = cell.load(Ordering::Relaxed);
            let r = loop {
                let r = slot::release(s);
                // AcqRel: ordered after the barrier and the removal
                // (Acquire), and before the pop that frees it (Release).
                match cell.compare_exchange_weak(s, r.new, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => break r,
                    Err(cur) => s = cur,
                }
            };
            f.bound -= usize::from(counted);
            debug_assert!(!f.free.contains(&slot), "slot {slot} released twice");
            if r.free_now {
                f.free.push_back(slot);
            } else {
                f.freeing.push(slot);
            }
        });
    }

    /// Triggers that reached `slot` so far.
    pub(crate) fn fired(&self, slot: u32) -> u32 {
        // Acquire: pairs with the trigger's Release CAS, so a consumer that
        // sees the count reached has the triggering thread's reads of the
        // EVD's link behind it and may rewrite the link.
        slot::fired(self.slots[slot as usize].state.load(Ordering::Acquire))
    }

    /// Wait until `slot` has seen `expected` triggers (the disable barrier:
    /// a trigger runs between a reservation that took `CNO_ARMED` and this
    /// count; the wait is that window).
    pub(crate) fn wait_fired(&self, slot: u32, expected: u32) {
        let backoff = Backoff::new();
        while self.fired(slot) != expected {
            backoff.snooze();
        }
    }

    /// A trigger reached `slot`: make its key due and push the index unless
    /// it is in the ring already. Two RMWs at most: the slot CAS and the
    /// ring's reservation CAS (plus the ring's wake if the CNO's waiter
    /// sleeps).
    ///
    /// The ring's wake runs the waiter's waker (user code): its panic is
    /// kept in `panics`, for the caller to raise once it has acted on the
    /// answer, which a panic must not skip (a waker that dropped the `Cno`
    /// before it panicked took the pushed key with it: `CnoGone`, and the
    /// EVD's own targets must still be told).
    pub(crate) fn trigger(&self, slot: u32, panics: &mut Panics) -> Reached {
        let cell = &self.slots[slot as usize].state;
        let mut s = cell.load(Ordering::Relaxed);
        let t = loop {
            let t = slot::trigger(s);
            // Release: orders this thread's read of the EVD's link (and the
            // event it published) before the count the disable barrier waits
            // for, and before the PENDING a pop acquires. Acquire: a push
            // below follows a pop that cleared IN_RING (its take CAS, AcqRel,
            // after the ring's head store); acquiring that clear makes the
            // push's reservation see that head, which the "never full"
            // argument needs (a stale head would count a taken slot as
            // queued). Free on x86, where every CAS is a full barrier.
            match cell.compare_exchange_weak(s, t.new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break t,
                Err(cur) => s = cur,
            }
        };
        if !t.push {
            return if self.is_gone() {
                Reached::CnoGone
            } else {
                Reached::Ready
            };
        }
        let backoff = Backoff::new();
        loop {
            // Published first; the wake it owes (the waiter's waker: user
            // code) is delivered with its panic kept, so that the answer
            // below is given whatever the waker does.
            // (Tested here too: the common push owes nothing, and pays no
            // `catch_unwind` then.)
            let posted = self.ready.post_undelivered(slot).map(|notify| {
                if notify != Notify::None {
                    panics.run(|| self.ready.deliver(notify));
                }
            });
            match posted {
                // Pushed while the `Cno` is being dropped (it marks itself
                // gone, then its ring closes and discards what is queued):
                // the EVD's own targets are told, as when the ring refuses.
                // Its waiter pops nothing any more (a key it popped before
                // the drop makes this one wake more); the key left pending
                // moves with the EVD if it is moved.
                Ok(()) if self.is_gone() => return Reached::CnoGone,
                Ok(()) => return Reached::Ready,
                Err(PostError::Closed(_)) => return Reached::CnoGone,
                // Unreachable: every slot is in the ring at most once (its
                // IN_RING is cleared only by the pop that removed it) and the
                // ring has room for every slot. Retrying keeps the key if
                // that argument were ever wrong.
                Err(PostError::Full(_)) => {
                    debug_assert!(false, "the CNO's ready ring is full");
                    backoff.snooze()
                }
            }
        }
    }

    /// True if `slot`'s index is in the ready ring (or being pushed).
    pub(crate) fn is_queued(&self, slot: u32) -> bool {
        // Acquire: as `fired`; a stale answer only makes a disable move its
        // binding to a fresh slot for nothing.
        self.slots[slot as usize].state.load(Ordering::Acquire) & slot::IN_RING != 0
    }

    /// Remove `slot`'s pending key (disable, unbind, move). True if one was
    /// pending: nobody will be given it now.
    pub(crate) fn remove(&self, slot: u32) -> bool {
        let cell = &self.slots[slot as usize].state;
        // AcqRel: Acquire sees the key's trigger (so its count is behind this
        // thread too); Release orders the removal before a later bind of the
        // slot (through the free list's lock as well).
        let old = cell
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |s| {
                slot::is_pending(s).then_some(slot::remove(s))
            })
            .unwrap_or(0);
        slot::is_pending(old)
    }

    /// The CNO's waiter popped `slot` from the ring: its key if one was due,
    /// `None` if the entry was stale (its key removed; a released slot is
    /// freed here).
    ///
    /// The key is read before the CAS that clears PENDING. If the CAS
    /// succeeds with PENDING set, the slot is still bound to the binding
    /// whose trigger set it, and that binding's key was stored before the
    /// trigger (released through the EVD's enable, the reservation and the
    /// trigger's CAS; acquired by the load of `s`). A later binding of the
    /// slot needs the slot freed, which needs this pop (or a release that
    /// found IN_RING clear, which cannot precede this pop): its key store
    /// comes after this CAS, so the key load cannot see it.
    pub(crate) fn take(&self, slot: u32) -> Option<u64> {
        let cell = &self.slots[slot as usize];
        let mut s = cell.state.load(Ordering::Acquire);
        loop {
            let key = cell.key.load(Ordering::Acquire);
            let t = slot::take(s);
            // AcqRel: Release orders this pop before a `remove` that reads
            // its word (so before a rebind's key store); Acquire as the load.
            match cell
                .state
                .compare_exchange_weak(s, t.new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if t.free {
                        self.free_after_pop(slot);
                    }
                    return t.deliver.then_some(key);
                }
                Err(cur) => s = cur,
            }
        }
    }

    /// The pop of a releasing slot's stale index cleared its `FREEING`: move
    /// the slot from `freeing` to `free`, unless it is no longer waiting for
    /// this pop. Between the pop's CAS and this lock a bind may have
    /// reclaimed it (it is not in `freeing`), and that binding may even
    /// have been triggered (pushing the index again) and released (back in
    /// `freeing`, with `FREEING` set again): then the slot waits for the pop
    /// of that new entry, and freeing it here would let a bind take a slot
    /// whose index is still queued.
    fn free_after_pop(&self, slot: u32) {
        let cell = &self.slots[slot as usize].state;
        self.with_free(|f| {
            // Relaxed: `FREEING` is set only by a release and cleared by a
            // reclaim, both under this lock, or by a pop; a pop's clear read
            // as still set leaves the move to that pop, which locks next.
            if slot::awaits_its_pop(cell.load(Ordering::Relaxed)) {
                return;
            }
            if let Some(i) = f.freeing.iter().position(|&x| x == slot) {
                f.freeing.swap_remove(i);
                f.free.push_back(slot);
            }
        });
    }

    /// True once the CNO was dropped.
    pub(crate) fn is_gone(&self) -> bool {
        // Acquire: pairs with `mark_gone`.
        self.gone.load(Ordering::Acquire)
    }

    /// The `Cno` is being dropped; its ring closes next, and the keys in it
    /// are discarded.
    pub(crate) fn mark_gone(&self) {
        // Release/Acquire with `is_gone`: an enable that sees it refuses, a
        // trigger that sees it after its push notifies the EVD itself. A
        // trigger that read it clear may still have queued a key that the
        // drop then discards, as one queued before (see the `Cno` docs).
        self.gone.store(true, Ordering::Release);
    }
}

/// An EVD's binding to a CNO, typed: held by the EVD's consumer
/// ([`Consumer`](crate::Consumer)), the only side that reads it. The EVD's
/// shared state holds only the trigger's end of it
/// ([`CnoLink`](crate::notify::CnoLink)).
#[derive(Clone)]
pub(crate) struct Binding {
    pub(crate) core: Arc<CnoCore>,
    pub(crate) slot: u32,
    pub(crate) key: u64,
}

impl CnoTarget for CnoCore {
    fn trigger(&self, slot: u32, panics: &mut Panics) -> Reached {
        CnoCore::trigger(self, slot, panics)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
