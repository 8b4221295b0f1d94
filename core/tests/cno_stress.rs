//! CNO stress: 1, 16, 256 and 1024 EVDs bound to one [`Cno`], several
//! poster threads posting `(poster, EVD, seq)` events to EVDs picked by a
//! seeded PRNG (one at a time with `post` retried on a full ring, with
//! `post_blocking`, or in small `post_batch`es), and one CNO thread (the
//! test's own) that blocks in `Cno::wait`, drains each EVD whose key it got
//! (`try_dequeue` until `Empty`) and re-enables it (`Pending`: drain again).
//! The rings are small (4 slots), so posters find them full all the time.
//!
//! Checks, in every interleaving:
//! * every event arrives exactly once, on the EVD it was posted to, in order
//!   per (poster, EVD);
//! * a key comes only for an enabled EVD, at most once per enable: the CNO
//!   thread sets an EVD's `enabled` flag when `enable_cno` says `Armed` and
//!   clears it when the key comes back; a key for an EVD not enabled fails;
//! * a key always comes with work: this thread is the EVDs' only consumer,
//!   so the EVD of a returned key has at least one event (the post that
//!   took the enable published it first) or is closed;
//! * no wakeup is lost: the CNO thread only ever blocks in `Cno::wait`, and
//!   a watchdog fails the process if nothing is delivered for 60 s;
//! * the EVDs' counters add up, and the CNO is empty and unbound at the end.
//!
//! Two more runs churn what the first keeps fixed:
//! `stress_unbind_rebind_and_move_while_the_waiter_takes_keys` (bindings
//! come and go, and places are reused, while the waiter is another thread)
//! and `stress_dropping_the_cno_while_posts_run_loses_no_event`.
//!
//! Size: `EVD_CNO_STRESS_EVENTS` events per poster per test (default 40 000),
//! `EVD_CNO_STRESS_POSTERS` posters (default 3); `EVD_CNO_STRESS_SEED` to
//! replay a run (each test prints its seed).

mod common;
use common::{Rng, STALL_LIMIT, Watchdog, env_u64};
use evd::{ArmStatus, BatchPostError, Cno, Consumer, PostError, Poster, TryDequeueError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Duration;
/// Slots per EVD: small, so that full rings and backpressure are common.
const EVD_CAPACITY: usize = 4;
/// Event layout: poster (8 bits) | EVD index (16 bits) | sequence (40 bits).
const POSTER_SHIFT: u32 = 56;
const EVD_SHIFT: u32 = 40;
const SEQ_MASK: u64 = (1 << EVD_SHIFT) - 1;
/// Keys are not the EVD indices (nor the CNO's slot numbers).
const KEY_BASE: u64 = 1_000_000;

/// What the watchdog prints if delivery stalls.
struct Progress {
    delivered: AtomicU64,
    keys: AtomicU64,
    waits: AtomicU64,
    closed: AtomicU64,
    enabled: AtomicU64,
    posted: Vec<AtomicU64>,
}
impl Progress {
    fn new(posters: u64) -> Arc<Self> {
        Arc::new(Progress {
            delivered: AtomicU64::new(0),
            keys: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            enabled: AtomicU64::new(0),
            posted: (0..posters).map(|_| AtomicU64::new(0)).collect(),
        })
    }
}

/// Fails the process (instead of hanging the test) if neither an event nor
/// a key is delivered for the stall limit: that is how a lost wakeup shows.
/// Stops when dropped.
fn watchdog(what: String, progress: Arc<Progress>, per_poster: u64) -> Watchdog {
    let at = progress.clone();
    Watchdog::watching(
        what,
        STALL_LIMIT,
        move || at.delivered.load(Relaxed) + at.keys.load(Relaxed),
        move || {
            let posted: Vec<u64> = progress.posted.iter().map(|a| a.load(Relaxed)).collect();
            format!(
                "{} events delivered, {} keys in {} waits, {} EVDs ended, {} enabled; \
                 posted per poster {posted:?} of {per_poster}",
                progress.delivered.load(Relaxed),
                progress.keys.load(Relaxed),
                progress.waits.load(Relaxed),
                progress.closed.load(Relaxed),
                progress.enabled.load(Relaxed),
            )
        },
    )
}

/// The run's size and seed from the environment: events per poster,
/// posters, and the seed (`default_seed` when `EVD_CNO_STRESS_SEED` is unset).
fn sizes(default_seed: u64) -> (u64, u64, u64) {
    let per_poster = env_u64("EVD_CNO_STRESS_EVENTS", 40_000).clamp(1, SEQ_MASK);
    let posters_n = env_u64("EVD_CNO_STRESS_POSTERS", 3).clamp(1, 255);
    let seed = env_u64("EVD_CNO_STRESS_SEED", default_seed) | 1;
    (per_poster, posters_n, seed)
}

/// `n` EVDs of [`EVD_CAPACITY`] slots.
fn small_evds(n: usize) -> (Vec<Poster<u64>>, Vec<Consumer<u64>>) {
    (0..n).map(|_| evd::bounded(EVD_CAPACITY).unwrap()).unzip()
}

/// One [`poster_thread`] per entry of `progress.posted`, each with a clone
/// of every poster; the posters given are dropped, so that the EVDs close
/// when the threads end.
fn spawn_posters(
    posters: Vec<Poster<u64>>,
    per_poster: u64,
    seed: u64,
    progress: &Arc<Progress>,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..progress.posted.len() as u64)
        .map(|p| {
            let (posters, progress) = (posters.clone(), progress.clone());
            std::thread::spawn(move || poster_thread(p, posters, per_poster, seed, progress))
        })
        .collect()
}

/// One poster thread: `per_poster` events to EVDs picked at random, then
/// it drops its posters (the last one to go closes each EVD). Returns how
/// many events it posted to each EVD.
fn poster_thread(
    p: u64,
    posters: Vec<Poster<u64>>,
    per_poster: u64,
    seed: u64,
    progress: Arc<Progress>,
) -> Vec<u64> {
    let evds = posters.len() as u64;
    let mut rng = Rng((seed ^ (p + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
    let mut counts = vec![0u64; posters.len()];
    let mut batch = Vec::with_capacity(4);
    let mut seq = 0u64;
    while seq < per_poster {
        // Leave the CNO thread some CPU on a loaded 2-core machine.
        if seq % 128 == 127 {
            std::thread::yield_now();
        }
        let e = rng.below(evds);
        let ev = |q: u64| p << POSTER_SHIFT | e << EVD_SHIFT | q;
        let poster = &posters[e as usize];
        let n = match rng.below(4) {
            0 => {
                // Wait for room: the CNO thread frees it when it drains.
                poster
                    .post_blocking(ev(seq))
                    .expect("closed under a live poster");
                1
            }
            1 => {
                let n = (1 + rng.below(4)).min(per_poster - seq);
                batch.extend((seq..seq + n).map(ev));
                while !batch.is_empty() {
                    match poster.post_batch(&mut batch) {
                        Ok(_) => {}
                        Err(BatchPostError::Full) => std::thread::yield_now(),
                        Err(BatchPostError::Closed) => panic!("closed under a live poster"),
                    }
                }
                n
            }
            _ => {
                let mut v = ev(seq);
                loop {
                    match poster.post(v) {
                        Ok(()) => break,
                        Err(PostError::Full(back)) => {
                            v = back;
                            std::thread::yield_now();
                        }
                        Err(PostError::Closed(_)) => panic!("closed under a live poster"),
                    }
                }
                1
            }
        };
        counts[e as usize] += n;
        seq += n;
        progress.posted[p as usize].store(seq, Relaxed);
    }
    counts
}

/// The CNO thread's bookkeeping.
struct Server {
    consumers: Vec<Consumer<u64>>,
    /// Enabled (`Armed`) and its key not yet returned.
    enabled: Vec<bool>,
    /// Closed and drained: never enabled again.
    done: Vec<bool>,
    /// Next acceptable sequence number per (EVD, poster): FIFO.
    next: Vec<Vec<u64>>,
    /// Events received per (EVD, poster).
    got: Vec<Vec<u64>>,
    /// One bit per (poster, seq): exactly once.
    seen: Vec<Vec<u64>>,
    posters: u64,
    per_poster: u64,
    closed: usize,
    enabled_now: u64,
    progress: Arc<Progress>,
}

impl Server {
    /// Serves `consumers` (none enabled yet) for `progress.posted.len()`
    /// posters of `per_poster` events each.
    fn new(consumers: Vec<Consumer<u64>>, per_poster: u64, progress: &Arc<Progress>) -> Self {
        let (evds, posters) = (consumers.len(), progress.posted.len());
        Server {
            consumers,
            enabled: vec![false; evds],
            done: vec![false; evds],
            next: vec![vec![0; posters]; evds],
            got: vec![vec![0; posters]; evds],
            seen: vec![vec![0; per_poster.div_ceil(64) as usize]; posters],
            posters: posters as u64,
            per_poster,
            closed: 0,
            enabled_now: 0,
            progress: progress.clone(),
        }
    }

    fn record(&mut self, i: usize, ev: u64) {
        let (p, e, seq) = (
            ev >> POSTER_SHIFT,
            (ev >> EVD_SHIFT) & 0xffff,
            ev & SEQ_MASK,
        );
        assert!(
            p < self.posters && seq < self.per_poster,
            "garbage event {ev:#x}"
        );
        assert_eq!(
            e as usize, i,
            "event {ev:#x} posted to EVD {e}, dequeued from EVD {i}"
        );
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        let w = &mut self.seen[p as usize][word];
        assert_eq!(*w & bit, 0, "event {p}/{seq} delivered twice");
        *w |= bit;
        let next = &mut self.next[i][p as usize];
        assert!(
            seq >= *next,
            "EVD {i}, poster {p}: seq {seq} after {} (FIFO broken)",
            *next - 1
        );
        *next = seq + 1;
        self.got[i][p as usize] += 1;
        self.progress.delivered.fetch_add(1, Relaxed);
    }

    /// Drain EVD `i`: how many events, and whether it ended (closed and
    /// drained: then it is done).
    fn drain(&mut self, i: usize) -> (u64, bool) {
        let mut n = 0;
        loop {
            match self.consumers[i].try_dequeue() {
                Ok(ev) => {
                    self.record(i, ev);
                    n += 1;
                }
                Err(TryDequeueError::Empty) => return (n, false),
                Err(TryDequeueError::Closed) => {
                    self.finish(i);
                    return (n, true);
                }
                Err(TryDequeueError::Overflow(o)) => panic!("EVD {i}: loss report {o:?}"),
            }
        }
    }

    fn finish(&mut self, i: usize) {
        assert!(!self.done[i], "EVD {i} ended twice");
        self.done[i] = true;
        self.closed += 1;
        self.progress.closed.store(self.closed as u64, Relaxed);
    }

    /// Enable EVD `i` again; on `Pending` drain and retry.
    fn enable(&mut self, i: usize) {
        assert!(!self.enabled[i] && !self.done[i]);
        loop {
            match self.consumers[i].enable_cno() {
                Ok(ArmStatus::Armed) => {
                    self.enabled[i] = true;
                    self.enabled_now += 1;
                    self.progress.enabled.store(self.enabled_now, Relaxed);
                    return;
                }
                Ok(ArmStatus::Pending) => {
                    let (n, ended) = self.drain(i);
                    if ended {
                        return;
                    }
                    if n == 0 {
                        // A poster reserved the head slot and is still
                        // writing it: let it run.
                        std::thread::yield_now();
                    }
                }
                Ok(ArmStatus::Closed) => return self.finish(i),
                Err(e) => panic!("EVD {i}: enable_cno: {e}"),
            }
        }
    }

    /// The CNO returned key `k`.
    fn serve(&mut self, k: u64) {
        let i = k
            .checked_sub(KEY_BASE)
            .filter(|&i| i < self.consumers.len() as u64)
            .unwrap_or_else(|| panic!("unknown key {k}")) as usize;
        assert!(
            self.enabled[i],
            "key {k} returned while EVD {i} was not enabled (twice for one enable, or after its end; done: {})",
            self.done[i]
        );
        self.enabled[i] = false;
        self.enabled_now -= 1;
        self.progress.keys.fetch_add(1, Relaxed);
        let (n, ended) = self.drain(i);
        assert!(
            n > 0 || ended,
            "key {k}: EVD {i} had no event and was not closed (its only consumer is this thread)"
        );
        if !ended {
            self.enable(i);
        }
    }
}

/// `spin`: the CNO's spin budget (zero: every wait that finds nothing parks).
fn stress(evds: usize, spin: Duration) {
    let (per_poster, posters_n, seed) =
        sizes(0x5eed ^ (u64::from(std::process::id()) << 16) ^ evds as u64);
    println!(
        "{evds} EVDs: EVD_CNO_STRESS_SEED={seed} EVD_CNO_STRESS_EVENTS={per_poster} \
         EVD_CNO_STRESS_POSTERS={posters_n}; spin budget {spin:?}"
    );
    assert!(evds <= 0xffff);
    let mut cno = Cno::new(evds).unwrap();
    cno.set_spin_budget(spin);
    let (posters, consumers) = small_evds(evds);
    let progress = Progress::new(posters_n);

    // The posters start before the EVDs are bound: binding and enabling
    // work while posts run.
    let threads = spawn_posters(posters, per_poster, seed, &progress);

    let _watchdog = watchdog(
        format!("{evds} EVDs, seed {seed}"),
        progress.clone(),
        per_poster,
    );
    let mut s = Server::new(consumers, per_poster, &progress);
    for (i, c) in s.consumers.iter_mut().enumerate() {
        c.bind_cno(&cno, KEY_BASE + i as u64).unwrap();
    }
    assert_eq!(cno.bound(), evds);
    for i in 0..evds {
        s.enable(i);
    }
    let mut keys = Vec::with_capacity(evds);
    let (mut waits, mut most) = (0u64, 0usize);
    while s.closed < evds {
        keys.clear();
        let n = cno.wait(&mut keys);
        assert!(n >= 1 && n == keys.len(), "wait returned {n} for {keys:?}");
        waits += 1;
        most = most.max(n);
        progress.waits.store(waits, Relaxed);
        for &k in &keys {
            s.serve(k);
        }
    }
    let counts: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let total = posters_n * per_poster;
    assert_eq!(progress.delivered.load(Relaxed), total, "events lost");
    for (p, per_evd) in counts.iter().enumerate() {
        assert_eq!(per_evd.iter().sum::<u64>(), per_poster);
        for (i, &n) in per_evd.iter().enumerate() {
            assert_eq!(s.got[i][p], n, "EVD {i}, poster {p}: events");
        }
        let full_words = (per_poster / 64) as usize;
        assert!(s.seen[p][..full_words].iter().all(|&w| w == u64::MAX));
        if per_poster % 64 != 0 {
            assert_eq!(s.seen[p][full_words], (1u64 << (per_poster % 64)) - 1);
        }
    }
    assert!(s.done.iter().all(|&d| d) && s.enabled.iter().all(|&e| !e));
    for (i, c) in s.consumers.iter().enumerate() {
        let q = c.query();
        let posted: u64 = counts.iter().map(|per_evd| per_evd[i]).sum();
        assert_eq!(
            (q.posted, q.dequeued, q.len),
            (posted, posted, 0),
            "EVD {i}"
        );
        assert_eq!(q.lost, 0, "EVD {i}: a refused post is not a loss");
        assert!(q.closed);
    }
    assert_eq!(cno.try_next(), None, "no key after every EVD ended");
    drop(s);
    assert_eq!(cno.bound(), 0, "dropped consumers leave the CNO");
    let keys_total = progress.keys.load(Relaxed);
    println!(
        "{evds} EVDs: {total} events, {keys_total} keys in {waits} waits (at most {most} keys at once)"
    );
}

#[test]
fn stress_one_evd_on_a_cno() {
    stress(1, Duration::ZERO);
}

#[test]
fn stress_16_evds_on_a_cno() {
    stress(16, evd::DEFAULT_SPIN_BUDGET);
}

#[test]
fn stress_256_evds_on_a_cno() {
    stress(256, Duration::ZERO);
}

#[test]
fn stress_1024_evds_on_a_cno() {
    stress(1024, evd::DEFAULT_SPIN_BUDGET);
}

/// Key of generation `g` of EVD `i` in the churn test.
fn churn_key(i: usize, g: u64) -> u64 {
    (g << 16) | i as u64
}

/// Bindings come and go while posts run and the CNO's waiter (a thread of
/// its own) takes keys: the serving thread, which owns the EVDs, unbinds
/// and rebinds them (each rebind takes the place just freed, the CNO has no
/// other) and moves them with `modify_cno` to a new key on the same CNO
/// (one spare place). Every binding has its own key, `(generation, EVD)`.
///
/// The waiter snapshots, before each wait, the last generation of each EVD
/// whose unbind or move had returned; a key of that generation or older
/// taken after the snapshot is a key handed out after its removal, and
/// fails. The serving thread accepts a key of an older generation only from
/// before an unbind (taken before it, so legal); any other key must stand
/// for an outstanding enable (or a move of one) and comes at most once.
/// Every event arrives exactly once, in order per (poster, EVD); a lost key
/// hangs the serving thread and the watchdog fails the test.
#[test]
fn stress_unbind_rebind_and_move_while_the_waiter_takes_keys() {
    const EVDS: usize = 16;
    const STOP: u64 = u64::MAX;
    let (per_poster, posters_n, seed) = sizes(0xc4a2 ^ u64::from(std::process::id()));
    println!(
        "churn: EVD_CNO_STRESS_SEED={seed} EVD_CNO_STRESS_EVENTS={per_poster} \
         EVD_CNO_STRESS_POSTERS={posters_n}"
    );
    // One place per EVD, one for the stop EVD, one spare for moves.
    let mut cno = Cno::new(EVDS + 2).unwrap();
    let h = cno.handle();
    let (stop_poster, mut stop) = evd::bounded::<u8>(1).unwrap();
    stop.bind_cno(&cno, STOP).unwrap();
    assert_eq!(stop.enable_cno(), Ok(ArmStatus::Armed));
    let (posters, mut consumers) = small_evds(EVDS);
    for (i, c) in consumers.iter_mut().enumerate() {
        c.bind_cno(&h, churn_key(i, 0)).unwrap();
    }
    let progress = Progress::new(posters_n);
    let threads = spawn_posters(posters, per_poster, seed, &progress);
    // Per EVD: the last generation whose unbind or move has returned, plus
    // one (0: none yet).
    let retired: Arc<Vec<AtomicU64>> = Arc::new((0..EVDS).map(|_| AtomicU64::new(0)).collect());
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let waiter = {
        let (retired, progress) = (retired.clone(), progress.clone());
        std::thread::spawn(move || {
            let mut keys = Vec::new();
            let mut snapshot = [0u64; EVDS];
            loop {
                for (s, r) in snapshot.iter_mut().zip(retired.iter()) {
                    *s = r.load(Acquire);
                }
                keys.clear();
                cno.wait(&mut keys);
                progress.waits.fetch_add(1, Relaxed);
                for &k in &keys {
                    if k == STOP {
                        return;
                    }
                    let (i, g) = ((k & 0xffff) as usize, k >> 16);
                    assert!(i < EVDS, "unknown key {k:#x}");
                    assert!(
                        g >= snapshot[i],
                        "key {k:#x} (EVD {i}, generation {g}) taken after its binding was \
                         unbound or moved (generation {} retired before this wait)",
                        snapshot[i] - 1
                    );
                    tx.send(k).unwrap();
                }
            }
        })
    };

    let _watchdog = watchdog(format!("churn, seed {seed}"), progress.clone(), per_poster);
    let mut s = Server::new(consumers, per_poster, &progress);
    // Per EVD: its binding's generation; the first generation since its
    // last unbind (a move keeps the outstanding enable, an unbind drops it);
    // the generation its outstanding enable was made in.
    let mut generation = [0u64; EVDS];
    let mut epoch = [0u64; EVDS];
    let mut enable_gen = [0u64; EVDS];
    let mut rng = Rng(seed);
    let (mut unbinds, mut moves, mut old_keys) = (0u64, 0u64, 0u64);
    let enable =
        |s: &mut Server, i: usize, generation: &[u64; EVDS], enable_gen: &mut [u64; EVDS]| {
            s.enable(i);
            if s.enabled[i] {
                enable_gen[i] = generation[i];
            }
        };
    for i in 0..EVDS {
        enable(&mut s, i, &generation, &mut enable_gen);
    }
    // Unbind and rebind EVD `i` (dropping its outstanding enable), or move
    // it to a new key (keeping it).
    let mut churn = |s: &mut Server,
                     i: usize,
                     rng: &mut Rng,
                     generation: &mut [u64; EVDS],
                     epoch: &mut [u64; EVDS]|
     -> bool {
        match rng.below(2) {
            0 => {
                assert_eq!(
                    s.consumers[i].unbind_cno(),
                    Some(churn_key(i, generation[i]))
                );
                retired[i].store(generation[i] + 1, Release);
                if s.enabled[i] {
                    s.enabled[i] = false;
                    s.enabled_now -= 1;
                }
                generation[i] += 1;
                epoch[i] = generation[i];
                s.consumers[i]
                    .bind_cno(&h, churn_key(i, generation[i]))
                    .unwrap();
                unbinds += 1;
                true // needs a new enable
            }
            _ => {
                s.consumers[i]
                    .modify_cno(&h, churn_key(i, generation[i] + 1))
                    .unwrap();
                retired[i].store(generation[i] + 1, Release);
                generation[i] += 1;
                moves += 1;
                false
            }
        }
    };
    while s.closed < EVDS {
        let Ok(k) = rx.recv() else {
            // The waiter failed a check: report its panic.
            let e = waiter
                .join()
                .expect_err("the waiter ended without the stop key");
            std::panic::resume_unwind(e);
        };
        let (i, g) = ((k & 0xffff) as usize, k >> 16);
        if g < epoch[i] {
            // From before an unbind, taken before it (the waiter checked).
            old_keys += 1;
            continue;
        }
        assert!(
            s.enabled[i] && g >= enable_gen[i] && g <= generation[i],
            "key {k:#x} (EVD {i}, generation {g}) without an outstanding enable \
             (enabled {}, enable made in generation {}, now {}, done {})",
            s.enabled[i],
            enable_gen[i],
            generation[i],
            s.done[i]
        );
        s.enabled[i] = false;
        s.enabled_now -= 1;
        s.progress.keys.fetch_add(1, Relaxed);
        let (n, ended) = s.drain(i);
        assert!(
            n > 0 || ended,
            "key {k:#x}: EVD {i} had no event and was not closed"
        );
        if ended {
            continue;
        }
        if rng.below(8) == 0 {
            churn(&mut s, i, &mut rng, &mut generation, &mut epoch);
        }
        enable(&mut s, i, &generation, &mut enable_gen);
        // Now and then churn another EVD, enabled or not.
        if rng.below(4) == 0 {
            let j = rng.below(EVDS as u64) as usize;
            if !s.done[j] && churn(&mut s, j, &mut rng, &mut generation, &mut epoch) {
                enable(&mut s, j, &generation, &mut enable_gen);
            }
        }
    }
    stop_poster.post(0).unwrap();
    waiter.join().unwrap();
    let counts: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total = posters_n * per_poster;
    assert_eq!(progress.delivered.load(Relaxed), total, "events lost");
    for (p, per_evd) in counts.iter().enumerate() {
        for (i, &n) in per_evd.iter().enumerate() {
            assert_eq!(s.got[i][p], n, "EVD {i}, poster {p}: events");
        }
    }
    // Keys still queued in the channel were taken before the end: each
    // must be from before an unbind, or stand for an EVD's last enable.
    for k in rx.try_iter() {
        let (i, g) = ((k & 0xffff) as usize, k >> 16);
        assert!(
            g < epoch[i] || s.enabled[i],
            "a late key {k:#x} without an enable"
        );
    }
    println!(
        "churn: {total} events, {} keys, {unbinds} unbinds, {moves} moves, {old_keys} keys \
         taken before their unbind",
        progress.keys.load(Relaxed)
    );
}

/// The `Cno` is dropped while posters run and triggers are in flight: its
/// EVDs' enables then fail with `CnoDropped`, posts go on, and every event
/// is still dequeued once, in order per (poster, EVD), by the EVDs' own
/// consumer (polling them in turn: a blocking wait on one could wait for a
/// poster stuck on another's full ring).
#[test]
fn stress_dropping_the_cno_while_posts_run_loses_no_event() {
    const EVDS: usize = 16;
    let (per_poster, posters_n, seed) = sizes(0xd209 ^ u64::from(std::process::id()));
    println!("cno drop: EVD_CNO_STRESS_SEED={seed} EVD_CNO_STRESS_EVENTS={per_poster}");
    let mut cno = Cno::new(EVDS).unwrap();
    let h = cno.handle();
    let (posters, consumers) = small_evds(EVDS);
    let progress = Progress::new(posters_n);
    let threads = spawn_posters(posters, per_poster, seed, &progress);
    let _watchdog = watchdog(
        format!("cno drop, seed {seed}"),
        progress.clone(),
        per_poster,
    );
    let mut s = Server::new(consumers, per_poster, &progress);
    for (i, c) in s.consumers.iter_mut().enumerate() {
        c.bind_cno(&cno, KEY_BASE + i as u64).unwrap();
    }
    for i in 0..EVDS {
        s.enable(i);
    }
    // Serve through the CNO for a while (a third of the events), then drop
    // it with every EVD still enabled or with its key queued.
    let mut keys = Vec::new();
    while s.closed < EVDS && progress.delivered.load(Relaxed) < posters_n * per_poster / 3 {
        keys.clear();
        cno.wait(&mut keys);
        for &k in &keys {
            s.serve(k);
        }
    }
    drop(cno);
    assert!(h.is_dropped());
    for i in 0..EVDS {
        if !s.done[i] {
            assert_eq!(s.consumers[i].enable_cno(), Err(evd::CnoError::CnoDropped));
        }
    }
    while s.closed < EVDS {
        let mut any = false;
        for i in 0..EVDS {
            if !s.done[i] {
                any |= s.drain(i).0 > 0;
            }
        }
        if !any {
            std::thread::yield_now();
        }
    }
    let counts: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        progress.delivered.load(Relaxed),
        posters_n * per_poster,
        "events lost"
    );
    for (p, per_evd) in counts.iter().enumerate() {
        for (i, &n) in per_evd.iter().enumerate() {
            assert_eq!(s.got[i][p], n, "EVD {i}, poster {p}: events");
        }
    }
    drop(s);
    assert_eq!(h.bound(), 0);
}
