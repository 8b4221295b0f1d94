use super::*;

/// A slot in `free` has no index in the ring and waits for no pop.
fn assert_free_slots_are_clean(core: &CnoCore) {
    core.with_free(|f| {
        for &slot in &f.free {
            let s = core.slots[slot as usize].state.load(Ordering::Relaxed);
            assert_eq!(s & (slot::IN_RING | slot::FREEING), 0, "free slot {slot}");
        }
    });
}

/// The waiter pops a releasing slot's stale index (its CAS clears
/// `FREEING`) and is stalled before its free-list step; meanwhile a bind
/// reclaims the slot, a trigger pushes its index again, and the binding
/// is released again. The stalled pop must leave the slot to the pop of
/// the new entry.
#[test]
fn a_pop_stalled_before_its_free_list_step_frees_no_slot_whose_index_is_queued_again() {
    let (ready, mut ring) = crate::bounded::<u32>(2).unwrap();
    let core = CnoCore::new(1, ready).unwrap();
    // Both slots bound (moves are not counted against the maximum).
    let (_, _) = core.bind(Some(10), false).unwrap();
    let (s, _) = core.bind(Some(11), false).unwrap();
    assert_eq!(core.trigger(s, &mut Panics::default()), Reached::Ready);
    assert!(core.remove(s));
    core.release(s, false);

    // The waiter pops the stale index: the pop's CAS only.
    assert_eq!(ring.try_dequeue(), Ok(s));
    let cell = &core.slots[s as usize].state;
    let t = slot::take(cell.load(Ordering::Relaxed));
    assert!(t.free && !t.deliver);
    cell.store(t.new, Ordering::Relaxed);

    // No slot is free: the bind reclaims the releasing one.
    assert_eq!(core.bind(Some(12), false).unwrap().0, s);
    assert_eq!(core.trigger(s, &mut Panics::default()), Reached::Ready);
    assert!(core.remove(s));
    core.release(s, false);

    // The stalled pop's free-list step.
    core.free_after_pop(s);
    assert_free_slots_are_clean(&core);
    // The new entry's pop frees it.
    assert_eq!(ring.try_dequeue(), Ok(s));
    assert_eq!(core.take(s), None, "a stale entry");
    assert!(core.with_free(|f| f.free.contains(&s)));
    assert_free_slots_are_clean(&core);
}

/// A trigger that pushes its index while the `Cno` is being dropped
/// (marked gone, its ring not closed yet) reports the CNO gone, so that
/// the EVD's own targets are told: the drop discards the key.
#[test]
fn a_trigger_that_pushes_while_the_cno_is_dropped_reports_it_gone() {
    let (ready, _ring) = crate::bounded::<u32>(2).unwrap();
    let core = CnoCore::new(1, ready).unwrap();
    let (s, _) = core.bind(Some(10), true).unwrap();
    core.mark_gone();
    assert_eq!(core.trigger(s, &mut Panics::default()), Reached::CnoGone);
}
