//! The CNO (one waiter for many EVDs), one test per promise of its docs
//! (`core/src/cno/mod.rs`, `core/src/consumer/cno.rs`), named after it: the
//! ready set and its order, enable and disable, the blocking, timed, async
//! and eventfd waits, and the CNO's lifetime.
//!
//! Most tests are single-threaded and exact. The threaded ones assert only
//! what holds in every interleaving (no sleeps as synchronization, no timed
//! assertions); the few that could hang on a lost wakeup run under a
//! watchdog that fails the process instead. The binding paths Miri checks
//! are in `cno_paths.rs`, the many-EVD stress test in `cno_stress.rs`.

mod common;
use common::{
    Rng, Watchdog, assert_report, bound, counting, drain, drain_in_order, enabled,
    enabled_with_capacity, lose, pair, post_0_to, post_retry, ready_keys, two_cnos,
};
use evd::{ArmStatus, Cno, CnoError, CnoHandle, Consumer, Poster};
use futures::{FutureExt, StreamExt};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

/// An EVD of 4 slots with its notification eventfd, bound to `cno` with
/// `key` and enabled.
fn enabled_with_an_eventfd(cno: &Cno, key: u64) -> (Poster<u8>, Consumer<u8>, evd::NotifyFd) {
    let (p, mut c) = pair::<u8>(4);
    let fd = c.notify_fd().unwrap();
    c.bind_cno(cno, key).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    (p, c, fd)
}

/// A thread that posts 0, 1, 2, ... to `p` in bursts of one to three events
/// (yielding on a full ring), each burst after a pause of random length and
/// once the consumer has taken every event before it (`taken`, the count
/// `drain_in_order` publishes), until `stop`; then it drops `p` (closing the
/// EVD) and returns how many it posted. The bursts land anywhere in the
/// consumer's round (its enable, a move, a disable), but the consumer's
/// drain always ends: against a poster that never pauses, a consumer that
/// keeps up (the linger after a run lets the poster refill the ring) can
/// drain for thousands of events before it ever finds the ring empty, and a
/// round of the tests below then takes milliseconds instead of
/// microseconds.
fn poster_in_bursts(
    p: Poster<u64>,
    stop: Arc<AtomicBool>,
    taken: Arc<AtomicU64>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut rng = Rng(0x9e37_79b9);
        let mut i = 0;
        while !stop.load(Relaxed) {
            for _ in 0..=rng.below(3) {
                post_retry(&p, i);
                i += 1;
            }
            while taken.load(Relaxed) < i && !stop.load(Relaxed) {
                std::thread::yield_now();
            }
            for _ in 0..rng.below(512) {
                std::hint::spin_loop();
            }
        }
        i
    })
}

#[test]
fn a_handle_is_clone_send_and_sync_and_the_cno_is_send() {
    fn clone_send_sync<T: Clone + Send + Sync>() {}
    fn send<T: Send>() {}
    clone_send_sync::<CnoHandle>();
    send::<Cno>();
    let cno = Cno::new(4).unwrap();
    let h = cno.handle();
    let (_p, mut c) = pair::<u8>(4);
    let c = std::thread::spawn(move || {
        c.bind_cno(&h, 11).unwrap();
        c
    })
    .join()
    .unwrap();
    assert_eq!((c.cno_key(), cno.bound()), (Some(11), 1));
    assert_eq!(cno.handle().bound(), 1);
}

#[test]
fn new_refuses_zero_and_reports_its_capacity() {
    assert!(Cno::new(0).is_err());
    let cno = Cno::new(5).unwrap();
    assert_eq!((cno.capacity(), cno.bound()), (5, 0));
    assert_eq!(cno.handle().capacity(), 5);
}

#[test]
fn the_ready_set_holds_exactly_the_enabled_evds_that_got_work() {
    let mut cno = Cno::new(8).unwrap();
    let (pa, mut a) = enabled::<u32>(&cno, 1); // enabled, gets a post
    let (_pb, _b) = enabled::<u32>(&cno, 2); // enabled, no post
    let (pc, mut c) = bound::<u32>(&cno, 3); // bound, not enabled, gets a post
    let (pd, mut d) = pair::<u32>(4); // not bound, gets a post
    assert_eq!(cno.try_next(), None, "nothing posted: nothing ready");
    pa.post(10).unwrap();
    pc.post(30).unwrap();
    pd.post(40).unwrap();
    assert_eq!(ready_keys(&mut cno), [1]);
    assert_eq!(
        ready_keys(&mut cno),
        [] as [u64; 0],
        "taken keys leave the set"
    );
    assert_eq!(cno.try_next(), None);
    assert_eq!(drain(&mut a).0, [10]);
    assert_eq!(drain(&mut c).0, [30]);
    assert_eq!(drain(&mut d).0, [40]);
}

#[test]
fn try_ready_appends_to_what_out_holds() {
    let mut cno = Cno::new(4).unwrap();
    let (p, _c) = enabled::<u8>(&cno, 6);
    p.post(0).unwrap();
    let mut out = vec![99];
    assert_eq!(cno.try_ready(&mut out), 1);
    assert_eq!(out, [99, 6]);
    assert_eq!(cno.try_ready(&mut out), 0);
}

#[test]
fn a_key_is_ready_at_most_once_per_enable() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = enabled_with_capacity::<u32>(&cno, 5, 8);
    for i in 0..4 {
        p.post(i).unwrap();
    }
    assert_eq!(ready_keys(&mut cno), [5], "four posts, one enable: one key");
    p.post(4).unwrap();
    assert_eq!(cno.try_next(), None, "the enable was used up");
    // Enabling with events queued is Pending and arms nothing.
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
    p.post(5).unwrap();
    assert_eq!(cno.try_next(), None, "a Pending enable arms nothing");
    assert_eq!(drain(&mut c).0, [0, 1, 2, 3, 4, 5]);
    // Drained: a new enable, a new key.
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(6).unwrap();
    p.post(7).unwrap();
    assert_eq!(ready_keys(&mut cno), [5]);
    assert_eq!(cno.try_next(), None);
}

#[test]
fn enabling_an_enabled_evd_changes_nothing() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = enabled::<u32>(&cno, 8);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(1).unwrap();
    assert_eq!(ready_keys(&mut cno), [8], "three enables, one key");
    p.post(2).unwrap();
    assert_eq!(cno.try_next(), None);
    // A disable after a repeated enable is still a barrier that returns
    // (it waits only for the triggers the enables owe: here, the one taken).
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    c.disable_cno();
    p.post(3).unwrap();
    assert_eq!(cno.try_next(), None, "disabled");
}

/// An enable left with news (a post woke a direct waiter and left the
/// enable in place): enabling again reports them (`Pending`) and takes the
/// enable back, instead of also putting the key in the ready set for news
/// the call itself reports. The disable barrier then waits for no trigger
/// of the enable taken back.
#[test]
fn enabling_an_evd_a_direct_wait_left_enabled_with_news_reports_them_without_a_key() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 5);
    assert_eq!(c.arm(), ArmStatus::Armed);
    p.post(1).unwrap(); // wakes the direct waiter; the enable stays
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
    assert_eq!(cno.try_next(), None, "no key for news the enable reported");
    p.post(2).unwrap();
    assert_eq!(cno.try_next(), None, "the enable was taken back");
    assert_eq!(drain(&mut c).0, [1, 2]);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(3).unwrap();
    assert_eq!(ready_keys(&mut cno), [5]);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("disable after an enable taken back", progress.clone());
    c.disable_cno();
    progress.store(1, Relaxed);
}

#[test]
fn enable_is_not_bound_before_a_bind_then_pending_armed_or_closed() {
    let cno = Cno::new(4).unwrap();
    let (p, mut c) = pair::<u32>(4);
    assert_eq!(c.enable_cno(), Err(CnoError::NotBound));
    c.bind_cno(&cno, 1).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed), "empty: Armed");
    c.disable_cno();
    p.post(1).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending), "queued: Pending");
    p.close();
    assert_eq!(
        c.enable_cno(),
        Ok(ArmStatus::Pending),
        "closed with events: Pending"
    );
    assert_eq!(drain(&mut c), (vec![1], true));
    assert_eq!(
        c.enable_cno(),
        Ok(ArmStatus::Closed),
        "closed and drained: Closed"
    );
    assert_eq!(c.unbind_cno(), Some(1));
    assert_eq!(c.enable_cno(), Err(CnoError::NotBound), "unbound again");
}

#[test]
fn keys_are_the_callers_and_two_evds_may_share_one() {
    let mut cno = Cno::new(4).unwrap();
    let (pa, _a) = enabled::<u8>(&cno, 77);
    let (pb, _b) = enabled::<u8>(&cno, 77);
    pa.post(1).unwrap();
    pb.post(2).unwrap();
    assert_eq!(ready_keys(&mut cno), [77, 77], "not checked for uniqueness");
}

#[test]
fn evds_of_different_event_types_share_one_cno() {
    let mut cno = Cno::new(4).unwrap();
    let (p1, mut c1) = pair::<u8>(4);
    let (p2, mut c2) = pair::<String>(4);
    let (p3, mut c3) = pair::<Vec<u64>>(4);
    let (p4, mut c4) = pair::<()>(4);
    c1.bind_cno(&cno, 1).unwrap();
    c2.bind_cno(&cno.handle(), 2).unwrap();
    c3.bind_cno(&cno, 3).unwrap();
    c4.bind_cno(&cno, 4).unwrap();
    for r in [
        c1.enable_cno(),
        c2.enable_cno(),
        c3.enable_cno(),
        c4.enable_cno(),
    ] {
        assert_eq!(r, Ok(ArmStatus::Armed));
    }
    p3.post(vec![3, 33]).unwrap();
    p1.post(1).unwrap();
    p4.post(()).unwrap();
    p2.post("two".to_string()).unwrap();
    assert_eq!(ready_keys(&mut cno), [3, 1, 4, 2]);
    assert_eq!(drain(&mut c1).0, [1]);
    assert_eq!(drain(&mut c2).0, ["two"]);
    assert_eq!(drain(&mut c3).0, [vec![3, 33]]);
    assert_eq!(drain(&mut c4).0, [()]);
}

#[test]
fn keys_come_in_the_order_their_evds_became_ready() {
    const N: usize = 16;
    let mut cno = Cno::new(N).unwrap();
    let (posters, mut consumers): (Vec<_>, Vec<_>) = (0..N).map(|_| pair::<usize>(4)).unzip();
    for (i, c) in consumers.iter_mut().enumerate() {
        c.bind_cno(&cno, 100 + i as u64).unwrap();
    }
    let mut rng = Rng(0x0dd5_eed5);
    for round in 0..20 {
        // Enable in one order, post in another (a random permutation).
        for i in (0..N).rev() {
            assert_eq!(consumers[i].enable_cno(), Ok(ArmStatus::Armed));
        }
        let mut order: Vec<usize> = (0..N).collect();
        for i in (1..N).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &i in &order {
            posters[i].post(round).unwrap();
        }
        // A second post to an EVD already ready does not move its key.
        for &i in order.iter().rev() {
            posters[i].post(round).unwrap();
        }
        let want: Vec<u64> = order.iter().map(|&i| 100 + i as u64).collect();
        assert_eq!(ready_keys(&mut cno), want, "round {round}");
        for c in consumers.iter_mut() {
            drain(c);
        }
    }
}

#[test]
fn disable_withdraws_an_enable_that_no_post_used() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 1);
    c.disable_cno();
    p.post(1).unwrap();
    p.close();
    assert_eq!(cno.try_next(), None, "neither the post nor the close");
    assert_eq!(drain(&mut c), (vec![1], true));
}

#[test]
fn disable_of_an_unbound_or_disabled_evd_does_nothing() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = pair::<u8>(4);
    c.disable_cno();
    c.bind_cno(&cno, 1).unwrap();
    c.disable_cno();
    c.disable_cno();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(1).unwrap();
    assert_eq!(ready_keys(&mut cno), [1]);
}

/// A poster posts without pause while the consumer enables and disables its
/// EVD: once `disable_cno` returns, the ready set never holds the key (a
/// trigger that took the enable before has landed and its key is removed),
/// and every event is still dequeued, once, in order.
#[test]
fn disable_is_a_barrier_no_key_appears_after_it_returns() {
    const ROUNDS: u64 = 100_000;
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = bound::<u64>(&cno, 3);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("disable barrier", progress.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let poster = poster_in_bursts(p, stop.clone(), progress.clone());
    let mut rng = Rng(0xba44_1e45);
    let (mut next, mut taken_before, mut rounds) = (0u64, 0u64, 0u64);
    'rounds: loop {
        if drain_in_order(&mut c, &mut next, &progress) {
            break;
        }
        match c.enable_cno().unwrap() {
            ArmStatus::Armed => {}
            ArmStatus::Pending => continue,
            ArmStatus::Closed => break 'rounds,
        }
        rounds += 1;
        if rounds == ROUNDS {
            stop.store(true, Relaxed); // then drain to the end of stream
        }
        // Sometimes the CNO's waiter takes the key before the disable (it
        // may: the key was due); sometimes it leaves it for the disable.
        // A window of random length for a post to take the enable (and the
        // poster a chance at the EVD's word).
        for _ in 0..rng.below(512) {
            std::hint::spin_loop();
        }
        if rng.below(2) == 0 {
            taken_before += cno.try_next().map_or(0, |k| {
                assert_eq!(k, 3);
                1
            });
        }
        c.disable_cno();
        assert_eq!(
            cno.try_next(),
            None,
            "round {rounds}: a key after disable_cno returned"
        );
    }
    assert_eq!(next, poster.join().unwrap(), "every event");
    println!(
        "{rounds} enable/disable rounds, {next} events, {taken_before} keys taken before a disable"
    );
}

#[test]
fn modify_cno_of_a_disabled_evd_moves_no_enable() {
    let [mut old, mut new] = two_cnos();
    let (p, mut c) = bound::<u8>(&old, 1);
    c.modify_cno(&new, 2).unwrap();
    p.post(1).unwrap();
    assert_eq!((old.try_next(), new.try_next()), (None, None));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
}

#[test]
fn modify_cno_after_the_old_waiter_took_the_key_gives_the_new_one_nothing() {
    let [mut old, mut new] = two_cnos();
    let (p, mut c) = enabled::<u8>(&old, 1);
    p.post(1).unwrap();
    assert_eq!(
        old.try_next(),
        Some(1),
        "the old waiter took it before the move"
    );
    c.modify_cno(&new, 2).unwrap();
    assert_eq!(
        (old.try_next(), new.try_next()),
        (None, None),
        "one CNO only"
    );
    assert_eq!(drain(&mut c).0, [1]);
}

#[test]
fn modify_cno_of_an_unbound_evd_binds_it() {
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = pair::<u8>(4);
    c.modify_cno(&cno, 9).unwrap();
    assert_eq!((c.cno_key(), cno.bound()), (Some(9), 1));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(1).unwrap();
    assert_eq!(cno.try_next(), Some(9));
}

#[test]
fn modify_cno_to_a_full_or_dropped_cno_fails_and_leaves_the_binding_as_it_was() {
    let mut old = Cno::new(4).unwrap();
    let full = Cno::new(1).unwrap();
    let (_q, _other) = bound::<u8>(&full, 50);
    let dropped = Cno::new(4).unwrap();
    let dropped_handle = dropped.handle();
    drop(dropped);
    let (p, mut c) = enabled::<u8>(&old, 1);
    assert_eq!(c.modify_cno(&full, 2), Err(CnoError::Full { capacity: 1 }));
    assert_eq!(c.modify_cno(&dropped_handle, 3), Err(CnoError::CnoDropped));
    assert_eq!((c.cno_key(), old.bound(), full.bound()), (Some(1), 1, 1));
    p.post(1).unwrap();
    assert_eq!(
        ready_keys(&mut old),
        [1],
        "still bound and enabled on the old CNO"
    );
}

/// One EVD moves back and forth between two CNOs (each with room for one
/// EVD, so every move frees the old place) while a poster posts without
/// pause. Each notification reaches exactly one CNO: after a move the old
/// CNO never hands out the key, a key comes only for an enable (or a move
/// of one), never twice, and none is lost (the waiter blocks for it).
#[test]
fn modify_cno_under_posts_each_notification_reaches_exactly_one_cno() {
    const ROUNDS: u64 = 50_000;
    let mut cnos = [Cno::new(1).unwrap(), Cno::new(1).unwrap()];
    let key = |i: usize| 100 + i as u64;
    let (p, mut c) = pair::<u64>(4);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("modify_cno under posts", progress.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let poster = poster_in_bursts(p, stop.clone(), progress.clone());
    let mut rng = Rng(0x30d1_f1ed);
    let mut cur = 0;
    c.bind_cno(&cnos[cur], key(cur)).unwrap();
    let (mut next, mut moves, mut keys_seen) = (0u64, 0u64, 0u64);
    let mut keys = Vec::new();
    let move_to_other = |c: &mut Consumer<u64>, cnos: &mut [Cno; 2], cur: &mut usize| {
        let other = 1 - *cur;
        c.modify_cno(&cnos[other], key(other)).unwrap();
        assert_eq!((cnos[*cur].bound(), cnos[other].bound()), (0, 1));
        assert_eq!(
            cnos[*cur].try_next(),
            None,
            "the old CNO handed out the key after the move"
        );
        *cur = other;
    };
    loop {
        // Not enabled, nothing pending: drain, maybe move, enable.
        if drain_in_order(&mut c, &mut next, &progress) {
            break;
        }
        if rng.below(4) == 0 {
            move_to_other(&mut c, &mut cnos, &mut cur);
            moves += 1;
        }
        match c.enable_cno().unwrap() {
            ArmStatus::Armed => {}
            ArmStatus::Pending => continue,
            ArmStatus::Closed => break,
        }
        // Enabled (or, after a move below, a key pending): move it while
        // the poster races, zero to two times.
        for _ in 0..rng.below(3) {
            move_to_other(&mut c, &mut cnos, &mut cur);
            moves += 1;
        }
        // Exactly one key is owed, on the current CNO: block for it.
        keys.clear();
        cnos[cur].wait(&mut keys);
        assert_eq!(keys, [key(cur)], "one key, from the current CNO");
        keys_seen += 1;
        if keys_seen == ROUNDS {
            stop.store(true, Relaxed); // then serve to the end of stream
        }
        // Nothing else is owed until the next enable, on either CNO.
        assert_eq!((cnos[0].try_next(), cnos[1].try_next()), (None, None));
    }
    assert_eq!(next, poster.join().unwrap(), "every event");
    println!("{keys_seen} keys, {moves} moves, {next} events");
}

#[test]
fn bind_cno_new_key_hands_out_keys_unique_among_bound_evds() {
    const N: usize = 32;
    let mut cno = Cno::new(N).unwrap();
    let mut consumers: Vec<_> = (0..N).map(|_| pair::<u8>(2)).collect();
    let mut keys = HashSet::new();
    for (_, c) in consumers.iter_mut() {
        let k = c.bind_cno_new_key(&cno).unwrap();
        assert!(k < 2 * N as u64, "below twice the capacity: {k}");
        assert_eq!(c.cno_key(), Some(k));
        assert!(keys.insert(k), "key {k} handed out twice");
    }
    let (_p, mut extra) = pair::<u8>(2);
    assert_eq!(
        extra.bind_cno_new_key(&cno),
        Err(CnoError::Full { capacity: N })
    );
    assert_eq!(
        consumers[0].1.bind_cno_new_key(&cno),
        Err(CnoError::AlreadyBound)
    );
    // Unbind every third, bind fresh EVDs: still unique among those bound.
    for (_, c) in consumers.iter_mut().step_by(3) {
        keys.remove(&c.unbind_cno().unwrap());
    }
    let mut fresh: Vec<_> = (0..N.div_ceil(3)).map(|_| pair::<u8>(2)).collect();
    for (_, c) in fresh.iter_mut() {
        let k = c.bind_cno_new_key(&cno.handle()).unwrap();
        assert!(k < 2 * N as u64 && keys.insert(k), "key {k} not unique");
    }
    assert_eq!(cno.bound(), N);
    // Each key reaches the CNO as handed out.
    for (p, c) in fresh.iter_mut() {
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
        p.post(0).unwrap();
    }
    let want: Vec<u64> = fresh.iter().map(|(_, c)| c.cno_key().unwrap()).collect();
    assert_eq!(ready_keys(&mut cno), want);
}

#[test]
fn a_full_cno_refuses_a_bind_with_its_capacity() {
    let cno = Cno::new(2).unwrap();
    let (_p1, mut a) = pair::<u8>(2);
    let (_p2, mut b) = pair::<u8>(2);
    let (_p3, mut c) = pair::<u8>(2);
    a.bind_cno(&cno, 1).unwrap();
    assert_eq!(a.bind_cno(&cno, 1), Err(CnoError::AlreadyBound));
    b.bind_cno(&cno, 2).unwrap();
    assert_eq!(c.bind_cno(&cno, 3), Err(CnoError::Full { capacity: 2 }));
    assert_eq!(c.cno_key(), None, "a refused bind leaves it unbound");
    assert_eq!(cno.bound(), 2);
    a.unbind_cno();
    c.bind_cno(&cno, 3).unwrap();
    assert_eq!(cno.bound(), 2);
}

#[test]
fn a_close_after_the_enable_was_used_adds_no_second_key() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 9);
    p.post(1).unwrap();
    drop(p);
    assert_eq!(ready_keys(&mut cno), [9]);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
    assert_eq!(drain(&mut c), (vec![1], true));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Closed));
    assert_eq!(cno.try_next(), None);
}

#[test]
fn closing_an_evd_both_directly_armed_and_enabled_wakes_both_once() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c, fd) = enabled_with_an_eventfd(&cno, 9);
    assert_eq!(c.arm(), ArmStatus::Armed);
    drop(p);
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "the direct waiter is woken once"
    );
    assert_eq!(ready_keys(&mut cno), [9], "and the CNO gets the key once");
    assert_eq!(drain(&mut c), (vec![], true));
}

/// A poster's `closed()` waker that runs a task inline, as some executors'
/// wakers do, and the task disables the EVD on its CNO: close delivers its
/// CNO trigger before it wakes the posters, so the disable barrier has
/// nothing left to wait for (a trigger owed after the wake would never come:
/// the thread that owes it is the one waiting).
#[test]
fn a_close_waker_that_disables_the_evd_inline_finds_the_close_s_trigger_landed() {
    struct DisableOnWake {
        consumer: Arc<std::sync::Mutex<Consumer<u8>>>,
        disables: AtomicU64,
    }
    impl std::task::Wake for DisableOnWake {
        fn wake(self: Arc<Self>) {
            self.consumer.lock().unwrap().disable_cno();
            self.disables.fetch_add(1, Relaxed);
        }
    }
    let mut cno = Cno::new(1).unwrap();
    let (p, c) = enabled::<u8>(&cno, 9);
    let task = Arc::new(DisableOnWake {
        consumer: Arc::new(std::sync::Mutex::new(c)),
        disables: AtomicU64::new(0),
    });
    let mut closed = std::pin::pin!(p.closed());
    let waker = std::task::Waker::from(task.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(closed.as_mut().poll(&mut cx).is_pending());
    let _dog = Watchdog::new(
        "an inline waker's disable barrier",
        Arc::new(AtomicU64::new(0)),
    );
    p.close();
    assert_eq!(task.disables.load(Relaxed), 1, "the waker ran once");
    assert_eq!(
        cno.try_next(),
        None,
        "disabled: the key is not in the ready set"
    );
    let mut c = task.consumer.lock().unwrap();
    assert_eq!(drain(&mut c), (vec![], true));
}

/// A loss is news like a post: on an enabled EVD it puts the key in the
/// ready set. (The enable can outlive a post only behind a direct waiter,
/// which the first post wakes; the lossy post on the full ring then finds
/// the enable.)
#[test]
fn a_loss_on_an_enabled_evd_puts_its_key_in_the_ready_set() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled_with_capacity::<u8>(&cno, 4, 1);
    assert_eq!(c.arm(), ArmStatus::Armed);
    p.post(1).unwrap(); // wakes the direct waiter; the ring is full
    assert_eq!(cno.try_next(), None);
    lose(&p, 2);
    assert_eq!(ready_keys(&mut cno), [4]);
    assert_report(&mut c, 1);
    assert_eq!(c.try_dequeue(), Ok(1));
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
}

#[test]
fn a_dropped_cno_sends_later_triggers_to_the_evds_own_eventfd() {
    let cno = Cno::new(2).unwrap();
    let (p, mut c, fd) = enabled_with_an_eventfd(&cno, 1);
    // A second EVD whose key is queued when the CNO goes.
    let (q, mut d) = pair::<u8>(4);
    let fd_d = d.notify_fd().unwrap();
    d.bind_cno(&cno, 2).unwrap();
    assert_eq!(d.enable_cno(), Ok(ArmStatus::Armed));
    q.post(0).unwrap();
    drop(cno);
    assert_eq!(fd.acknowledge().unwrap(), 0);
    p.post(1).unwrap();
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "the trigger notified the EVD's own waiter"
    );
    p.post(2).unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 0, "once per enable");
    assert_eq!(drain(&mut c).0, [1, 2]);
    assert_eq!(drain(&mut d).0, [0]);
    assert_eq!(fd_d.acknowledge().unwrap(), 0);
}

/// A key queued in a CNO that is then dropped (its ready set discarded)
/// moves with its EVD to another CNO: the news reaches that one.
#[test]
fn a_key_a_dropped_cno_discarded_moves_with_its_evd() {
    let old = Cno::new(1).unwrap();
    let mut new = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&old, 1);
    p.post(1).unwrap(); // key 1 queued in the old CNO
    drop(old);
    c.modify_cno(&new, 5).unwrap();
    assert_eq!(new.try_next(), Some(5), "the news moved");
    assert_eq!(drain(&mut c).0, [1]);
}

#[test]
fn a_dropped_cno_leaves_a_direct_waiter_woken() {
    let cno = Cno::new(2).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 1);
    drop(cno);
    let t = std::thread::spawn(move || {
        let r = c.wait(1, None);
        (c, r)
    });
    while !p.query().armed && !t.is_finished() {
        std::thread::yield_now();
    }
    p.post(7).unwrap();
    let (mut c, r) = t.join().unwrap();
    assert_eq!(r, Ok(1));
    assert_eq!(c.try_dequeue(), Ok(7));
}

#[test]
fn a_direct_waiter_preempts_the_cno_and_the_enable_stays_for_the_next_post() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c, fd) = enabled_with_an_eventfd(&cno, 2);
    assert_eq!(c.arm(), ArmStatus::Armed);
    p.post(1).unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 1, "the direct waiter is woken");
    assert_eq!(cno.try_next(), None, "not the CNO");
    assert!(!c.query().armed);
    // The enable is still there: the next post reaches the CNO.
    p.post(2).unwrap();
    assert_eq!(ready_keys(&mut cno), [2]);
    assert_eq!(fd.acknowledge().unwrap(), 0);
    assert_eq!(drain(&mut c).0, [1, 2]);
}

#[test]
fn a_blocked_direct_waiter_preempts_the_cno() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 2);
    let t = std::thread::spawn(move || {
        let r = c.wait(1, None);
        (c, r)
    });
    // The post must find the waiter armed to test the preemption; wait for
    // the arm (it comes: the waiter has nothing to wait for but a post).
    while !p.query().armed {
        std::thread::yield_now();
    }
    p.post(1).unwrap();
    let (mut c, r) = t.join().unwrap();
    assert_eq!(r, Ok(1));
    assert_eq!(cno.try_next(), None, "the direct waiter took the wake");
    assert_eq!(drain(&mut c).0, [1]);
    p.post(2).unwrap();
    assert_eq!(cno.try_next(), Some(2), "the enable stayed");
}

#[test]
fn an_async_direct_waiter_preempts_the_cno() {
    let mut cno = Cno::new(1).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 2);
    {
        let mut recv = c.recv();
        assert_eq!((&mut recv).now_or_never(), None, "registered and armed");
        p.post(1).unwrap();
        assert_eq!(cno.try_next(), None, "the task took the wake");
        assert_eq!(futures::executor::block_on(recv), Ok(1));
    }
    p.post(2).unwrap();
    assert_eq!(cno.try_next(), Some(2));
}

/// A `recv` or `recv_batch` future dropped before its first poll (a
/// `select!` whose other branch was ready) armed nothing, so it withdraws
/// nothing: an arm the consumer made itself on its bound EVD, to wait on its
/// eventfd, is still answered by the next post.
#[test]
fn a_future_dropped_unpolled_leaves_the_consumer_s_own_arm_in_place() {
    let cno = Cno::new(1).unwrap();
    let (p, mut c) = bound::<u8>(&cno, 3);
    let fd = c.notify_fd().unwrap();
    assert_eq!(c.arm(), ArmStatus::Armed);
    drop(c.recv());
    let mut buf = Vec::new();
    drop(c.recv_batch(&mut buf, 4));
    assert!(c.query().armed, "the arm is in place");
    p.post(1).unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 1, "and the post answers it");
}

/// A `Recv` or `RecvBatch` that completed, was polled again (it waits for
/// the next event, armed) and is then dropped withdraws that arm as any
/// dropped waiting future does: the post it would have preempted the CNO for
/// reaches the CNO.
#[test]
fn a_completed_async_wait_polled_again_then_dropped_hands_the_next_post_to_the_cno() {
    fn repoll_then_drop<F: std::future::Future + Unpin>(
        mut wait: F,
        p: &Poster<u8>,
        cno: &mut Cno,
        got_the_first: impl Fn(F::Output) -> bool,
    ) {
        assert!((&mut wait).now_or_never().is_none(), "armed");
        p.post(1).unwrap();
        assert_eq!(cno.try_next(), None, "the task took the wake");
        assert!((&mut wait).now_or_never().is_some_and(got_the_first));
        assert!((&mut wait).now_or_never().is_none(), "armed again");
    }
    for future in ["recv", "recv_batch"] {
        let mut cno = Cno::new(1).unwrap();
        let (p, mut c) = enabled::<u8>(&cno, 2);
        let mut buf = Vec::new();
        match future {
            "recv" => repoll_then_drop(c.recv(), &p, &mut cno, |r| r == Ok(1)),
            _ => repoll_then_drop(c.recv_batch(&mut buf, 4), &p, &mut cno, |r| r == Ok(1)),
        }
        p.post(2).unwrap();
        assert_eq!(
            cno.try_next(),
            Some(2),
            "{future}: the post reached the CNO"
        );
        assert_eq!(c.try_dequeue(), Ok(2), "{future}");
    }
}

/// The stream cannot see its `next()` dropped: its arm stays, and the
/// documented `disarm` hands the next post (or an event already queued) to
/// the CNO.
#[test]
fn a_disarm_after_an_abandoned_stream_poll_hands_the_next_post_to_the_cno() {
    for queued_first in [false, true] {
        let mut cno = Cno::new(1).unwrap();
        let (p, mut c) = enabled::<u8>(&cno, 3);
        assert_eq!(c.next().now_or_never(), None, "armed");
        if queued_first {
            p.post(1).unwrap(); // wakes the abandoned task
            assert_eq!(cno.try_next(), None, "preempted");
        }
        c.disarm();
        if !queued_first {
            p.post(1).unwrap();
        }
        assert_eq!(cno.try_next(), Some(3), "queued first: {queued_first}");
        assert_eq!(c.try_dequeue(), Ok(1));
    }
}

#[test]
fn wait_blocks_until_a_key_is_ready_then_takes_every_ready_key() {
    let mut cno = Cno::new(4).unwrap();
    let (pa, mut a) = enabled::<u8>(&cno, 1);
    let (pb, mut b) = enabled::<u8>(&cno, 2);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("Cno::wait", progress);
    let t = std::thread::spawn(move || {
        pa.post(1).unwrap();
        pb.post(2).unwrap();
        (pa, pb)
    });
    let mut keys = Vec::new();
    while keys.len() < 2 {
        let before = keys.len();
        let n = cno.wait(&mut keys);
        assert!(n >= 1 && keys.len() == before + n);
    }
    assert_eq!(keys, [1, 2]);
    let (pa, pb) = t.join().unwrap();
    // Every key ready when the wait looks is taken by that one wait.
    drain(&mut a);
    drain(&mut b);
    assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    assert_eq!(b.enable_cno(), Ok(ArmStatus::Armed));
    pa.post(3).unwrap();
    pb.post(4).unwrap();
    keys.clear();
    assert_eq!(cno.wait(&mut keys), 2);
    assert_eq!(keys, [1, 2]);
}

#[test]
fn wait_with_a_zero_spin_budget_still_wakes() {
    let mut cno = Cno::new(4).unwrap();
    cno.set_spin_budget(Duration::ZERO);
    let (p, mut c) = bound::<u32>(&cno, 1);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("Cno::wait, zero spin", progress.clone());
    let t = post_0_to(p, 200);
    let mut keys = Vec::new();
    let mut next = 0;
    loop {
        if drain_in_order(&mut c, &mut next, &progress) {
            break;
        }
        match c.enable_cno().unwrap() {
            ArmStatus::Armed => {
                keys.clear();
                assert_eq!(cno.wait(&mut keys), 1);
                assert_eq!(keys, [1]);
            }
            ArmStatus::Pending => {}
            ArmStatus::Closed => break,
        }
    }
    t.join().unwrap();
    assert_eq!(next, 200);
}

#[test]
fn wait_timeout_and_deadline_return_zero_only_when_no_key_is_ready() {
    let mut cno = Cno::new(4).unwrap();
    let mut keys = Vec::new();
    assert_eq!(cno.wait_timeout(&mut keys, Duration::from_millis(1)), 0);
    assert_eq!(cno.wait_deadline(&mut keys, Instant::now()), 0);
    assert_eq!(cno.wait_timeout(&mut keys, Duration::ZERO), 0);
    let (p, mut c) = enabled::<u8>(&cno, 3);
    p.post(1).unwrap();
    // A key ready before the call is taken even with a deadline passed.
    assert_eq!(cno.wait_deadline(&mut keys, Instant::now()), 1);
    assert_eq!(keys, [3]);
    // An entry whose key was removed is no key: still a timeout.
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(2).unwrap();
    c.disable_cno();
    keys.clear();
    assert_eq!(cno.wait_timeout(&mut keys, Duration::from_millis(1)), 0);
    assert!(keys.is_empty());
    // A timeout too large for an Instant waits without one.
    drain(&mut c);
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    p.post(3).unwrap();
    assert_eq!(cno.wait_timeout(&mut keys, Duration::MAX), 1);
}

#[test]
fn ready_set_resolves_with_every_key_ready_then() {
    let mut cno = Cno::new(4).unwrap();
    let (pa, mut a) = enabled::<u8>(&cno, 1);
    let (pb, _b) = enabled::<u8>(&cno, 2);
    let mut keys = Vec::new();
    assert_eq!(cno.ready_set(&mut keys).now_or_never(), None, "nothing yet");
    pb.post(1).unwrap();
    pa.post(1).unwrap();
    assert_eq!(futures::executor::block_on(cno.ready_set(&mut keys)), 2);
    assert_eq!(keys, [2, 1]);
    // An entry whose key was removed does not resolve it.
    drain(&mut a);
    assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    pa.post(2).unwrap();
    a.disable_cno();
    assert_eq!(cno.ready_set(&mut keys).now_or_never(), None);
}

#[test]
fn ready_set_is_woken_by_a_post_on_another_thread() {
    let mut cno = Cno::new(4).unwrap();
    let (p, _c) = enabled::<u8>(&cno, 6);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("ready_set", progress);
    let mut keys = Vec::new();
    let (count, waker) = counting();
    let mut ready = std::pin::pin!(cno.ready_set(&mut keys));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(ready.as_mut().poll(&mut cx).is_pending(), "no key yet");
    // Posted once the future waits (no sooner than this line).
    std::thread::spawn(move || p.post(1).unwrap())
        .join()
        .unwrap();
    assert_eq!(count.wakes(), 1, "the post woke the waiting task");
    assert_eq!(ready.as_mut().poll(&mut cx), std::task::Poll::Ready(1));
    assert_eq!(keys, [6]);
}

#[test]
fn the_cno_stream_yields_keys_as_they_become_ready_and_never_ends() {
    use futures::stream::FusedStream;
    let mut cno = Cno::new(4).unwrap();
    let (p, mut c) = bound::<u32>(&cno, 4);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("Cno stream", progress.clone());
    let t = post_0_to(p, 100);
    let (mut next, mut keys) = (0u64, 0u32);
    futures::executor::block_on(async {
        loop {
            if drain_in_order(&mut c, &mut next, &progress) {
                break;
            }
            match c.enable_cno().unwrap() {
                ArmStatus::Armed => {
                    assert_eq!(cno.next().await, Some(4));
                    keys += 1;
                }
                ArmStatus::Pending => {}
                ArmStatus::Closed => break,
            }
        }
    });
    t.join().unwrap();
    assert_eq!(next, 100);
    assert!(keys >= 1);
    assert!(!cno.is_terminated());
    assert_eq!(cno.next().now_or_never(), None, "pending, not ended");
}

#[test]
fn the_eventfd_is_written_exactly_once_per_idle_to_ready_transition() {
    const N: usize = 3;
    let mut cno = Cno::new(N).unwrap();
    let fd = cno.notify_fd().unwrap();
    let (posters, mut consumers): (Vec<_>, Vec<_>) = (0..N).map(|_| pair::<u8>(4)).unzip();
    for (i, c) in consumers.iter_mut().enumerate() {
        c.bind_cno(&cno, i as u64).unwrap();
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    }
    assert_eq!(fd.acknowledge().unwrap(), 0);
    assert_eq!(cno.arm(), ArmStatus::Armed);
    assert_eq!(cno.arm(), ArmStatus::Armed);
    for p in &posters {
        p.post(1).unwrap();
        p.post(2).unwrap();
    }
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "three keys, one idle → ready transition"
    );
    assert_eq!(ready_keys(&mut cno), [0, 1, 2]);
    assert_eq!(fd.acknowledge().unwrap(), 0);

    // Not armed: a new key does not write the fd.
    drain(&mut consumers[0]);
    assert_eq!(consumers[0].enable_cno(), Ok(ArmStatus::Armed));
    posters[0].post(3).unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 0, "not armed");
    assert_eq!(cno.arm(), ArmStatus::Pending, "a key is queued");
    assert_eq!(ready_keys(&mut cno), [0]);

    // Armed again: the next key writes it once more.
    assert_eq!(cno.arm(), ArmStatus::Armed);
    for i in 1..N {
        drain(&mut consumers[i]);
        assert_eq!(consumers[i].enable_cno(), Ok(ArmStatus::Armed));
        posters[i].post(4).unwrap();
    }
    assert_eq!(fd.acknowledge().unwrap(), 1);
    assert_eq!(ready_keys(&mut cno), [1, 2]);

    // An entry whose key was removed makes arm say Pending; taking it (no
    // key) lets the next arm say Armed.
    drain(&mut consumers[0]);
    assert_eq!(consumers[0].enable_cno(), Ok(ArmStatus::Armed));
    posters[0].post(5).unwrap();
    consumers[0].disable_cno();
    assert_eq!(cno.arm(), ArmStatus::Pending);
    assert_eq!(ready_keys(&mut cno), [] as [u64; 0]);
    assert_eq!(cno.arm(), ArmStatus::Armed);
    assert_eq!(fd.acknowledge().unwrap(), 0);
}

#[test]
fn the_eventfd_loop_serves_a_poster_thread_with_poll() {
    let mut cno = Cno::new(2).unwrap();
    let fd = cno.notify_fd().unwrap();
    let (p, mut c) = bound::<u32>(&cno, 1);
    let progress = Arc::new(AtomicU64::new(0));
    let _dog = Watchdog::new("CNO eventfd loop", progress.clone());
    let t = post_0_to(p, 500);
    let (mut next, mut polls) = (0u64, 0u32);
    let mut enabled = false;
    'outer: loop {
        // Serve every ready key: drain, re-enable.
        for k in ready_keys(&mut cno) {
            assert_eq!(k, 1);
            assert!(enabled, "a key without an enable");
            enabled = false;
        }
        while !enabled {
            if drain_in_order(&mut c, &mut next, &progress) {
                break 'outer;
            }
            match c.enable_cno().unwrap() {
                ArmStatus::Armed => enabled = true,
                ArmStatus::Pending => {}
                ArmStatus::Closed => break 'outer,
            }
        }
        match cno.arm() {
            ArmStatus::Armed => {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                rustix::event::poll(&mut fds, None).expect("poll");
                fd.acknowledge().unwrap();
                polls += 1;
            }
            ArmStatus::Pending => {}
            ArmStatus::Closed => unreachable!("the ring closes only with the Cno"),
        }
    }
    t.join().unwrap();
    assert_eq!(next, 500);
    assert!(polls >= 1);
}

#[test]
fn a_bind_is_refused_only_at_capacity_even_when_every_spare_slot_awaits_the_waiters_pop() {
    // One EVD's worth of CNO (two slots). Each round binds, enables, posts
    // (the key's index goes into the ready ring) and unbinds without the
    // waiter popping: the slot must wait for that pop before it is free.
    let mut cno = evd::Cno::new(1).unwrap();
    let (_p0, mut keep) = evd::bounded::<u8>(2).unwrap();
    for key in [10, 11] {
        let (p, mut c) = evd::bounded::<u8>(2).unwrap();
        c.bind_cno(&cno, key).unwrap();
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
        p.post(1).unwrap();
        assert_eq!(c.unbind_cno(), Some(key));
    }
    // Both slots wait for a pop; nothing is bound: the bind succeeds.
    keep.bind_cno(&cno, 12).unwrap();
    assert_eq!(keep.enable_cno(), Ok(ArmStatus::Armed));
    _p0.post(7).unwrap();
    let mut keys = Vec::new();
    cno.try_ready(&mut keys);
    assert_eq!(keys, [12], "the stale entries deliver the new key once");
    // And a second bind is refused: one EVD is bound.
    let (_p, mut other) = evd::bounded::<u8>(2).unwrap();
    assert_eq!(
        other.bind_cno(&cno, 13),
        Err(evd::CnoError::Full { capacity: 1 })
    );
    assert_eq!(keep.try_dequeue(), Ok(7));
}

/// A direct arm left behind by an abandoned async wait (a `Stream` poll or
/// an unbound `Recv` that returned `Pending`, then was dropped) would take
/// the next post's notification, a direct waiter preempting the CNO, and
/// wake nobody: enabling on the CNO withdraws it, so the post reaches the
/// CNO.
#[test]
fn an_enable_after_an_abandoned_async_wait_gets_the_next_post() {
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    for abandon in ["stream", "recv"] {
        let mut cno = Cno::new(4).unwrap();
        let (p, mut c) = pair::<u8>(4);
        match abandon {
            "stream" => assert!(c.poll_next_unpin(&mut cx).is_pending()),
            _ => assert!(c.recv().poll_unpin(&mut cx).is_pending()),
        }
        c.bind_cno(&cno, 9).unwrap();
        assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed), "{abandon}");
        p.post(1).unwrap();
        assert_eq!(
            cno.try_next(),
            Some(9),
            "{abandon}: the post reached the CNO"
        );
        assert_eq!(c.try_dequeue(), Ok(1), "{abandon}");
    }
}

/// A binding moved to a fresh slot (a disable while its key was still in the
/// ready ring) keeps its key; the slot it left is freed by the waiter's pop
/// and bound again later: the key handed out then is not the moved
/// binding's, nor any other bound EVD's.
#[test]
fn a_key_the_cno_hands_out_is_held_by_no_bound_evd_even_after_a_move() {
    let mut cno = Cno::new(3).unwrap(); // 6 slots, keys below 6
    let (pa, mut a) = pair::<u8>(4);
    let ka = a.bind_cno_new_key(&cno).unwrap();
    assert_eq!(a.enable_cno(), Ok(ArmStatus::Armed));
    pa.post(1).unwrap(); // a's index is in the ready ring
    a.disable_cno(); // moves a to a fresh slot, with its key
    assert_eq!(
        cno.try_next(),
        None,
        "the stale entry is popped, not delivered"
    );
    let (_pc, mut c) = pair::<u8>(4);
    c.bind_cno(&cno, 3).unwrap(); // a key the caller chose
    let (_pb, mut b) = pair::<u8>(4);
    // Every slot comes round: b never gets a key a bound EVD holds.
    for _ in 0..12 {
        let kb = b.bind_cno_new_key(&cno).unwrap();
        assert!(kb < 6);
        assert_ne!(kb, ka, "a's key");
        assert_ne!(kb, 3, "c's key");
        b.unbind_cno();
    }
    assert_eq!(a.cno_key(), Some(ka));
}

#[test]
fn a_cno_eventfd_made_after_an_answered_arm_is_readable_for_that_key() {
    let mut cno = Cno::new(2).unwrap();
    let (p, mut c) = pair::<u8>(4);
    c.bind_cno(&cno, 7).unwrap();
    assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    assert_eq!(cno.arm(), ArmStatus::Armed);
    p.post(1).unwrap(); // the key answers the CNO's arm; no eventfd yet
    let fd = cno.notify_fd().unwrap();
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "the answered arm is on the fd"
    );
    assert_eq!(ready_keys(&mut cno), [7]);
}

/// `bind_cno_new_key` hands out the key nobody has held for the longest:
/// checked against a queue of unheld keys in release order, through binds,
/// unbinds and moves (a disable while the key is in the ready ring moves
/// the binding to a fresh slot, with its key, so keys and slots part).
#[test]
fn a_freed_key_is_handed_out_again_only_after_every_key_freed_before_it() {
    const N: usize = 3; // 6 slots, keys below 6
    let mut cno = Cno::new(N).unwrap();
    let mut unheld: std::collections::VecDeque<u64> = (0..2 * N as u64).collect();
    let mut evds: Vec<_> = (0..N).map(|_| pair::<u8>(4)).collect();
    let mut rng = Rng::new(7);
    for round in 0..300 {
        let (p, c) = &mut evds[rng.below(N as u64) as usize];
        match c.cno_key() {
            None => {
                let k = c.bind_cno_new_key(&cno).unwrap();
                assert_eq!(Some(k), unheld.pop_front(), "round {round}");
            }
            Some(k) if rng.below(2) == 0 => {
                // A move: enabled, posted, disabled with the key queued.
                drain(c);
                assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
                p.post(1).unwrap();
                c.disable_cno();
                assert_eq!(c.cno_key(), Some(k), "a move keeps the key");
                drain(c);
                assert_eq!(cno.try_next(), None, "the stale entry is popped");
            }
            Some(k) => {
                assert_eq!(c.unbind_cno(), Some(k));
                unheld.push_back(k);
            }
        }
    }
}

/// An EVD enabled on its CNO and armed for a direct wait (a stream poll's
/// arm), whose registered waker, dropped when the next wait registers its
/// own, posts an event and makes the EVD unwaitable: the post lands
/// between that wait's arm of the round before and its look.
fn armed_then_post_and_unwaitable_at_the_next_registration() -> (Cno, Poster<u8>, Consumer<u8>) {
    struct PostOnDrop(std::sync::Mutex<Option<Poster<u8>>>);
    impl std::task::Wake for PostOnDrop {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for PostOnDrop {
        fn drop(&mut self) {
            if let Some(p) = self.0.lock().unwrap().take() {
                p.post(1).unwrap();
                p.set_unwaitable();
            }
        }
    }
    let cno = Cno::new(4).unwrap();
    let (p, mut c) = enabled::<u8>(&cno, 7);
    c.set_spin_budget(Duration::ZERO);
    {
        let hook = Arc::new(PostOnDrop(std::sync::Mutex::new(Some(p.clone()))));
        let waker = std::task::Waker::from(hook);
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(c.poll_next_unpin(&mut cx).is_pending());
    }
    assert!(c.query().armed);
    (cno, p, c)
}

/// A direct waiter preempts the CNO: a blocking dequeue whose arm a post
/// took returns that post's event, and the CNO does not also get the key,
/// even when the EVD is made unwaitable before the dequeue looks again.
#[test]
fn a_dequeue_that_returns_the_event_after_an_unwaitable_does_not_also_hand_it_to_the_cno() {
    let (mut cno, p, mut c) = armed_then_post_and_unwaitable_at_the_next_registration();
    assert_eq!(c.dequeue_timeout(Duration::from_secs(60)), Ok(1));
    assert_eq!(
        cno.try_next(),
        None,
        "the event went to the dequeue; its key is not the CNO's too"
    );
    drop(p);
}

/// The same race for a wait, which fails on an unwaitable EVD whatever is
/// ready (DAT): it takes nothing, so the event its arm preempted the CNO
/// for goes to the CNO when it withdraws.
#[test]
fn a_wait_refused_as_unwaitable_hands_the_event_its_arm_took_to_the_cno() {
    let (mut cno, p, mut c) = armed_then_post_and_unwaitable_at_the_next_registration();
    assert_eq!(
        c.wait(1, Some(Duration::from_secs(60))),
        Err(evd::WaitError::Unwaitable)
    );
    assert_eq!(cno.try_next(), Some(7), "the enabled EVD has work");
    assert_eq!(c.try_dequeue(), Ok(1));
    drop(p);
}

/// A permit sent while every permit the EVD allows is out wakes the
/// reservations waiting for one, on the sender's thread. The send owes the
/// CNO a trigger (it took the enable), and a disable waits for the triggers
/// owed (its barrier): the send triggers first, as a close does, so a
/// waker that runs its task inline and disables the EVD on its CNO does not
/// wait for a trigger its own thread has yet to make.
#[test]
fn a_permit_send_triggers_the_cno_before_it_wakes_the_reservations_waiting_for_a_permit() {
    use std::sync::{Mutex, mpsc};
    use std::task::{Wake, Waker};
    struct Disables(Mutex<Option<Consumer<u32>>>, mpsc::Sender<()>);
    impl Wake for Disables {
        fn wake(self: Arc<Self>) {
            if let Some(c) = self.0.lock().unwrap().as_mut() {
                c.disable_cno();
            }
            let _ = self.1.send(());
        }
    }
    let mut cno = Cno::new(4).unwrap();
    let (poster, mut consumer) = evd::bounded::<u32>(512).unwrap();
    consumer.bind_cno(&cno, 7).unwrap();
    assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
    let (told, woken) = mpsc::channel();
    let state = Arc::new(Disables(Mutex::new(Some(consumer)), told));
    let waker = Waker::from(state.clone());
    if !common::send_a_permit_while_every_permit_is_out(&poster, &waker) {
        // The disable waits for the stuck send's trigger: leave them.
        std::mem::forget(state);
        panic!("the disable run by the permit's waker waited for the send's own trigger");
    }
    assert!(woken.try_recv().is_ok(), "the reservation's waker ran");
    // The disable the waker ran returned and took effect: it removed the
    // key the send's trigger had made ready (without it, key 7 would wait).
    assert_eq!(cno.try_next(), None, "disabled by the waker");
    assert_eq!(state.0.lock().unwrap().as_ref().map(|c| c.len()), Some(1));
}

/// A waker whose `wake` panics; its other calls do nothing.
fn waker_whose_wake_panics() -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn wake(_: *const ()) {
        panic!("the CNO waiter's waker");
    }
    fn nothing(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, nothing);
    // SAFETY: no function of the vtable reads the data pointer, so a null
    // one keeps RawWaker's contract.
    unsafe { std::task::Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A permit sent while every permit is out triggers its CNO first; should
/// the CNO waiter's waker panic there, the reservations waiting for a
/// permit are still woken (the panic comes out of the send after them):
/// skipped, they would wait for a wake no later send gives.
#[test]
fn a_cno_waker_that_panics_in_a_permit_send_does_not_cost_the_permit_waiters_their_wake() {
    use std::task::Context;
    let (mut cno, (poster, _consumer)) = {
        let mut cno = Cno::new(4).unwrap();
        let (poster, mut consumer) = evd::bounded::<u32>(512).unwrap();
        consumer.bind_cno(&cno, 7).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let panicking = waker_whose_wake_panics();
        assert!(
            cno.poll_next_unpin(&mut Context::from_waker(&panicking))
                .is_pending()
        );
        (cno, (poster, consumer))
    };
    let mut permits: Vec<_> = (0..evd::Permit::<u32>::MAX_OUT)
        .map(|_| poster.try_reserve().ok().unwrap())
        .collect();
    let (woken, waker) = common::counting();
    let mut reserving = std::pin::pin!(poster.reserve());
    assert!(
        reserving
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    let last = permits.pop().unwrap();
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| last.send(1)));
    let message = sent.err().and_then(|p| p.downcast_ref::<&str>().copied());
    assert_eq!(message, Some("the CNO waiter's waker"));
    assert_eq!(
        woken.wakes(),
        1,
        "the reservation waiting for a permit was woken"
    );
    assert_eq!(ready_keys(&mut cno), [7]);
}

/// `into_upcalls` (and `into_upcalls_mut`) of a consumer whose CNO enable
/// is still set while events are queued (a direct arm took the post's
/// notification) takes the enable back without triggering the CNO: no key,
/// and no wake of the CNO's waiter, for an EVD that upcalls serve now (a
/// CNO waker that panicked there would unwind out of the conversion).
#[test]
fn into_upcalls_of_a_consumer_still_enabled_triggers_no_cno() {
    for exclusive in [false, true] {
        let mut cno = Cno::new(1).unwrap();
        let cno_fd = cno.notify_fd().unwrap();
        assert_eq!(cno.arm(), ArmStatus::Armed);
        let (poster, mut consumer) = pair::<u8>(4);
        consumer.bind_cno(&cno, 3).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        assert_eq!(consumer.arm(), ArmStatus::Armed);
        poster.post(1).unwrap();
        assert_eq!(
            cno_fd.acknowledge().unwrap(),
            0,
            "the post took the direct arm; the CNO's enable stays"
        );
        let upcalls = if exclusive {
            consumer.into_upcalls_mut(evd::Invoke::Any, |_, _| {})
        } else {
            consumer.into_upcalls(
                evd::UpcallPolicy::SingleInstance,
                evd::Invoke::Any,
                |_, _| {},
            )
        };
        assert_eq!(cno_fd.acknowledge().unwrap(), 0, "exclusive: {exclusive}");
        assert_eq!(cno.try_next(), None, "exclusive: {exclusive}");
        drop(upcalls);
    }
}
