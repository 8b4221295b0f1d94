//! The code paths built on `unsafe` — slot publish/take, batch take, resize
//! moving values between rings, the drops of queued events, and the `&mut`
//! access to an `FnMut` upcall handler — exercised
//! with drop-counting payloads at a size Miri runs in seconds
//! (`scripts/miri`). They run as ordinary tests too.

use evd::{Consumer, Invoke, PostError, Poster, TryDequeueError, UpcallPolicy};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// A heap-owning event that counts its drops (Miri then also checks that
/// the heap part is freed exactly once).
struct Tracked {
    id: Box<u32>,
    drops: Arc<AtomicUsize>,
}

impl Tracked {
    fn new(id: u32, drops: &Arc<AtomicUsize>) -> Tracked {
        Tracked {
            id: Box::new(id),
            drops: drops.clone(),
        }
    }
}

/// Posts a tracked value for each id in `ids`; the ring must have room.
fn post_tracked(poster: &Poster<Tracked>, ids: std::ops::Range<u32>, drops: &Arc<AtomicUsize>) {
    for i in ids {
        poster.post(Tracked::new(i, drops)).unwrap();
    }
}

/// The ids of every value queued now, in order.
fn take_ids(consumer: &mut Consumer<Tracked>) -> Vec<u32> {
    std::iter::from_fn(|| consumer.try_dequeue().ok())
        .map(|t| *t.id)
        .collect()
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

#[test]
fn publish_take_wraps_the_ring_many_laps() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(4).unwrap();
    for i in 0..40 {
        poster.post(Tracked::new(i, &drops)).unwrap();
        if i % 3 == 2 {
            for j in i - 2..=i {
                assert_eq!(*consumer.try_dequeue().unwrap().id, j);
            }
        }
    }
    assert_eq!(*consumer.try_dequeue().unwrap().id, 39);
    assert_eq!(drops.load(SeqCst), 40);
}

#[test]
fn batch_take_appends_in_order_and_moves_each_value_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(8).unwrap();
    let mut out = vec![Tracked::new(100, &drops)];
    for round in 0..5u32 {
        for i in 0..6 {
            poster.post(Tracked::new(round * 10 + i, &drops)).unwrap();
        }
        assert_eq!(consumer.dequeue_batch(&mut out, 4), Ok(4));
        assert_eq!(consumer.dequeue_batch(&mut out, 8), Ok(2));
    }
    let ids: Vec<u32> = out.iter().map(|t| *t.id).collect();
    let mut want = vec![100];
    for round in 0..5u32 {
        want.extend((0..6).map(|i| round * 10 + i));
    }
    assert_eq!(ids, want);
    drop(out);
    assert_eq!(drops.load(SeqCst), 31);
}

#[test]
fn dequeue_with_hands_each_value_once_in_order_around_the_ring() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(8).unwrap();
    let mut ids = Vec::new();
    for round in 0..5u32 {
        for i in 0..6 {
            poster.post(Tracked::new(round * 10 + i, &drops)).unwrap();
        }
        assert_eq!(consumer.dequeue_with(4, |t| ids.push(*t.id)), Ok(4));
        assert_eq!(consumer.dequeue_with(8, |t| ids.push(*t.id)), Ok(2));
    }
    let want: Vec<u32> = (0..5u32)
        .flat_map(|round| (0..6).map(move |i| round * 10 + i))
        .collect();
    assert_eq!(ids, want);
    assert_eq!(
        drops.load(SeqCst),
        30,
        "each value dropped once, by the closure"
    );
}

#[test]
fn a_panic_in_dequeue_with_consumes_what_it_was_given_and_keeps_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(8).unwrap();
    post_tracked(&poster, 0..6, &drops);
    let mut seen = Vec::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        consumer.dequeue_with(8, |t| {
            seen.push(*t.id);
            if *t.id == 2 {
                panic!("handler fails on 2");
            }
        })
    }));
    assert!(r.is_err());
    assert_eq!(seen, [0, 1, 2]);
    assert_eq!(
        drops.load(SeqCst),
        3,
        "the three given were dropped (2 by the unwind)"
    );
    assert_eq!(consumer.len(), 3);
    let rest: Vec<u32> = take_ids(&mut consumer);
    assert_eq!(
        rest,
        [3, 4, 5],
        "the head moved past exactly the three taken"
    );
    // The slots the panic freed are free for posters again.
    for i in 0..8 {
        poster.post(Tracked::new(10 + i, &drops)).unwrap();
    }
    drop(consumer);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 14);
}

#[test]
fn refused_posts_hand_the_value_back_intact() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(1).unwrap();
    poster.post(Tracked::new(1, &drops)).unwrap();
    match poster.post(Tracked::new(2, &drops)) {
        Err(PostError::Full(t)) => assert_eq!(*t.id, 2),
        other => panic!("expected Full, got {:?}", other.is_ok()),
    }
    consumer.close();
    match poster.post(Tracked::new(3, &drops)) {
        Err(PostError::Closed(t)) => assert_eq!(*t.id, 3),
        other => panic!("expected Closed, got {:?}", other.is_ok()),
    }
    assert_eq!(drops.load(SeqCst), 2);
    // A refusal is backpressure: no report, the queued value comes next.
    assert_eq!(*consumer.try_dequeue().unwrap().id, 1);
    assert_eq!(drops.load(SeqCst), 3);
}

#[test]
fn resize_moves_wrapped_values_and_frees_the_old_ring() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(4).unwrap();
    // Wrap the ring so the queued values straddle the end of the buffer.
    for i in 0..3 {
        poster.post(Tracked::new(i, &drops)).unwrap();
        consumer.try_dequeue().unwrap();
    }
    post_tracked(&poster, 3..7, &drops);
    assert_eq!(consumer.resize(16), Ok(16));
    post_tracked(&poster, 7..12, &drops);
    assert_eq!(*consumer.try_dequeue().unwrap().id, 3);
    // Shrink below, then to, what is queued (8 events).
    assert!(consumer.resize(4).is_err());
    assert_eq!(consumer.resize(8), Ok(8));
    let ids: Vec<u32> = take_ids(&mut consumer);
    assert_eq!(ids, (4..12).collect::<Vec<_>>());
    assert_eq!(drops.load(SeqCst), 12);
}

#[test]
fn dropping_the_evd_drops_queued_values_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let (poster, mut consumer) = evd::bounded::<Tracked>(8).unwrap();
        post_tracked(&poster, 0..6, &drops);
        consumer.try_dequeue().unwrap();
        assert_eq!(consumer.resize(16), Ok(16));
        post_tracked(&poster, 6..9, &drops);
        drop(consumer);
        assert_eq!(
            drops.load(SeqCst),
            9,
            "the consumer's drop frees the 8 queued values"
        );
        // The last handle frees the ring.
    }
    assert_eq!(drops.load(SeqCst), 9);
}

/// Post `t`, retrying while the ring is full.
fn post_retrying(poster: &Poster<Tracked>, mut t: Tracked) {
    loop {
        match poster.post(t) {
            Ok(()) => return,
            Err(PostError::Full(back)) => t = back,
            Err(PostError::Closed(_)) => panic!("closed early"),
        }
        std::thread::yield_now();
    }
}

/// Take values (poster `p`'s ids are `p * 100 + i`, `i` in order) until
/// the end of stream, checking FIFO per poster; `on_empty` runs at each
/// empty poll. Returns how many each of two posters delivered.
fn take_per_poster(
    consumer: &mut Consumer<Tracked>,
    mut on_empty: impl FnMut(&mut Consumer<Tracked>),
) -> [u32; 2] {
    let mut next = [0u32; 2];
    loop {
        match consumer.try_dequeue() {
            Ok(t) => {
                let p = (*t.id / 100) as usize;
                assert_eq!(*t.id % 100, next[p], "FIFO per poster");
                next[p] += 1;
            }
            Err(TryDequeueError::Closed) => return next,
            Err(_) => {
                on_empty(consumer);
                std::thread::yield_now();
            }
        }
    }
}

#[test]
fn posters_on_threads_and_a_consumer_exchange_values() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(4).unwrap();
    let threads: Vec<_> = (0..2u32)
        .map(|p| {
            let poster = poster.clone();
            let drops = drops.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    post_retrying(&poster, Tracked::new(p * 100 + i, &drops));
                }
            })
        })
        .collect();
    drop(poster);
    let next = take_per_poster(&mut consumer, |_| {});
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(next, [20, 20]);
    assert_eq!(drops.load(SeqCst), 40);
}

/// Resizes (growing, and shrinking where what is queued fits) while two
/// posters on threads may be between their reservation and their publish,
/// one posting a value at a time, the other batches of two (one
/// reservation, two slots written through one load of the buffer): every
/// value is moved once, in order per poster, and dropped once.
#[test]
fn resizes_among_posters_mid_write_move_every_value_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, mut consumer) = evd::bounded::<Tracked>(4).unwrap();
    let threads: Vec<_> = (0..2u32)
        .map(|p| {
            let (poster, drops) = (poster.clone(), drops.clone());
            std::thread::spawn(move || {
                for i in (0..20).step_by(2) {
                    let [a, b] = [i, i + 1].map(|i| Tracked::new(p * 100 + i, &drops));
                    if p == 0 {
                        post_retrying(&poster, a);
                        post_retrying(&poster, b);
                        continue;
                    }
                    let mut batch = vec![a, b];
                    while !batch.is_empty() {
                        if poster.post_batch(&mut batch).is_err() {
                            std::thread::yield_now();
                        }
                    }
                }
            })
        })
        .collect();
    drop(poster);
    let mut grow = true;
    let next = take_per_poster(&mut consumer, |consumer| {
        // Empty, perhaps with a poster mid-write: the resize waits for its
        // publish before it moves the ring.
        let _ = consumer.resize(if grow { 8 } else { 4 });
        grow = !grow;
    });
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(next, [20, 20]);
    assert_eq!(drops.load(SeqCst), 40);
}

#[test]
fn upcalls_move_values_to_the_handler_and_teardown_returns_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, consumer) = evd::bounded::<Tracked>(8).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |ev, _| {
        s.lock().unwrap().push(*ev.unwrap().id);
    });
    post_tracked(&poster, 0..5, &drops);
    up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
    post_tracked(&poster, 5..8, &drops);
    let mut consumer = up.teardown();
    assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3, 4]);
    assert_eq!(drops.load(SeqCst), 5);
    assert_eq!(*consumer.try_dequeue().unwrap().id, 5);
    drop(consumer);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 8);
}

#[test]
fn an_fnmut_handler_owns_what_it_is_given_and_replacing_it_inside_its_call_frees_it_once() {
    // The handler's `&mut` state lives in a cell inside the EVD: it keeps
    // the values it is given, and replaces itself from inside its own call;
    // the old handler (and the values it kept) is freed once, after the call.
    let drops = Arc::new(AtomicUsize::new(0));
    let (poster, consumer) = evd::bounded::<Tracked>(4).unwrap();
    let slot: Arc<Mutex<Option<evd::Upcalls<Tracked>>>> = Arc::default();
    let (s, d) = (slot.clone(), drops.clone());
    let mut kept = Vec::new();
    let up = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| {
        kept.push(ev.unwrap());
        if kept.len() == 3 {
            let ids: Vec<u32> = kept.iter().map(|t| *t.id).collect();
            assert_eq!(ids, [0, 1, 2]);
            let mut later = Vec::new();
            let replaced = s
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .set_handler_mut(move |ev, _| {
                    later.push(ev.unwrap());
                });
            assert!(replaced.is_ok());
            assert_eq!(d.load(SeqCst), 0, "still running: nothing freed yet");
        }
    });
    *slot.lock().unwrap() = Some(up);
    post_tracked(&poster, 0..3, &drops);
    assert_eq!(
        drops.load(SeqCst),
        3,
        "the first handler and its three values"
    );
    post_tracked(&poster, 3..5, &drops);
    let up = slot.lock().unwrap().take().unwrap();
    let consumer = up.teardown();
    assert_eq!(drops.load(SeqCst), 5, "the second handler and its two");
    drop(consumer);
    drop(poster);
    assert_eq!(drops.load(SeqCst), 5);
}
