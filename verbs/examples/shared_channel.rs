//! Connections come and go on one shared completion channel.
//!
//! `cargo run --release -p evd-verbs --example shared_channel [-- CONNECTIONS PER_CONNECTION]`
//!
//! A server gives every connection's CQ one completion channel (one fd,
//! whatever the number of connections), served by one `ChannelFeed` on a
//! driver thread, into one EVD that the main thread consumes. Connections
//! open and close while the driver runs: an opening connection's CQ joins
//! the feed through `DriverHandle::with_feed` (the feed arms and drains it
//! in its next turn), and a finished one leaves it the same way, its feed
//! drained and dropped on the driver's thread so that its CQ is destroyed
//! before the channel feed takes another event. Each connection's
//! completions come from a thread of its own playing the HCA (software
//! CQs: the crate's test double of an `ibv_cq`). At most `LIVE` connections
//! are open at once.
//!
//! The example checks that every completion arrives exactly once and in
//! order per connection, that every channel event is acknowledged before
//! its CQ goes, and that the channel feed never saw an event for a CQ it
//! did not serve.

use evd::TryDequeueError;
use evd_verbs::soft::{SoftChannel, SoftCqProducer};
use evd_verbs::{
    ChannelFeed, CqId, Driver, DriverConfig, FeedMode, FeedStatus, VerbsEvent, WorkCompletion,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

/// Connections open at once, at most.
const LIVE: usize = 4;
/// Completions outstanding per CQ at most: a software CQ overruns (losing
/// the completion that does not fit, as rxe does) past its depth.
const CQ_DEPTH: usize = 256;

/// One open connection: its CQ's producer (kept to read its counters after
/// the CQ is gone), the thread completing its work, and how many of its
/// completions the consumer has taken (the producer's credit).
struct Connection {
    hca: SoftCqProducer,
    producer: JoinHandle<()>,
    taken: Arc<AtomicU64>,
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().unwrap());
    let connections = args.next().unwrap_or(16) as u32;
    let per_connection = args.next().unwrap_or(2_000);

    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let channel = SoftChannel::new().unwrap();
    let running = Driver::new(DriverConfig::default())
        .unwrap()
        .spawn()
        .unwrap();
    let handle = running.handle().clone();
    let key = handle
        .register_channel(ChannelFeed::new(channel.clone(), poster), FeedMode::Event)
        .unwrap();

    let open = |id: u32| -> Connection {
        let (cq, hca) = channel.create_cq(CQ_DEPTH).unwrap();
        handle
            .with_feed(key, move |feed| {
                feed.add(cq, CqId(id)).map_err(|e| e.reason())
            })
            .unwrap()
            .unwrap();
        let taken = Arc::new(AtomicU64::new(0));
        let producer = {
            let (hca, taken) = (hca.clone(), taken.clone());
            std::thread::spawn(move || {
                for wr_id in 0..per_connection {
                    while wr_id - taken.load(Ordering::Acquire) >= CQ_DEPTH as u64 {
                        std::thread::yield_now();
                    }
                    hca.push(WorkCompletion::new(wr_id))
                        .expect("never overruns: the credit holds it");
                }
            })
        };
        Connection {
            hca,
            producer,
            taken,
        }
    };

    let mut live: Vec<Option<Connection>> = Vec::new();
    let mut next = Vec::new(); // per connection, the next wr_id due
    let (mut opened, mut closed, mut got) = (0u32, 0u32, 0u64);
    while closed < connections {
        while opened < connections && live.iter().flatten().count() < LIVE {
            live.push(Some(open(opened)));
            next.push(0u64);
            opened += 1;
        }
        match consumer.dequeue() {
            Ok(VerbsEvent::Completion { cq, wc }) => {
                let i = cq.0 as usize;
                assert!(wc.status.is_success(), "{wc:?}");
                assert_eq!(wc.wr_id, next[i], "in order, once, on connection {i}");
                next[i] += 1;
                got += 1;
                let conn = live[i]
                    .as_ref()
                    .expect("a completion of a closed connection");
                conn.taken.fetch_add(1, Ordering::Release);
                if next[i] == per_connection {
                    let conn = live[i].take().unwrap();
                    conn.producer.join().unwrap();
                    // Everything it completed was taken: its feed drains at
                    // once, and goes with its CQ on the driver's thread.
                    let status = handle
                        .with_feed(key, move |feed| {
                            let mut done = feed.remove(cq).expect("served");
                            done.progress(usize::MAX).status
                        })
                        .unwrap();
                    assert_eq!(status, FeedStatus::Drained);
                    let stats = conn.hca.stats();
                    assert_eq!(stats.unacked_at_destroy, Some(0), "every event acked");
                    closed += 1;
                }
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => panic!("{e}"),
        }
    }
    let unknown = handle
        .with_feed(key, |feed| {
            assert!(feed.is_empty());
            feed.stats().unknown_events
        })
        .unwrap();
    assert_eq!(unknown, 0, "no event for a CQ the feed did not serve");
    let mut stopped = running.shutdown().unwrap();
    drop(stopped.take(key));
    assert!(matches!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Closed)
    ));
    println!(
        "shared_channel: {connections} connections, at most {LIVE} open at once, on one \
         channel: {got} completions, each exactly once and in order; every CQ joined and \
         left the running driver's channel feed, every channel event acknowledged"
    );
}
