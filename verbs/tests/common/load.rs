//! Completions under load: producers bounded by credits, a seeded RNG
//! choosing where they go, and a consumer draining them under a watchdog.

use evd::TryDequeueError;
use evd_verbs::{CqId, VerbsEvent, WorkCompletion};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A small xorshift: a reproducible stream from its seed.
pub struct Xorshift(u64);

impl Xorshift {
    /// The stream of `seed` (any value but zero).
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift never leaves zero");
        Xorshift(seed)
    }

    /// The stream of producer `p`: a different one for each.
    pub fn for_producer(p: u64) -> Self {
        Self::new(0x9e37_79b9_7f4a_7c15u64 ^ (p + 1).wrapping_mul(0x1234_5678_9abc))
    }

    pub fn next(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// At most `limit` completions outstanding (produced, not yet consumed),
/// as an application sizes its CQ: producers take a credit per
/// completion, the consumer gives them back.
pub struct Credits {
    outstanding: AtomicU64,
    limit: u64,
}

impl Credits {
    pub fn new(limit: u64) -> Self {
        Credits {
            outstanding: AtomicU64::new(0),
            limit,
        }
    }

    /// Take a credit, yielding (not sleeping) while none is free; `false`
    /// if `abort` is set meanwhile.
    pub fn take(&self, abort: Option<&AtomicBool>) -> bool {
        loop {
            let o = self.outstanding.load(Ordering::Acquire);
            if o < self.limit
                && self
                    .outstanding
                    .compare_exchange(o, o + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return true;
            }
            if abort.is_some_and(|a| a.load(Ordering::Relaxed)) {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Count `n` completions produced outside the limit.
    pub fn add(&self, n: u64) {
        self.outstanding.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` completions consumed.
    pub fn give_back(&self, n: u64) {
        self.outstanding.fetch_sub(n, Ordering::AcqRel);
    }
}

/// `producers` threads, each making `per_producer` completions with what
/// `producer(p)` returns, called with each sequence number in turn after
/// taking a credit for it; a producer stops early if `abort` is set while
/// it waits for a credit.
pub fn spawn_producers<F>(
    producers: u64,
    per_producer: u64,
    credits: &Arc<Credits>,
    abort: Option<&Arc<AtomicBool>>,
    producer: impl Fn(u64) -> F,
) -> Vec<JoinHandle<()>>
where
    F: FnMut(u64) + Send + 'static,
{
    (0..producers)
        .map(|p| {
            let (credits, abort) = (credits.clone(), abort.cloned());
            let mut produce = producer(p);
            std::thread::spawn(move || {
                for seq in 0..per_producer {
                    if !credits.take(abort.as_deref()) {
                        return;
                    }
                    produce(seq);
                }
            })
        })
        .collect()
}

/// `producers` threads, each pushing its numbered completions (`p << 32 |
/// seq`, `seq` below `per_producer`) into every CQ of `hcas` (each CQ holds
/// them all, so it never overruns), and yielding its CPU every
/// `yield_every` completions; returns once all have pushed.
pub fn produce_into(
    hcas: &[evd_verbs::soft::SoftCqProducer],
    producers: u64,
    per_producer: u64,
    yield_every: u64,
) {
    std::thread::scope(|s| {
        for p in 0..producers {
            s.spawn(move || {
                for seq in 0..per_producer {
                    for hca in hcas {
                        hca.push(super::wc((p << 32) | seq))
                            .expect("the CQ holds every event");
                    }
                    if seq % yield_every == 0 {
                        // Load shaping, not synchronization: lets the feeds
                        // drain, arm and sleep now and then.
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
}

/// Fails a wait in which nothing happened for `limit`: a stranded
/// completion or a hang becomes a failure instead of a stuck test.
pub struct Watchdog {
    last: Instant,
    limit: Duration,
}

impl Watchdog {
    pub fn new(limit: Duration) -> Self {
        Watchdog {
            last: Instant::now(),
            limit,
        }
    }

    /// Something happened: the wait starts again.
    pub fn progress(&mut self) {
        self.last = Instant::now();
    }

    /// Whether nothing happened for the limit.
    pub fn expired(&self) -> bool {
        self.last.elapsed() > self.limit
    }
}

/// What an overflow report means to [`drain_completions`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// A failure: nothing may be refused.
    Fails,
    /// Not a loss: a feed's held post was refused once and is retried.
    Tolerated,
}

/// Dequeue `n` completions in batches of up to 64, handing each to `each`
/// and giving its credit back; while the EVD is empty, wait on it (100 ms
/// at a time). Panics with `stalled(got)` when nothing comes for
/// `watchdog`.
pub fn drain_completions(
    consumer: &mut evd::Consumer<VerbsEvent>,
    n: u64,
    credits: &Credits,
    watchdog: Duration,
    overflow: Overflow,
    mut each: impl FnMut(CqId, &WorkCompletion),
    stalled: impl Fn(u64) -> String,
) {
    let mut got = 0;
    let mut dog = Watchdog::new(watchdog);
    let mut batch = Vec::with_capacity(64);
    while got < n {
        batch.clear();
        match consumer.dequeue_batch(&mut batch, 64) {
            Ok(0) => {
                assert!(!dog.expired(), "watchdog: {}", stalled(got));
                let _ = consumer.wait(1, Some(Duration::from_millis(100)));
            }
            Ok(k) => {
                dog.progress();
                for ev in &batch {
                    let VerbsEvent::Completion { cq, wc } = ev else {
                        panic!("unexpected {ev:?}");
                    };
                    each(*cq, wc);
                }
                got += k as u64;
                credits.give_back(k as u64);
            }
            Err(TryDequeueError::Overflow(_)) if overflow == Overflow::Tolerated => {}
            Err(TryDequeueError::Overflow(_)) => panic!("the EVD overflowed: over-commit"),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}
