//! The word of one CNO slot (one binding's entry in the ready set), and the
//! pure transitions on it. Public for the fuzz crate, hidden from the docs,
//! not part of the semver API.
//!
//! A CNO's ready set is a FIFO ring of slot indices (an EVD of `u32`, see
//! [`crate::cno`]) plus one word per slot. The word says whether the slot's
//! index is in the ring and whether its binding's key is pending delivery, and
//! counts the triggers that reached it:
//!
//! | bits  | field      | meaning |
//! |-------|------------|---------|
//! | 0     | `IN_RING`  | the slot's index is in the ring (or being pushed): at most once, so the ring never overflows |
//! | 1     | `PENDING`  | the binding's key is due: the next pop of the index delivers it |
//! | 2     | `FREEING`  | unbound while its index was in the ring: the pop of that stale index frees the slot |
//! | 3–31  | —          | zero |
//! | 32–63 | `FIRED`    | triggers that reached this slot, modulo 2^32 (the disable barrier counts them) |
//!
//! | operation (who) | function | new word | side effect after CAS |
//! |---|---|---|---|
//! | trigger (the poster, closer or lossy poster that took `CNO_ARMED`) | [`trigger`] | +PENDING, FIRED+1; +IN_RING if it was clear | push the index if IN_RING was clear |
//! | pop (the CNO's waiter, after taking the index from the ring) | [`take`] | −IN_RING −PENDING | deliver the key if PENDING was set; otherwise the entry is stale (its key was removed) |
//! | remove (the EVD's consumer: disable, unbind, move) | [`remove`] | −PENDING | the pending key is gone; a stale index may stay in the ring until popped |
//! | release (the EVD's consumer, after remove and the disable barrier) | [`release`] | +FREEING if IN_RING | free the slot now if its index is not in the ring |
//! | pop of a releasing slot (the CNO's waiter) | [`take`] | −IN_RING −FREEING | free the slot |
//! | bind with no free slot left (a consumer) | [`reclaim`] | −FREEING | bind the releasing slot; its stale entry will carry the new key |
//! | a pop's free-list step, under the free list's lock (the CNO's waiter) | [`awaits_its_pop`] | — (a load) | move the slot to the free list unless it waits for a pop again (reclaimed, triggered and released since this pop's CAS) |
//!
//! A slot is bound again once its index has left the ring, so a new
//! binding's first trigger pushes its own entry: its key never waits behind
//! a stale entry that another EVD's poster may still be pushing. Only when
//! every free slot is taken does a bind reclaim a releasing one; its key then
//! rides the stale entry (served at that entry's place, once). The key itself
//! is read by the pop before its CAS (see `CnoCore::take`).

/// The slot's index is in the ring (or a trigger is pushing it).
pub const IN_RING: u64 = 1 << 0;
/// The binding's key is due.
pub const PENDING: u64 = 1 << 1;
/// Unbound while its index was in the ring: the pop frees the slot.
pub const FREEING: u64 = 1 << 2;
const FIRED_SHIFT: u32 = 32;
const FIRED_ONE: u64 = 1 << FIRED_SHIFT;
const FLAGS: u64 = IN_RING | PENDING | FREEING;

/// Triggers that reached the slot, modulo 2^32.
///
/// ```
/// use evd::cno::slot::*;
/// assert_eq!(fired(trigger(0).new), 1);
/// ```
#[inline]
pub const fn fired(s: u64) -> u32 {
    (s >> FIRED_SHIFT) as u32
}

/// Outcome of [`trigger`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The word to install.
    pub new: u64,
    /// The index was not in the ring: the trigger must push it.
    pub push: bool,
}

/// A trigger reached the slot: the key is due, and the index goes into the
/// ring unless it is there already.
///
/// ```
/// use evd::cno::slot::*;
/// let first = trigger(0);
/// assert!(first.push && first.new & PENDING != 0);
/// let second = trigger(first.new);
/// assert!(!second.push, "in the ring once");
/// ```
#[inline]
pub const fn trigger(s: u64) -> Trigger {
    debug_assert!(s & !(FLAGS | (u32::MAX as u64) << FIRED_SHIFT) == 0);
    debug_assert!(s & FREEING == 0, "a trigger of a released slot");
    let push = s & IN_RING == 0;
    Trigger {
        new: s.wrapping_add(FIRED_ONE) | IN_RING | PENDING,
        push,
    }
}

/// Outcome of [`take`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Take {
    /// The word to install.
    pub new: u64,
    /// The key is delivered (it was pending); otherwise the entry was stale.
    pub deliver: bool,
    /// The slot was released while its index was queued: free it now.
    pub free: bool,
}

/// The CNO's waiter popped the slot's index from the ring.
///
/// ```
/// use evd::cno::slot::*;
/// let t = take(trigger(0).new);
/// assert!(t.deliver && t.new & (IN_RING | PENDING) == 0);
/// assert!(!take(remove(trigger(0).new)).deliver, "removed: stale");
/// ```
#[inline]
pub const fn take(s: u64) -> Take {
    debug_assert!(
        s & IN_RING != 0,
        "a pop of an index that is not in the ring"
    );
    debug_assert!(
        s & (FREEING | PENDING) != (FREEING | PENDING),
        "a released slot with a pending key"
    );
    Take {
        new: s & !FLAGS,
        deliver: s & PENDING != 0,
        free: s & FREEING != 0,
    }
}

/// Outcome of [`release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The word to install.
    pub new: u64,
    /// The index is not in the ring: the slot is free now (else its pop
    /// frees it).
    pub free_now: bool,
}

/// The EVD's consumer gives its slot up (after [`remove`] and the disable
/// barrier, so no key is pending and no trigger comes).
///
/// ```
/// use evd::cno::slot::*;
/// assert!(release(0).free_now);
/// let queued = remove(trigger(0).new);
/// let r = release(queued);
/// assert!(!r.free_now && take(r.new).free);
/// ```
#[inline]
pub const fn release(s: u64) -> Release {
    debug_assert!(s & (PENDING | FREEING) == 0, "release with a pending key");
    if s & IN_RING != 0 {
        Release {
            new: s | FREEING,
            free_now: false,
        }
    } else {
        Release {
            new: s,
            free_now: true,
        }
    }
}

/// The EVD's consumer removes its pending key (disable, unbind, move to
/// another CNO). Returns the new word and whether a key was pending.
///
/// ```
/// use evd::cno::slot::*;
/// assert_eq!(remove(trigger(0).new) & PENDING, 0);
/// assert_eq!(remove(0), 0);
/// ```
#[inline]
pub const fn remove(s: u64) -> u64 {
    s & !PENDING
}

/// A bind found no free slot and takes back a releasing one: the slot stays
/// in the ring (its stale entry will deliver the new binding's key, or
/// nothing). A no-op if the waiter's pop cleared FREEING first.
///
/// ```
/// use evd::cno::slot::*;
/// let releasing = release(remove(trigger(0).new)).new;
/// let bound = reclaim(releasing);
/// assert!(bound & FREEING == 0 && bound & IN_RING != 0);
/// assert!(take(trigger(bound).new).deliver, "the stale entry carries the key");
/// ```
#[inline]
pub const fn reclaim(s: u64) -> u64 {
    s & !FREEING
}

/// True if the slot was released while its index was queued and no pop has
/// taken that index yet: only that pop may free it.
///
/// ```
/// use evd::cno::slot::*;
/// let releasing = release(remove(trigger(0).new)).new;
/// assert!(awaits_its_pop(releasing));
/// assert!(!awaits_its_pop(take(releasing).new), "popped");
/// assert!(!awaits_its_pop(reclaim(releasing)), "bound again");
/// ```
#[inline]
pub const fn awaits_its_pop(s: u64) -> bool {
    s & FREEING != 0
}

/// True if a key is pending in `s`.
///
/// ```
/// use evd::cno::slot::*;
/// assert!(is_pending(trigger(0).new) && !is_pending(0));
/// ```
#[inline]
pub const fn is_pending(s: u64) -> bool {
    s & PENDING != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_overlap_and_fired_wraps() {
        assert_eq!(IN_RING & PENDING, 0);
        assert_eq!((IN_RING | PENDING) & FREEING, 0);
        assert_eq!(FLAGS & (u32::MAX as u64) << FIRED_SHIFT, 0);
        let top = (u32::MAX as u64) << FIRED_SHIFT | IN_RING;
        let t = trigger(top);
        assert_eq!(fired(t.new), 0, "modulo 2^32");
        assert_eq!(t.new & FLAGS, IN_RING | PENDING);
    }

    #[test]
    fn one_entry_per_slot_however_many_triggers() {
        let mut s = 0;
        let mut pushes = 0;
        for _ in 0..5 {
            let t = trigger(s);
            pushes += t.push as u32;
            s = t.new;
        }
        assert_eq!((pushes, fired(s)), (1, 5));
        let t = take(s);
        assert!(t.deliver);
        assert_eq!(t.new & FLAGS, 0);
        assert_eq!(fired(t.new), 5, "the count survives the pop");
        assert!(
            trigger(t.new).push,
            "out of the ring: the next trigger pushes"
        );
    }

    #[test]
    fn a_removed_key_leaves_a_stale_entry_that_a_new_enable_revives() {
        let queued = trigger(0).new;
        let removed = remove(queued);
        assert_eq!(removed & FLAGS, IN_RING, "the index stays until popped");
        // The same binding enabled again triggers while the stale index is
        // queued: no second push, and the stale entry delivers the key.
        let revived = trigger(removed);
        assert!(!revived.push);
        assert!(take(revived.new).deliver);
        // Without a new trigger the stale entry delivers nothing.
        assert!(!take(removed).deliver);
    }

    #[test]
    fn a_slot_released_with_its_index_queued_is_freed_by_the_pop() {
        let queued = remove(trigger(0).new);
        let r = release(queued);
        assert!(!r.free_now);
        let t = take(r.new);
        assert!(t.free && !t.deliver);
        assert_eq!(t.new & FLAGS, 0);
        assert_eq!(fired(t.new), 1);
        // Popped before the release: free at once, and the pop frees nothing.
        let popped = take(trigger(0).new);
        assert!(!popped.free);
        assert!(release(popped.new).free_now);
    }

    #[test]
    fn remove_without_a_pending_key_changes_nothing() {
        let popped = take(trigger(0).new).new;
        assert_eq!(remove(popped), popped);
        assert!(!is_pending(popped));
    }
}
