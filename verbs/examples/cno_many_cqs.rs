//! One thread serves many completion queues through one CNO.
//!
//! `cargo run --release -p evd-verbs --example cno_many_cqs [-- CQS PER_CQ]`
//!
//! Each software CQ (the crate's test double of an `ibv_cq` with a completion
//! channel) has its own EVD, fed by one driver thread (io_uring, or epoll where
//! it is refused) in event mode. Every EVD is bound to one `evd::Cno` with its
//! CQ's number as the key. The main thread is the consumer of all of them: it
//! waits on the CNO, drains the EVDs whose keys come back, and re-enables each
//! (an enable that says `Pending` means more came: drain again). A producer
//! thread plays the HCA, completing work requests on random CQs. The example
//! checks that every completion arrives exactly once and in order per CQ, and
//! that a key never comes back for an EVD that was not enabled.

use evd::{ArmStatus, Cno, TryDequeueError};
use evd_verbs::soft::SoftCq;
use evd_verbs::{CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent, WorkCompletion};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Completions outstanding per CQ at most: the software CQ overruns (and
/// loses every completion that does not fit, as rxe does) if the consumer
/// falls this far behind.
const CQ_DEPTH: usize = 256;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().unwrap());
    let cqs = args.next().unwrap_or(32);
    let per_cq = args.next().unwrap_or(5_000) as u64;

    let mut cno = Cno::new(cqs).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let mut evds = Vec::new();
    let mut hcas = Vec::new();
    for i in 0..cqs {
        let (cq, hca) = SoftCq::new(CQ_DEPTH).unwrap();
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(CQ_DEPTH).unwrap();
        consumer.bind_cno(&cno, i as u64).unwrap();
        driver
            .register(Feed::new(cq, CqId(i as u32), poster), FeedMode::Event)
            .unwrap();
        evds.push(consumer);
        hcas.push(hca);
    }
    let driver = driver.spawn().unwrap();

    // Completions the consumer has taken, per CQ: the producer's credit.
    let taken: Arc<Vec<AtomicU64>> = Arc::new((0..cqs).map(|_| AtomicU64::new(0)).collect());
    let producer = {
        let taken = taken.clone();
        std::thread::spawn(move || {
            let mut next = vec![0u64; hcas.len()];
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let mut left = hcas.len() as u64 * per_cq;
            while left > 0 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let i = (rng % hcas.len() as u64) as usize;
                let in_flight = next[i] - taken[i].load(Ordering::Acquire);
                if next[i] == per_cq || in_flight >= CQ_DEPTH as u64 {
                    std::thread::yield_now();
                    continue;
                }
                let wc = WorkCompletion::new(next[i]);
                hcas[i]
                    .push(wc)
                    .expect("never overruns: the credit holds it");
                next[i] += 1;
                left -= 1;
            }
        })
    };

    let total = cqs as u64 * per_cq;
    let mut expected = vec![0u64; cqs];
    let mut enabled = vec![false; cqs];
    let (mut got, mut waits, mut keys_seen) = (0u64, 0u64, 0u64);
    let mut ready: Vec<u64> = (0..cqs as u64).collect(); // enable each once
    while got < total {
        for &key in &ready {
            let i = key as usize;
            let evd = &mut evds[i];
            loop {
                loop {
                    match evd.try_dequeue() {
                        Ok(VerbsEvent::Completion { cq, wc }) => {
                            assert_eq!(cq, CqId(i as u32));
                            assert!(wc.status.is_success(), "{wc:?}");
                            assert_eq!(wc.wr_id, expected[i], "in order, once, on CQ {i}");
                            expected[i] += 1;
                            got += 1;
                            taken[i].fetch_add(1, Ordering::Release);
                        }
                        Ok(other) => panic!("unexpected {other:?}"),
                        Err(TryDequeueError::Empty) => break,
                        Err(e) => panic!("CQ {i}: {e:?}"),
                    }
                }
                match evd.enable_cno().unwrap() {
                    ArmStatus::Armed => break enabled[i] = true,
                    ArmStatus::Pending => {}
                    ArmStatus::Closed => panic!("CQ {i} closed early"),
                }
            }
        }
        if got == total {
            break;
        }
        ready.clear();
        cno.wait(&mut ready);
        waits += 1;
        for &key in &ready {
            // Cleared as it is checked: a key twice in one wait fails too.
            assert!(
                std::mem::replace(&mut enabled[key as usize], false),
                "key {key} came back while not enabled (or twice in one wait)"
            );
            keys_seen += 1;
        }
    }
    producer.join().unwrap();
    driver.shutdown().unwrap();
    assert!(expected.iter().all(|&n| n == per_cq));
    println!(
        "cno_many_cqs: {got} completions from {cqs} CQs, each exactly once and in order; \
         {waits} CNO waits, {keys_seen} keys ({:.1} completions per key)",
        got as f64 / keys_seen.max(1) as f64
    );
}
