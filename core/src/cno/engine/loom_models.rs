use super::*;
use loom::thread;

/// Every slot is bound (`bound`), free or waiting for its pop, once; a
/// free slot has no index queued, a waiting one is marked `FREEING`.
fn assert_slots_accounted(core: &CnoCore, bound: &[u32]) {
    core.with_free(|f| {
        for slot in 0..core.slots.len() as u32 {
            let s = core.slots[slot as usize].state.load(Ordering::Relaxed);
            let (free, freeing) = (f.free.contains(&slot), f.freeing.contains(&slot));
            let places = [bound.contains(&slot), free, freeing];
            assert_eq!(places.iter().filter(|&&p| p).count(), 1, "slot {slot}");
            assert!(
                !free || s & (slot::IN_RING | slot::FREEING) == 0,
                "free {slot}"
            );
            assert_eq!(freeing, slot::awaits_its_pop(s), "slot {slot}: {s:#x}");
        }
    });
}

/// Pop every queued index; the keys delivered.
fn pop_all(core: &CnoCore, ring: &mut crate::Consumer<u32>) -> Vec<u64> {
    std::iter::from_fn(|| ring.try_dequeue().ok())
        .filter_map(|slot| core.take(slot))
        .collect()
}

/// The waiter pops the stale indices of two released slots while a bind
/// finds no free slot and reclaims one (the one whose index is first in
/// the ring: its pop may already have cleared `FREEING`), then triggers
/// it: the new key is delivered once, and no slot is freed while bound
/// or while its index is queued.
#[test]
fn a_bind_that_reclaims_a_slot_vs_the_pop_of_its_stale_index() {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(|| {
        let (ready, mut ring) = crate::bounded::<u32>(2).unwrap();
        let core = Arc::new(CnoCore::new(1, ready).unwrap());
        // Both slots triggered (ring: 0, 1), then released in the other
        // order, so that a reclaim takes slot 0 (`freeing` is a stack).
        let (s0, _) = core.bind(Some(10), false).unwrap();
        let (s1, _) = core.bind(Some(11), false).unwrap();
        for s in [s0, s1] {
            assert_eq!(core.trigger(s), Reached::Ready);
        }
        for s in [s1, s0] {
            assert!(core.remove(s));
            core.release(s, false);
        }
        let waiter_core = core.clone();
        let waiter = thread::spawn(move || {
            let keys = pop_all(&waiter_core, &mut ring);
            (ring, keys)
        });
        let (s, key) = core.bind(Some(12), false).unwrap();
        assert_eq!(core.trigger(s), Reached::Ready);
        let (mut ring, mut keys) = waiter.join().unwrap();
        keys.extend(pop_all(&core, &mut ring));
        assert_eq!(keys, [key], "the new key, once; no stale one");
        assert_slots_accounted(&core, &[s]);
        core.release(s, false);
        assert!(pop_all(&core, &mut ring).is_empty());
        assert_slots_accounted(&core, &[]);
    });
}
