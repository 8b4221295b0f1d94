//! Feeds served by a spawned io_uring driver (event-driven and adaptive
//! modes, async events registered), and the drain throughput of a feed
//! against a raw poll loop on the same CQ.

use crate::common::{Res, e2s, ensure};
use crate::pair;
use evd::TryDequeueError;
use evd_verbs::ibv::{IbvCq, ProtectionDomain, SendOp};
use evd_verbs::{
    AdaptiveConfig, AsyncFeed, CompletionQueue, CqId, Driver, DriverConfig, Feed, FeedMode,
    POLL_BATCH, VerbsEvent, WcOpcode, WorkCompletion,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ping-pong through a spawned io_uring driver: A's CQ event-driven,
/// B's adaptive; the application only waits on the EVD.
pub(crate) fn event_driven_io_uring(pd: &Arc<ProtectionDomain>) -> Res {
    const ROUNDS: u64 = 500;
    let (mut p, cq_a, cq_b) = pair(pd, 256, (7, 8))?;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    // Taken first, so the driver does not serve the device's events itself
    // when the CQs' feeds are registered.
    let async_events = pd.context().async_events().map_err(e2s)?;
    let key_a = driver
        .register(Feed::new(cq_a, CqId(7), poster.clone()), FeedMode::Event)
        .map_err(e2s)?;
    let key_b = driver
        .register(
            Feed::new(cq_b, CqId(8), poster.clone()),
            FeedMode::Adaptive(AdaptiveConfig::default()),
        )
        .map_err(e2s)?;
    driver
        .register_async(AsyncFeed::new(async_events, poster))
        .map_err(e2s)?;
    let driver = driver.spawn().map_err(e2s)?;
    // B echoes every message back; A sends the next one when the echo lands.
    for side in [&p.a, &p.b] {
        for i in 0..4 {
            side.post_recv(
                i,
                if std::ptr::eq(side, &p.a) {
                    &p.mr_a
                } else {
                    &p.mr_b
                },
                0,
                64,
            )
            .map_err(e2s)?;
        }
    }
    crate::put(&mut p.mr_a, 0, &0u64.to_le_bytes());
    p.a.post_send(0, SendOp::Send, &p.mr_a, 0, 8, true)
        .map_err(e2s)?;
    let (mut pings, mut pongs, mut sends) = (0u64, 0u64, 0u64);
    let mut idle = 0;
    while pongs < ROUNDS {
        match consumer.try_dequeue() {
            Ok(VerbsEvent::Completion { cq, wc }) => {
                ensure!(wc.status.is_success(), "{cq:?}: {wc:?}");
                match (cq, wc.opcode) {
                    (_, WcOpcode::SEND) => sends += 1,
                    (CqId(8), WcOpcode::RECV) => {
                        let seq = crate::bytes(&p.mr_b, 0, 8).try_into().unwrap();
                        let seq = u64::from_le_bytes(seq);
                        ensure!(seq == pings, "ping {seq}, expected {pings}");
                        pings += 1;
                        p.b.post_recv(wc.wr_id, &p.mr_b, 0, 64).map_err(e2s)?;
                        p.b.post_send(seq, SendOp::Send, &p.mr_b, 0, 8, true)
                            .map_err(e2s)?;
                    }
                    (CqId(7), WcOpcode::RECV) => {
                        let seq = crate::bytes(&p.mr_a, 0, 8).try_into().unwrap();
                        let seq = u64::from_le_bytes(seq);
                        ensure!(seq == pongs, "pong {seq}, expected {pongs}");
                        pongs += 1;
                        p.a.post_recv(wc.wr_id, &p.mr_a, 0, 64).map_err(e2s)?;
                        if pongs < ROUNDS {
                            crate::put(&mut p.mr_a, 0, &pongs.to_le_bytes());
                            p.a.post_send(pongs, SendOp::Send, &p.mr_a, 0, 8, true)
                                .map_err(e2s)?;
                        }
                    }
                    other => return Err(format!("unexpected completion {other:?}")),
                }
            }
            Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
            Ok(other) => return Err(format!("unexpected event {other:?}")),
            Err(TryDequeueError::Empty) => {
                if consumer.wait(1, Some(Duration::from_millis(200))).is_err() {
                    idle += 1;
                    ensure!(
                        idle < 50,
                        "stalled at {pongs} round trips (a completion stranded?)"
                    );
                }
            }
            Err(e) => return Err(format!("dequeue: {e:?}")),
        }
    }
    let mut stopped = driver.shutdown().map_err(e2s)?;
    let mut got = 0;
    let feeds = [key_a, key_b].map(|k| stopped.take(k));
    for f in feeds.iter().flatten() {
        got += f.stats().events_got;
        eprintln!("    feed {:?}: {:?}", f.id(), f.stats());
    }
    ensure!(got > 0, "no channel event was used");
    // Dropping the feeds acks their events, then the QPs and CQs go.
    drop(feeds);
    drop(stopped);
    drop(p);
    // The last round's sends may complete after the last pong was taken
    // (up to two not seen); more than one per send is a duplicate.
    ensure!(
        (2 * ROUNDS - 2..=2 * ROUNDS).contains(&sends),
        "{sends} send completions"
    );
    Ok(())
}

/// Completions per second through a feed against a raw poll loop on the
/// same CQ. Each round fills A's CQ first: 255 signaled RDMA writes then a
/// send, and waits (polling B's CQ, not A's) for the send to arrive at B, by
/// when the writes before it have executed. Only the drain of A's CQ is
/// timed: by a raw poll loop, or by a feed into an EVD plus a consumer
/// dequeuing in batches. (Timing post and drain together measures rxe under
/// emulation, where a tight poll loop slows the other vCPU down.)
pub(crate) fn throughput(pd: &Arc<ProtectionDomain>) -> Res {
    const BATCH: usize = 256;
    const ROUNDS: usize = 40;
    let (p, cq_a, mut cq_b) = pair(pd, 1024, (9, 10))?;
    let write = SendOp::Write {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey(),
    };
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    // Post a round and wait until it has executed at B.
    let fill = |cq_b: &mut IbvCq| -> Res {
        p.b.post_recv(0, &p.mr_b, 0, 64).map_err(e2s)?;
        for i in 0..BATCH - 1 {
            p.a.post_send(i as u64, write, &p.mr_a, 0, 8, false)
                .map_err(e2s)?;
        }
        p.a.post_send(BATCH as u64, SendOp::Send, &p.mr_a, 0, 8, false)
            .map_err(e2s)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut b = [WorkCompletion::default(); 1];
        while cq_b.poll(&mut b).map_err(e2s)? == 0 {
            ensure!(Instant::now() < deadline, "round never reached B");
        }
        ensure!(b[0].status.is_success(), "B: {:?}", b[0]);
        Ok(())
    };
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let mut out = Vec::with_capacity(1024);
    let (mut raw_time, mut feed_time) = (Duration::ZERO, Duration::ZERO);
    let mut raw_cq = cq_a;
    // Interleaved rounds, raw and feed alternately, on the same CQ and QP.
    for _ in 0..ROUNDS {
        fill(&mut cq_b)?;
        let t = Instant::now();
        let mut n = 0;
        while n < BATCH {
            let k = raw_cq.poll(&mut wcs).map_err(e2s)?;
            for wc in &wcs[..k] {
                ensure!(wc.status.is_success(), "raw: {wc:?}");
            }
            n += k;
        }
        raw_time += t.elapsed();

        let mut feed = Feed::new(raw_cq, CqId(9), poster.clone());
        fill(&mut cq_b)?;
        let t = Instant::now();
        let mut n = 0;
        while n < BATCH {
            feed.progress(BATCH);
            out.clear();
            n += consumer
                .dequeue_batch(&mut out, 1024)
                .map_err(|e| format!("{e:?}"))?;
        }
        feed_time += t.elapsed();
        raw_cq = feed.into_parts().0;
    }
    let total = (BATCH * ROUNDS) as f64;
    println!(
        "    Soft-RoCE drain of a filled CQ ({total} completions each way): raw poll loop {:.0}/s ({:.0} ns each), \
         feed + EVD {:.0}/s ({:.0} ns each), feed overhead {:+.1}%",
        total / raw_time.as_secs_f64(),
        raw_time.as_secs_f64() * 1e9 / total,
        total / feed_time.as_secs_f64(),
        feed_time.as_secs_f64() * 1e9 / total,
        (feed_time.as_secs_f64() / raw_time.as_secs_f64() - 1.0) * 100.0
    );
    Ok(())
}
