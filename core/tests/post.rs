//! Creating an EVD and posting to it: capacity errors, refused posts
//! (full or closed, the event handed back), batch posts, and what the handles
//! and `query()` report about the ring. One test per promise, named after it.

mod common;
use common::{armed_empty, full_ring, lose};
use evd::{Invoke, PostError, TryDequeueError, UpcallPolicy};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::*;

#[test]
fn accessors_agree_on_poster_and_consumer() {
    let (poster, mut consumer) = evd::bounded::<u32>(3).unwrap();
    for (len, cap) in [
        (poster.len(), poster.capacity()),
        (consumer.len(), consumer.capacity()),
    ] {
        assert_eq!((len, cap), (0, 4));
    }
    assert!(poster.is_empty() && consumer.is_empty());
    assert!(!poster.is_full() && !consumer.is_full());
    for i in 0..4 {
        poster.post(i).unwrap();
    }
    assert_eq!((poster.len(), consumer.len()), (4, 4));
    assert!(poster.is_full() && consumer.is_full());
    assert!(!poster.is_empty() && !consumer.is_empty());
    assert_eq!(consumer.try_dequeue(), Ok(0));
    assert_eq!((poster.len(), consumer.len()), (3, 3));
    assert!(!poster.is_full() && !consumer.is_full());
}

#[test]
fn accessors_match_query() {
    let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
    for i in 0..5 {
        poster.post(i).unwrap();
    }
    consumer.try_dequeue().unwrap();
    let q = consumer.query();
    assert_eq!((consumer.len(), consumer.capacity()), (q.len, q.capacity));
    assert_eq!((poster.len(), poster.capacity()), (q.len, q.capacity));
    assert_eq!(consumer.is_closed(), q.closed);
}

#[test]
fn post_error_is_full_and_is_closed() {
    let (poster, mut consumer) = full_ring(&[1]);
    let full = poster.post(2).unwrap_err();
    assert!(full.is_full() && !full.is_closed());
    assert_eq!(full.into_inner(), 2);
    consumer.close();
    let closed = poster.post(3).unwrap_err();
    assert!(closed.is_closed() && !closed.is_full());
    assert_eq!(closed, PostError::Closed(3));
}

#[test]
fn query_snapshots_are_consistent_while_posters_and_the_consumer_run() {
    let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (poster, stop) = (poster.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Relaxed) || n < 1000 {
                let q = poster.query();
                assert!(q.len <= q.capacity, "impossible snapshot {q:?}");
                assert_eq!(q.posted, q.dequeued + q.len as u64, "{q:?}");
                n += 1;
            }
            n
        })
    };
    let producer = {
        let poster = poster.clone();
        std::thread::spawn(move || {
            for i in 0..200_000u64 {
                let mut v = i;
                while let Err(PostError::Full(back)) = poster.post(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        })
    };
    drop(poster);
    let mut got = 0u64;
    while got < 200_000 {
        if consumer.try_dequeue().is_ok() {
            got += 1;
        }
    }
    producer.join().unwrap();
    stop.store(true, Relaxed);
    assert!(observer.join().unwrap() >= 1000);
}

#[test]
fn post_batch_fills_the_room_of_an_empty_ring_whatever_the_cached_head() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let mut batch = vec![0, 1, 2, 3];
    assert_eq!(poster.post_batch(&mut batch), Ok(4));
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 4), Ok(4)); // the poster's hint is stale now
    let mut batch = vec![10, 11, 12, 13, 14, 15];
    assert_eq!(poster.post_batch(&mut batch), Ok(4), "min(len, free room)");
    assert_eq!(batch, [14, 15]);
    // After a shrink, too.
    out.clear();
    consumer.dequeue_batch(&mut out, 8).unwrap();
    assert_eq!(consumer.resize(2), Ok(2));
    let mut batch = vec![20, 21, 22];
    assert_eq!(poster.post_batch(&mut batch), Ok(2));
    // Partly free ring: one queued, three free after a grow.
    assert_eq!(consumer.resize(4), Ok(4));
    out.clear();
    consumer.dequeue_batch(&mut out, 1).unwrap();
    let mut batch = vec![30, 31, 32, 33];
    assert_eq!(poster.post_batch(&mut batch), Ok(3));
}

#[test]
fn post_batch_up_to_posts_min_of_max_len_and_room_in_order() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let mut held = vec![0, 1, 2, 3, 4, 5];
    assert_eq!(poster.post_batch_up_to(&mut held, 3), Ok(3), "max");
    assert_eq!(held, [3, 4, 5]);
    assert_eq!(poster.post_batch_up_to(&mut held, 0), Ok(0), "max 0");
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(1), "room");
    assert_eq!(held, [4, 5]);
    assert_eq!(
        poster.post_batch_up_to(&mut held, 1),
        Err(evd::BatchPostError::Full),
        "no room: refused, nothing taken"
    );
    assert_eq!(held, [4, 5]);
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 8), Ok(4));
    assert_eq!(out, [0, 1, 2, 3]);
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(2), "len");
    assert!(held.is_empty());
    assert_eq!(poster.post_batch_up_to(&mut held, 8), Ok(0), "empty");
    consumer.close();
    let mut more = vec![9];
    assert_eq!(
        poster.post_batch_up_to(&mut more, 1),
        Err(evd::BatchPostError::Closed)
    );
    assert_eq!(more, [9], "a closed EVD hands the events back");
}

#[test]
fn a_refused_post_is_backpressure_not_an_overflow() {
    let (poster, mut consumer) = full_ring(&[1, 2]);
    assert_eq!(poster.post(3), Err(PostError::Full(3)));
    assert_eq!(poster.post(4), Err(PostError::Full(4)));
    assert_eq!(consumer.try_dequeue(), Ok(1), "no report before the events");
    assert_eq!(consumer.try_dequeue(), Ok(2));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    assert_eq!(consumer.query().lost, 0);
}

#[test]
fn a_refused_post_with_upcalls_disabled_writes_nothing() {
    // Upcalls disabled on a full ring: the refusal is plain backpressure.
    let (poster, consumer) = full_ring(&[1]);
    let up = consumer.into_upcalls(UpcallPolicy::Disabled, Invoke::New, |_, _| {});
    assert_eq!(poster.post(2), Err(PostError::Full(2)));
    let q = up.query();
    assert_eq!((q.len, q.lost, q.upcalls, q.notifications), (1, 0, 0, 0));
    drop(up);
}

#[test]
fn query_counters_add_up() {
    let (poster, mut consumer) = armed_empty(2);
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    lose(&poster, 3);
    consumer.try_dequeue().unwrap_err(); // the loss report
    consumer.try_dequeue().unwrap();
    let q = consumer.query();
    assert_eq!(
        (
            q.capacity,
            q.len,
            q.posted,
            q.dequeued,
            q.lost,
            q.notifications
        ),
        (2, 1, 2, 1, 1, 1)
    );
    assert_eq!(q.posted, q.dequeued + q.len as u64);
}

#[test]
fn creation_rejects_bad_capacities_with_typed_errors() {
    assert_eq!(
        evd::bounded::<u8>(0).unwrap_err(),
        evd::CreateError::ZeroCapacity
    );
    assert_eq!(
        evd::bounded::<u8>(evd::MAX_CAPACITY + 1).unwrap_err(),
        evd::CreateError::CapacityTooLarge {
            requested: evd::MAX_CAPACITY + 1
        }
    );
    assert_eq!(evd::bounded::<u8>(3).unwrap().1.query().capacity, 4);
}
