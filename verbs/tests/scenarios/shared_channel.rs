//! Four CQs on one completion channel, served by one `ChannelFeed`
//! through the driver in event mode, the last two added while the driver
//! runs (`DriverHandle::with_feed`): work completes on all four in
//! rounds, every completion is delivered once and in order per CQ, every
//! CQ's events are credited to it, and every channel event is
//! acknowledged before the CQs go.

use crate::common::{Res, e2s, ensure};
use evd::TryDequeueError;
use evd_verbs::{
    ChannelFeed, CqId, Driver, DriverConfig, FeedMode, SharedChannel, VerbsEvent, WorkCompletion,
};
use std::time::{Duration, Instant};

pub const CQS: usize = 4;
const ROUNDS: u64 = 50;
/// Work requests completed on each CQ in a round before it is collected.
pub const PER_ROUND: u64 = 16;

/// The CQs made on a channel of type `H`.
pub type Cqs<H> = Vec<<H as SharedChannel>::Cq>;

/// The devices under the channel.
pub trait ChannelDevices {
    type Channel: SharedChannel + 'static;

    /// `CQS` CQs on one channel, the `i`th named `CqId(first + i)`, and
    /// that channel.
    fn create(&mut self, first: u32) -> Result<(Self::Channel, Cqs<Self::Channel>), String>;

    /// Complete work request `wr_id` once on every CQ.
    fn complete(&mut self, wr_id: u64) -> Res;

    /// The checks on one completion of the `i`th CQ.
    fn check(&self, i: usize, wc: &WorkCompletion) -> Res;

    /// Tear the CQs and the channel down after the feed, checking that
    /// every event was acknowledged.
    fn finish(self, feed: ChannelFeed<Self::Channel>) -> Res;
}

pub fn four_cqs_on_one_channel<D: ChannelDevices>(mut devices: D, first: u32) -> Res {
    let (channel, cqs) = devices.create(first)?;
    ensure!(
        cqs.iter().all(|cq| channel.key_of(cq).is_some()),
        "a CQ is not on the channel"
    );
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(256).map_err(e2s)?;
    let mut feed = ChannelFeed::new(channel, poster);
    let mut cqs = cqs.into_iter().enumerate();
    for (i, cq) in cqs.by_ref().take(CQS / 2) {
        feed.add(cq, CqId(first + i as u32))
            .map_err(|_| "add refused a CQ of the channel".to_string())?;
    }
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    let key = driver
        .register_channel(feed, FeedMode::Event)
        .map_err(|e| format!("register_channel: {e}"))?;
    let running = driver.spawn().map_err(|e| format!("spawn: {e}"))?;
    // The others join the feed while the driver serves it: each is armed
    // and drained in the feed's next turn.
    let rest: Vec<_> = cqs.collect();
    running
        .handle()
        .with_feed(key, move |feed| {
            rest.into_iter().try_for_each(|(i, cq)| {
                feed.add(cq, CqId(first + i as u32))
                    .map_err(|_| "add refused a CQ of the channel".to_string())
            })
        })
        .map_err(|e| format!("with_feed: {e}"))??;

    // Per CQ, the wr_ids in the order they came.
    let mut seen: [Vec<u64>; CQS] = Default::default();
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            devices.complete(round * PER_ROUND + i)?;
        }
        let want = (round + 1) * PER_ROUND * CQS as u64;
        // A watchdog only: a round takes milliseconds.
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.iter().map(Vec::len).sum::<usize>() < want as usize {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => {
                    let i = cq.0.checked_sub(first).filter(|&i| i < CQS as u32);
                    let i = i.ok_or(format!("a completion on {cq:?}"))? as usize;
                    devices.check(i, &wc)?;
                    seen[i].push(wc.wr_id);
                }
                Ok(VerbsEvent::Async(a)) => return Err(format!("unexpected async event {a:?}")),
                Ok(other) => return Err(format!("unexpected event {other:?}")),
                Err(TryDequeueError::Empty) => {
                    ensure!(
                        Instant::now() < deadline,
                        "round {round}: {:?} of {want} completions per CQ after 20 s",
                        seen.iter().map(Vec::len).collect::<Vec<_>>()
                    );
                    let _ = consumer.wait(1, Some(Duration::from_millis(100)));
                }
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        }
    }
    let total = ROUNDS * PER_ROUND;
    for (i, s) in seen.iter().enumerate() {
        ensure!(
            *s == (0..total).collect::<Vec<_>>(),
            "CQ {i}: not each completion once, in order ({} of {total})",
            s.len()
        );
    }
    let mut stopped = running.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    let feed = stopped
        .take(key)
        .ok_or("the channel feed was not handed back")?;
    let stats = feed.stats();
    let credited: u64 = feed.feeds().map(|f| f.stats().events_got).sum();
    ensure!(
        stats.unknown_events == 0 && credited == stats.events_got && stats.events_got > 0,
        "events: {stats:?}, credited {credited}"
    );
    for f in feed.feeds() {
        ensure!(f.stats().events_got > 0, "{:?} was never woken", f.id());
    }
    eprintln!("    {stats:?}");
    devices.finish(feed)
}
