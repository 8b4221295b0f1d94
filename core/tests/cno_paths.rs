//! The CNO's binding paths, single-threaded and short enough for Miri
//! (`scripts/miri` runs this file): binding and moving an EVD (`modify_cno`),
//! unbinding it, dropping a bound consumer or the CNO, reusing a freed
//! place, and what disable, close and resize do to a pending key. Miri
//! checks the EVD's link cell and the kept CNOs' lifetimes.

mod common;
use common::{bound, drain, enabled, enabled_with_capacity, pair, ready_keys, two_cnos};
use evd::{ArmStatus, Cno, CnoError, Overflow};
use futures::{FutureExt, StreamExt};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::*;

#[test]
fn disable_removes_a_pending_key_and_keeps_the_events() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 1);
    let (q, _d) = enabled::<u8>(&cno, 2);
    p.post(1).unwrap();
    q.post(2).unwrap();
    c.disable_cno();
    assert_eq!(
        ready_keys(&mut cno),
        [2],
        "only the other EVD's key is left"
    );
    assert_eq!(drain(&mut c).0, [1], "the event stays");
    assert_eq!(c.cno_key(), Some(1), "disabled, still bound");
    // Re-enabled, it works as before.
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(3).unwrap();
    assert_eq!(ready_keys(&mut cno), [1]);
}

#[test]
fn modify_cno_moves_a_pending_key() {
    let [mut old, mut new] = two_cnos();
    let (p, mut c) = enabled::<u8>(&old, 1);
    p.post(1).unwrap();
    c.modify_cno(&new, 2).unwrap();
    assert_eq!(
        (ready_keys(&mut old), ready_keys(&mut new)),
        (vec![], vec![2])
    );
    assert_eq!((old.bound(), new.bound(), c.cno_key()), (0, 1, Some(2)));
    // The moved key used the enable up: no second key without a new enable.
    p.post(2).unwrap();
    assert_eq!((old.try_next(), new.try_next()), (None, None));
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(3).unwrap();
    assert_eq!((old.try_next(), new.try_next()), (None, Some(2)));
}

#[test]
fn modify_cno_moves_an_enable_and_the_old_cno_never_gets_the_key() {
    let [mut old, mut new] = two_cnos();
    let (p, mut c) = enabled::<u8>(&old, 1);
    c.modify_cno(&new.handle(), 2).unwrap();
    assert_eq!(
        (old.try_next(), new.try_next()),
        (None, None),
        "no news yet"
    );
    p.post(1).unwrap();
    assert_eq!(
        (ready_keys(&mut old), ready_keys(&mut new)),
        (vec![], vec![2])
    );
    // And every later enable goes to the new CNO only.
    for i in 0..3 {
        drain(&mut c);
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
        p.post(i).unwrap();
        assert_eq!((old.try_next(), new.try_next()), (None, Some(2)));
    }
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    drop(p); // the close goes to the new CNO too
    assert_eq!((old.try_next(), new.try_next()), (None, Some(2)));
}

#[test]
fn unbind_removes_a_pending_key_and_frees_its_place() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 4);
    p.post(1).unwrap();
    assert_eq!(c.unbind_cno(), Some(4));
    assert_eq!((c.cno_key(), cno.bound()), (None, 0));
    assert_eq!(cno.try_next(), None, "the key went with the binding");
    assert_eq!(c.unbind_cno(), None);
    p.post(2).unwrap();
    assert_eq!(cno.try_next(), None);
    assert_eq!(drain(&mut c).0, [1, 2], "the events stay");
    // Its place is free: another EVD binds in the full-size CNO.
    let (_q, d) = bound::<u8>(&cno, 5);
    // And the unbound one can bind again (after the other leaves).
    assert_eq!(c.bind_cno(&cno, 6), Err(CnoError::Full { capacity: 1 }));
    drop(d);
    c.bind_cno(&cno, 6).unwrap();
}

#[test]
fn dropping_a_bound_consumer_removes_its_key_and_frees_its_place() {
    let mut cno = Cno::new(2).unwrap();
    let (pa, a) = enabled::<u8>(&cno, 1);
    let (pb, mut b) = enabled::<u8>(&cno, 2);
    pa.post(1).unwrap();
    pb.post(2).unwrap();
    drop(a);
    assert_eq!(cno.bound(), 1);
    assert_eq!(ready_keys(&mut cno), [2]);
    // A dropped enabled consumer leaves no enable behind either.
    drain(&mut b);
    assert_eq!(b.enable_cno(), Ok(ArmStatus::Armed));
    drop(b);
    assert!(pb.post(3).is_err(), "closed by the drop");
    assert_eq!((cno.bound(), cno.try_next()), (0, None));
    assert!(pa.is_closed());
}

#[test]
fn into_upcalls_unbinds_the_evd() {
    let mut cno = Cno::new(1).unwrap();
    let (p, c) = enabled::<u32>(&cno, 1);
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    let up = c.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::Any,
        move |item: Result<u32, Overflow>, _| {
            s.fetch_add(u64::from(item.unwrap()), Relaxed);
        },
    );
    assert_eq!(cno.bound(), 0, "its place is free");
    p.post(5).unwrap();
    assert_eq!(seen.load(Relaxed), 5, "the upcall got the event");
    assert_eq!(cno.try_next(), None, "the CNO did not");
    let c = up.teardown();
    assert_eq!(c.cno_key(), None);
}

#[test]
fn a_reused_place_delivers_the_new_key_not_the_old() {
    let mut cno = Cno::new(1).unwrap();
    let (pa, a) = enabled::<u8>(&cno, 1);
    pa.post(1).unwrap(); // key 1 pending
    drop(a); // removed, place freed
    let (pb, mut b) = pair::<u8>(4);
    b.bind_cno(&cno, 2).unwrap(); // the same (only) place
    assert_eq!(cno.try_next(), None, "the old key is not handed out");
    assert_eq!(b.enable_cno(), Ok(ArmStatus::Armed));
    pb.post(2).unwrap();
    assert_eq!(ready_keys(&mut cno), [2]);

    // The same with the new binding triggered before the waiter looks.
    drain(&mut b);
    assert_eq!(b.enable_cno(), Ok(ArmStatus::Armed));
    pb.post(3).unwrap(); // key 2 pending
    drop(b);
    let (pc, _c) = enabled::<u8>(&cno, 3);
    pc.post(4).unwrap();
    assert_eq!(ready_keys(&mut cno), [3], "the new key, once");
}

#[test]
fn closing_an_enabled_evd_reports_its_key_once_then_the_drain_ends_the_stream() {
    // Three ways to close: the last poster goes, a poster closes, the
    // consumer closes.
    for how in 0..3 {
        let mut cno = Cno::new(1).unwrap();
        let (p, mut c) = enabled::<u8>(&cno, 9);
        let keep = p.clone();
        match how {
            0 => {
                drop(keep);
                drop(p);
            }
            1 => p.close(),
            _ => c.close(),
        }
        assert_eq!(ready_keys(&mut cno), [9], "close {how}: the key, once");
        assert_eq!(drain(&mut c), (vec![], true), "the drain ends the stream");
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Closed));
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Closed));
        assert_eq!(cno.try_next(), None, "close {how}: nothing more");
    }
}

#[test]
fn a_dropped_cno_makes_enable_fail_and_posts_still_work() {
    let cno = Cno::new(2).unwrap();
    let h = cno.handle();
    let (p, mut c) = enabled::<u8>(&cno, 1);
    assert!(!h.is_dropped());
    drop(cno);
    assert!(h.is_dropped());
    p.post(1).unwrap(); // triggers a dropped CNO
    p.post(2).unwrap();
    assert_eq!(drain(&mut c).0, [1, 2]);
    assert_eq!(c.enable_cno(), Err(CnoError::CnoDropped));
    assert_eq!(c.cno_key(), Some(1), "still bound until unbound");
    // Binding to it is refused, whatever the form.
    let (_q, mut d) = pair::<u8>(4);
    assert_eq!(d.bind_cno(&h, 2), Err(CnoError::CnoDropped));
    assert_eq!(d.bind_cno_new_key(&h), Err(CnoError::CnoDropped));
    // Unbind and move away still work.
    let mut fresh = Cno::new(1).unwrap();
    c.modify_cno(&fresh, 5).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(3).unwrap();
    assert_eq!(fresh.try_next(), Some(5));
    assert_eq!(c.unbind_cno(), Some(5));
}

#[test]
fn the_cno_stream_skips_entries_whose_keys_were_removed() {
    let mut cno = Cno::new(4).unwrap();
    let (pa, mut a) = enabled::<u8>(&cno, 1);
    let (pb, _b) = enabled::<u8>(&cno, 2);
    pa.post(1).unwrap();
    pb.post(2).unwrap();
    a.disable_cno(); // key 1 removed, its entry stays queued
    assert_eq!(cno.next().now_or_never(), Some(Some(2)));
    assert_eq!(cno.next().now_or_never(), None);
}

//
// A disable (or unbind, or move) removes a pending key but leaves its slot's
// entry in the ready ring; a later trigger of the same slot revives that
// entry instead of queueing a new one (`cno::slot`: "the stale entry
// delivers the new key when popped"), so the key comes out at the place
// where the removed one had been, ahead of keys that became ready before it.

#[test]
fn keys_come_in_ready_order_after_a_disable_and_re_enable() {
    let mut cno = Cno::new(4).unwrap();
    let (pa, mut a) = enabled::<u8>(&cno, 1);
    let (pc, _c) = enabled::<u8>(&cno, 2);
    pa.post(1).unwrap(); // key 1 ready
    pc.post(1).unwrap(); // key 2 ready
    a.disable_cno(); // key 1 removed
    assert_eq!(drain(&mut a).0, [1]);
    assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    pa.post(2).unwrap(); // key 1 ready again, after key 2
    assert_eq!(
        ready_keys(&mut cno),
        [2, 1],
        "FIFO in the order keys became ready"
    );
}

#[test]
fn keys_come_in_ready_order_after_a_place_is_reused() {
    let mut cno = Cno::new(2).unwrap();
    let (pa, a) = enabled::<u8>(&cno, 1);
    let (pc, _c) = enabled::<u8>(&cno, 2);
    pa.post(1).unwrap(); // key 1 ready
    pc.post(1).unwrap(); // key 2 ready
    drop(a); // key 1 removed, its place freed
    let (pb, mut b) = pair::<u8>(4);
    b.bind_cno(&cno, 3).unwrap(); // takes a's place
    assert_eq!(b.enable_cno(), Ok(ArmStatus::Armed));
    pb.post(1).unwrap(); // key 3 ready, after key 2
    assert_eq!(
        ready_keys(&mut cno),
        [2, 3],
        "FIFO in the order keys became ready"
    );
}

/// A disable that finds every spare slot waiting for the waiter's pop keeps
/// its own slot (its entry where its last trigger put it) rather than take
/// back another releasing slot, whose stale entry may sit further ahead.
#[test]
fn keys_come_in_ready_order_after_a_disable_with_no_free_slot_left() {
    let mut cno = Cno::new(2).unwrap(); // four slots
    let (pa, mut a) = enabled::<u8>(&cno, 1);
    let (pb, _b) = enabled::<u8>(&cno, 2);
    // Twice: key 1 ready, then removed, a moved to a fresh slot; the slot it
    // left waits for the waiter's pop of its entry.
    for ev in [1, 2] {
        pa.post(ev).unwrap();
        a.disable_cno();
        assert_eq!(drain(&mut a).0, [ev]);
        assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    }
    pb.post(1).unwrap(); // key 2 ready
    pa.post(3).unwrap(); // key 1 ready, after key 2
    a.disable_cno(); // no free slot left: a keeps its own
    assert_eq!(drain(&mut a).0, [3]);
    assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    pa.post(4).unwrap(); // key 1 ready again, after key 2
    assert_eq!(
        ready_keys(&mut cno),
        [2, 1],
        "FIFO in the order keys became ready"
    );
}

#[test]
fn resizing_an_enabled_evd_keeps_its_enable() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled_with_capacity::<u8>(&cno, 1, 2);
    assert_eq!(c.resize(8), Ok(8));
    p.post(1).unwrap();
    assert_eq!(ready_keys(&mut cno), [1]);
    assert_eq!(c.resize(2), Ok(2), "shrinks with one event queued");
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
    assert_eq!(drain(&mut c).0, [1]);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    c.disable_cno(); // the barrier returns: the resize kept the count straight
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(2).unwrap();
    assert_eq!(ready_keys(&mut cno), [1]);
}

#[test]
fn modify_cno_to_the_same_cno_changes_the_key_and_moves_a_pending_key() {
    let mut cno = Cno::new(2).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 1);
    p.post(1).unwrap(); // key 1 pending
    c.modify_cno(&cno, 2).unwrap();
    assert_eq!((c.cno_key(), cno.bound()), (Some(2), 1));
    assert_eq!(
        ready_keys(&mut cno),
        [2],
        "the pending key, under its new key, once"
    );
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    c.modify_cno(&cno.handle(), 3).unwrap(); // the enable moves too
    p.post(2).unwrap();
    assert_eq!(ready_keys(&mut cno), [3]);
}

#[test]
fn modify_cno_enables_on_the_new_cno_as_enable_cno_does_and_keys_the_direct_waiters_news() {
    // Enabled and directly armed; a post wakes the direct waiter (the
    // enable stays). The move withdraws the direct arm, as an enable does,
    // and the event left queued gives the new CNO a key, where a plain
    // enable would answer `Pending`.
    let old = evd::Cno::new(1).unwrap();
    let mut new = evd::Cno::new(1).unwrap();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    consumer.bind_cno(&old, 1).unwrap();
    assert_eq!(consumer.enable_cno(), Ok(evd::ArmStatus::Armed));
    assert_eq!(consumer.arm(), evd::ArmStatus::Armed);
    poster.post(7).unwrap(); // the direct waiter's news
    consumer.modify_cno(&new, 2).unwrap();
    assert!(!consumer.query().armed, "the direct arm is withdrawn");
    assert_eq!(new.try_next(), Some(2), "the news is the new CNO's too");
    assert_eq!(consumer.try_dequeue(), Ok(7));
    drop(old);
}
