//! The convenience API: accessors, blocking dequeue, iterators, fused
//! futures and streams. One test per promise, named after it.

use evd::{PostError, TryDequeueError};

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
fn capacity_follows_resize_on_both_handles() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.resize(32).unwrap();
    assert_eq!((poster.capacity(), consumer.capacity()), (32, 32));
}

#[test]
fn is_closed_seen_by_both_handles_and_events_still_drain() {
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    poster.post(7).unwrap();
    assert!(!poster.is_closed() && !consumer.is_closed());
    poster.close();
    assert!(poster.is_closed() && consumer.is_closed());
    assert_eq!(consumer.len(), 1);
    assert_eq!(consumer.try_dequeue(), Ok(7));
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    assert!(consumer.is_empty());
}

#[test]
fn post_error_is_full_and_is_closed() {
    let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
    poster.post(1).unwrap();
    let full = poster.post(2).unwrap_err();
    assert!(full.is_full() && !full.is_closed());
    assert_eq!(full.into_inner(), 2);
    consumer.close();
    let closed = poster.post(3).unwrap_err();
    assert!(closed.is_closed() && !closed.is_full());
    assert_eq!(closed, PostError::Closed(3));
}
