//! Resize: both handles see the new capacity, posters running through a
//! resize lose nothing and keep FIFO, and a resize that cannot allocate leaves
//! the EVD as it was.

mod common;
use common::{next_of_its_poster, spawn_tagged_posters};
use evd::{ResizeError, TryDequeueError};

#[test]
fn capacity_follows_resize_on_both_handles() {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    consumer.resize(32).unwrap();
    assert_eq!((poster.capacity(), consumer.capacity()), (32, 32));
}

#[test]
fn resize_while_posters_run_keeps_fifo_and_loses_nothing() {
    const N: u64 = 50_000;
    let (poster, consumer) = evd::bounded::<u64>(4).unwrap();
    let producers = spawn_tagged_posters(&poster, 2, N);
    drop(poster);
    drain_while_resizing(consumer, producers, N);
}

#[test]
fn resize_while_posters_wait_for_room_keeps_fifo_and_loses_nothing() {
    // Posts that wait for room are refused by a resize and wait for its end
    // in the room queue: every one still gets in, once, in order.
    const N: u64 = 20_000;
    let (poster, consumer) = evd::bounded::<u64>(4).unwrap();
    let producers = (0..2u64)
        .map(|p| {
            let poster = poster.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    let ev = (p << 32) | i;
                    let r = match i % 3 {
                        0 => poster.post_blocking(ev),
                        1 => futures::executor::block_on(poster.post_async(ev)),
                        _ => post_timeout_retry(&poster, ev),
                    };
                    assert_eq!(r, Ok(()));
                }
            })
        })
        .collect();
    drop(poster);
    drain_while_resizing(consumer, producers, N);
}

/// `post_timeout` with a short timeout, retried while it hands the event
/// back as full.
fn post_timeout_retry(poster: &evd::Poster<u64>, mut ev: u64) -> Result<(), evd::PostError<u64>> {
    loop {
        match poster.post_timeout(ev, std::time::Duration::from_micros(50)) {
            Err(evd::PostError::Full(back)) => ev = back,
            done => return done,
        }
    }
}

/// Take every event of the two tagged posters (`per` each), checking each
/// poster's order, and resize the ring every 997 events through a cycle of
/// capacities; at least the resizes to the largest must be done.
fn drain_while_resizing(
    mut consumer: evd::Consumer<u64>,
    producers: Vec<std::thread::JoinHandle<()>>,
    per: u64,
) {
    let mut next = [0u64; 2];
    let mut caps = [4usize, 64, 8, 1024, 16, 2].into_iter().cycle();
    let (mut n, mut resized) = (0u64, 0u64);
    loop {
        match consumer.try_dequeue() {
            Ok(v) => {
                next_of_its_poster(&mut next, v);
                n += 1;
                if n % 997 == 0 {
                    let cap = caps.next().unwrap();
                    match consumer.resize(cap) {
                        Ok(c) => {
                            assert_eq!((c, consumer.capacity()), (cap, cap));
                            resized += 1;
                        }
                        Err(ResizeError::TooSmall { queued, capacity }) => {
                            assert!(queued > capacity && capacity == cap);
                        }
                        Err(e) => panic!("resize({cap}): {e:?}"),
                    }
                }
            }
            Err(TryDequeueError::Empty) => {}
            Err(TryDequeueError::Overflow(o)) => panic!("no post is lossy: {o:?}"),
            Err(TryDequeueError::Closed) => break,
        }
    }
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(next, [per, per]);
    // Every sixth resize asks for 1024, the most the ring ever holds, and
    // cannot be refused as too small.
    assert!(resized >= n / 997 / 6, "{resized} resizes of {}", n / 997);
}

#[test]
fn allocation_failure_in_resize_leaves_the_evd_unchanged() {
    type Chunk = [u8; 1 << 16];
    let (poster, mut consumer) = evd::bounded::<Chunk>(2).unwrap();
    // 2^32 slots of 64 KiB: 256 TiB, beyond the x86-64 user address space.
    assert_eq!(
        consumer.resize(evd::MAX_CAPACITY),
        Err(ResizeError::AllocFailed {
            capacity: evd::MAX_CAPACITY
        })
    );
    let q = consumer.query();
    assert_eq!((q.capacity, q.len, q.closed), (2, 0, false));
    // Still usable: a resize that fits succeeds, posters still see it open.
    assert_eq!(consumer.resize(4), Ok(4));
    assert!(!poster.is_closed());
}
