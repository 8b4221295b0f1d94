use super::*;
use crate::sync::model;
use loom::thread;

/// Every slot is bound (`bound`), free or waiting for its pop, once; a
/// free slot has no index queued, a waiting one is marked `FREEING`.
fn assert_slots_accounted(core: &CnoCore, bound: &[u32]) {
    core.with_free(|f| {
        for slot in 0..core.slots.len() as u32 {
            let s = core.slots[slot as usize].state.load(Ordering::Relaxed);
            let count = |list: &mut dyn Iterator<Item = &u32>| list.filter(|&&x| x == slot).count();
            let places = [
                count(&mut bound.iter()),
                count(&mut f.free.iter()),
                count(&mut f.freeing.iter()),
            ];
            assert_eq!(places.iter().sum::<usize>(), 1, "slot {slot}: {places:?}");
            let (free, freeing) = (places[1] == 1, places[2] == 1);
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

/// A CNO of two slots, both released with their index queued (the ring:
/// 0, 1), released in the other order, so that a reclaim takes slot 0
/// (`freeing` is a stack): the slot whose stale index the waiter pops first.
fn both_slots_releasing() -> (Arc<CnoCore>, crate::Consumer<u32>) {
    let (ready, ring) = crate::bounded::<u32>(2).unwrap();
    let core = Arc::new(CnoCore::new(1, ready).unwrap());
    let (s0, _) = core.bind(Some(10), false).unwrap();
    let (s1, _) = core.bind(Some(11), false).unwrap();
    for s in [s0, s1] {
        assert_eq!(core.trigger(s, &mut Panics::default()), Reached::Ready);
    }
    for s in [s1, s0] {
        assert!(core.remove(s));
        core.release(s, false);
    }
    (core, ring)
}

/// The waiter, on its own thread: pops until the ring is empty, or
/// `only_one` pop.
fn waiter(
    core: &Arc<CnoCore>,
    mut ring: crate::Consumer<u32>,
    only_one: bool,
) -> thread::JoinHandle<(crate::Consumer<u32>, Vec<u64>)> {
    let core = core.clone();
    thread::spawn(move || {
        let keys = if only_one {
            let slot = ring.try_dequeue().expect("two indices queued");
            core.take(slot).into_iter().collect()
        } else {
            pop_all(&core, &mut ring)
        };
        (ring, keys)
    })
}

/// While the waiter runs: a bind with key 12 that finds no free slot and
/// reclaims one, then its trigger. The slot and the key.
fn reclaimed_and_triggered(core: &CnoCore) -> (u32, u64) {
    let (s, key) = core.bind(Some(12), false).unwrap();
    assert_eq!(core.trigger(s, &mut Panics::default()), Reached::Ready);
    (s, key)
}

/// The waiter pops the stale indices of two released slots while a bind
/// finds no free slot and reclaims one (the one whose index is first in
/// the ring: its pop may already have cleared `FREEING`), then triggers
/// it: the new key is delivered once, and no slot is freed while bound
/// or while its index is queued.
#[test]
fn a_bind_that_reclaims_a_slot_vs_the_pop_of_its_stale_index() {
    model(|| {
        let (core, ring) = both_slots_releasing();
        let waiter = waiter(&core, ring, false);
        let (s, key) = reclaimed_and_triggered(&core);
        let (mut ring, mut keys) = waiter.join().unwrap();
        keys.extend(pop_all(&core, &mut ring));
        assert_eq!(keys, [key], "the new key, once; no stale one");
        assert_slots_accounted(&core, &[s]);
        core.release(s, false);
        assert!(pop_all(&core, &mut ring).is_empty());
        assert_slots_accounted(&core, &[]);
    });
}

/// The same race, the new binding's key removed and its slot released
/// again while the waiter pops the first stale index: that pop, stalled
/// between its CAS and its free-list step, may find the slot queued again
/// and releasing; it must leave it to the pop of that new entry. The key is
/// delivered once or removed, and no slot is ever free with its index
/// queued (checked while the rest of the ring is still queued).
#[test]
fn a_reclaimed_slot_released_again_vs_a_stalled_pop() {
    model(|| {
        let (core, ring) = both_slots_releasing();
        let waiter = waiter(&core, ring, true);
        let (s, key) = reclaimed_and_triggered(&core);
        let removed = core.remove(s);
        core.release(s, false);
        let (mut ring, mut keys) = waiter.join().unwrap();
        assert_slots_accounted(&core, &[]);
        keys.extend(pop_all(&core, &mut ring));
        let delivered: &[u64] = if removed { &[] } else { &[key] };
        assert_eq!(keys, delivered, "removed {removed}");
        assert_slots_accounted(&core, &[]);
        assert!(core.with_free(|f| f.freeing.is_empty()), "every slot free");
    });
}
