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
    let (poster, mut consumer) = evd::bounded::<u64>(4).unwrap();
    let producers = spawn_tagged_posters(&poster, 2, N);
    drop(poster);
    let mut next = [0u64; 2];
    let mut caps = [4usize, 64, 8, 1024, 16, 2].into_iter().cycle();
    let mut n = 0u64;
    loop {
        match consumer.try_dequeue() {
            Ok(v) => {
                next_of_its_poster(&mut next, v);
                n += 1;
                if n % 997 == 0 {
                    let _ = consumer.resize(caps.next().unwrap());
                }
            }
            Err(TryDequeueError::Overflow(_) | TryDequeueError::Empty) => {}
            Err(TryDequeueError::Closed) => break,
        }
    }
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(next, [N, N]);
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
