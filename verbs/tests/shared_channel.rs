//! One completion channel shared by many CQs, served by one `ChannelFeed`
//! on a driver: exactly-once and FIFO delivery per CQ while producers on
//! several threads complete on random CQs (with widened re-arm windows and
//! spurious events), every channel event acknowledged, no CQ stranded,
//! backpressure with a small EVD without over-commit, events for CQs the
//! feed does not hold, and events for one CQ raised while another is
//! being served.
//!
//! The only clock is a watchdog that turns a hang (a stranded completion)
//! into a failure: no assertion depends on timing.

mod common;
mod scenarios;

use common::driver::{nothing_after, running_driver};
use common::load::{Credits, Overflow, Watchdog, Xorshift, drain_completions};
use common::{Res, e2s, ensure, wc};
use evd::TryDequeueError;
use evd_verbs::channel_feed::AddRefusal;
use evd_verbs::soft::{SoftChannel, SoftCqProducer};
use evd_verbs::{
    ChannelFeed, CompletionQueue, CqId, Driver, DriverConfig, FeedMode, FeedStatus, SharedChannel,
    VerbsEvent, WorkCompletion,
};
use scenarios::shared_channel::{CQS as ROUND_CQS, ChannelDevices, Cqs, four_cqs_on_one_channel};
use std::sync::Arc;
use std::time::Duration;

const CQS: usize = 8;
const PRODUCERS: u64 = 4;
const CQ_DEPTH: usize = 256;
/// No delivery for this long means a stranded completion (or a hang).
const WATCHDOG: Duration = Duration::from_secs(60);

struct Setup {
    channel: SoftChannel,
    hcas: Vec<SoftCqProducer>,
}

/// `CQS` soft CQs on one channel, in one feed into `poster`'s EVD; odd CQs
/// have a widened re-arm window, every third CQ raises spurious events.
fn setup(poster: evd::Poster<VerbsEvent>) -> (Setup, ChannelFeed<SoftChannel>) {
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let mut hcas = Vec::new();
    for i in 0..CQS {
        let (cq, hca) = channel.create_cq(CQ_DEPTH).unwrap();
        if i % 2 == 1 {
            hca.set_rearm_window(3);
        }
        if i % 3 == 0 {
            hca.set_spurious_every(3);
        }
        feed.add(cq, CqId(i as u32)).unwrap();
        hcas.push(hca);
    }
    (Setup { channel, hcas }, feed)
}

/// Producers: each completes `per_producer` work requests on random CQs,
/// with at most `CQ_DEPTH` completions outstanding over all CQs (so no CQ
/// overruns). `wr_id` = producer << 32 | sequence number.
fn spawn_producers(
    hcas: &[SoftCqProducer],
    per_producer: u64,
    credits: &Arc<Credits>,
) -> Vec<std::thread::JoinHandle<()>> {
    common::load::spawn_producers(PRODUCERS, per_producer, credits, None, |p| {
        let hcas = hcas.to_vec();
        let mut rng = Xorshift::for_producer(p);
        move |seq| {
            let cq = rng.below(CQS as u64) as usize;
            hcas[cq]
                .push(wc((p << 32) | seq))
                .expect("no overrun: at most CQ_DEPTH outstanding");
        }
    })
}

/// What the consumer saw: per CQ, per producer, the sequence numbers in
/// the order they came.
type Seen = Vec<Vec<Vec<u64>>>;

/// Dequeue the `per_producer` completions of each producer, returning a
/// credit for each, then join `producers`: every completion arrives
/// exactly once, in order on each CQ. Fails (not hangs) when nothing comes
/// for `WATCHDOG`. What was seen, per CQ and producer.
fn consume(
    s: &Setup,
    consumer: &mut evd::Consumer<VerbsEvent>,
    per_producer: u64,
    credits: &Credits,
    producers: Vec<std::thread::JoinHandle<()>>,
) -> Seen {
    let n = PRODUCERS * per_producer;
    let mut seen: Seen = vec![vec![Vec::new(); PRODUCERS as usize]; CQS];
    let record = |cq: CqId, wc: &WorkCompletion| {
        let p = (wc.wr_id >> 32) as usize;
        seen[cq.0 as usize][p].push(wc.wr_id & 0xffff_ffff);
    };
    let stalled = |got| {
        let stranded: Vec<_> = s.hcas.iter().map(|h| h.is_stranded()).collect();
        format!(
            "{got} of {n} completions; channel {:?}; stranded {stranded:?}; CQs {:?}",
            s.channel.stats(),
            s.hcas.iter().map(|h| h.stats()).collect::<Vec<_>>()
        )
    };
    drain_completions(
        consumer,
        n,
        credits,
        WATCHDOG,
        Overflow::Fails,
        record,
        stalled,
    );
    for p in producers {
        p.join().unwrap();
    }
    check_exactly_once_fifo(&seen, per_producer);
    seen
}

/// Every producer's completions arrived exactly once, and in order on each
/// CQ.
fn check_exactly_once_fifo(seen: &Seen, per_producer: u64) {
    for p in 0..PRODUCERS as usize {
        let mut all = Vec::new();
        for (cq, per_cq) in seen.iter().enumerate() {
            let s = &per_cq[p];
            assert!(
                s.windows(2).all(|w| w[0] < w[1]),
                "CQ {cq}, producer {p}: out of order or duplicated"
            );
            all.extend_from_slice(s);
        }
        all.sort_unstable();
        assert_eq!(
            all,
            (0..per_producer).collect::<Vec<_>>(),
            "producer {p}: lost or duplicated"
        );
    }
}

/// After the load: one more completion on every CQ while the driver sleeps
/// must arrive (each CQ was left armed or with an event waiting: none is
/// stranded), then the teardown acknowledges every event got.
fn finish(
    s: Setup,
    key: evd_verbs::FeedKey<ChannelFeed<SoftChannel>>,
    running: evd_verbs::RunningDriver,
    consumer: &mut evd::Consumer<VerbsEvent>,
    credits: &Credits,
) -> Vec<evd_verbs::FeedStats> {
    for (i, hca) in s.hcas.iter().enumerate() {
        credits.add(1);
        hca.push(wc(u64::MAX - i as u64)).unwrap();
    }
    let mut markers = [false; CQS];
    let mut watchdog = Watchdog::new(WATCHDOG);
    while markers.iter().any(|m| !m) {
        match consumer.try_dequeue() {
            Ok(VerbsEvent::Completion { cq, wc }) => {
                assert_eq!(wc.wr_id, u64::MAX - u64::from(cq.0), "a late duplicate");
                assert!(!markers[cq.0 as usize], "marker of CQ {} twice", cq.0);
                markers[cq.0 as usize] = true;
                watchdog.progress();
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(TryDequeueError::Empty) => {
                assert!(
                    !watchdog.expired(),
                    "watchdog: CQs stranded {:?}",
                    s.hcas.iter().map(|h| h.is_stranded()).collect::<Vec<_>>()
                );
                let _ = consumer.wait(1, Some(Duration::from_millis(100)));
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    let mut stopped = running.shutdown().unwrap();
    let feed: ChannelFeed<SoftChannel> = stopped.take(key).expect("handed back typed");
    assert_eq!(feed.len(), CQS);
    assert_eq!(feed.stats().unknown_events, 0);
    let total_credited: u64 = feed.feeds().map(|f| f.stats().events_got).sum();
    assert_eq!(
        total_credited,
        feed.stats().events_got,
        "every event credited"
    );
    let chan = s.channel.stats();
    assert_eq!(chan.got, feed.stats().events_got);
    let stats: Vec<_> = feed.feeds().map(|f| f.stats()).collect();
    drop(feed);
    for (i, hca) in s.hcas.iter().enumerate() {
        let st = hca.stats();
        assert_eq!(st.len, 0, "CQ {i} left completions");
        assert_eq!(st.unacked_at_destroy, Some(0), "CQ {i}: events not acked");
        assert_eq!(st.events_got, st.events_acked, "CQ {i}: {st:?}");
        assert_eq!(st.events_got, stats[i].events_got, "CQ {i}: {st:?}");
    }
    let chan = s.channel.stats();
    assert_eq!(chan.acked_unknown, 0);
    assert_eq!(chan.raised, chan.got + chan.queued as u64 + chan.dropped);
    stats
}

fn many_producers(mode: FeedMode) {
    const PER_PRODUCER: u64 = 25_000;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1024).unwrap();
    let (s, feed) = setup(poster);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, mode).unwrap();
    let running = driver.spawn().unwrap();
    let credits = Arc::new(Credits::new(CQ_DEPTH as u64));
    let producers = spawn_producers(&s.hcas, PER_PRODUCER, &credits);
    let seen = consume(&s, &mut consumer, PER_PRODUCER, &credits, producers);
    for (i, per_cq) in seen.iter().enumerate() {
        assert!(per_cq.iter().any(|v| !v.is_empty()), "CQ {i} got nothing");
    }
    let stats = finish(s, key, running, &mut consumer, &credits);
    for st in stats {
        assert_eq!(st.held, 0, "the driver is the only poster: {st:?}");
    }
}

#[test]
fn eight_cqs_on_one_channel_event_mode_exactly_once_fifo_acked_none_stranded() {
    many_producers(FeedMode::Event);
}

#[test]
fn eight_cqs_on_one_channel_adaptive_mode_exactly_once_fifo_acked_none_stranded() {
    many_producers(FeedMode::Adaptive(Default::default()));
}

#[test]
fn a_small_evd_blocks_the_channel_feed_without_over_commit_and_loses_nothing() {
    const EVD: usize = 8;
    const PER_PRODUCER: u64 = 5_000;
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD).unwrap();
    let (s, feed) = setup(poster);
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    let credits = Arc::new(Credits::new(CQ_DEPTH as u64));
    // Before anything is dequeued, more completions than the EVD holds:
    // the feed must stop at a full EVD and wait for its room signal.
    for p in spawn_producers(&s.hcas, 50, &credits) {
        p.join().unwrap();
    }
    // Producer numbers restart: the second phase writes its own table.
    consume(&s, &mut consumer, 50, &credits, Vec::new());
    let producers = spawn_producers(&s.hcas, PER_PRODUCER, &credits);
    consume(&s, &mut consumer, PER_PRODUCER, &credits, producers);
    let stats = finish(s, key, running, &mut consumer, &credits);
    let backpressure: u64 = stats.iter().map(|s| s.backpressure).sum();
    assert!(
        backpressure > 0,
        "200 completions into 8 slots never blocked"
    );
    for st in stats {
        assert_eq!(st.held, 0, "polled without room: {st:?}");
    }
}

/// A consumer slower than its CQs keeps the EVD full: every pass of the
/// feed ends at a full EVD. Each CQ still gets its share of the slots the
/// consumer frees, by the arming pass and the unarmed one alike; a feed
/// that restarted each pass at the CQ that found the EVD full would hand
/// that CQ every slot while the others filled up to an overrun.
#[test]
fn a_full_evd_shares_its_freed_slots_among_the_cqs_instead_of_starving_some() {
    const EVD: usize = 4;
    const ROUNDS: usize = 60;
    for arming in [true, false] {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD).unwrap();
        let channel = SoftChannel::new().unwrap();
        let mut feed = ChannelFeed::new(channel.clone(), poster);
        let hcas: Vec<SoftCqProducer> = (0..3)
            .map(|i| {
                let (cq, hca) = channel.create_cq(CQ_DEPTH).unwrap();
                feed.add(cq, CqId(i)).unwrap();
                hca
            })
            .collect();
        let mut served = [0u64; 3];
        for round in 0..ROUNDS {
            // Every CQ has more than the EVD holds, every round.
            for hca in &hcas {
                while hca.stats().len < 2 * EVD {
                    hca.push(wc(round as u64)).unwrap();
                }
            }
            let p = if arming {
                feed.arm_and_drain(64).unwrap()
            } else {
                feed.progress(64)
            };
            assert_eq!(p.status, FeedStatus::Backpressure, "round {round}");
            while let Ok(ev) = consumer.try_dequeue() {
                let VerbsEvent::Completion { cq, .. } = ev else {
                    panic!("{ev:?}")
                };
                served[cq.0 as usize] += 1;
            }
        }
        let (least, most) = (served.iter().min(), served.iter().max());
        assert!(
            least.unwrap() * 2 >= *most.unwrap(),
            "arming {arming}: slots served per CQ {served:?}"
        );
    }
}

#[test]
fn an_event_for_a_cq_the_feed_does_not_hold_is_acked_at_once_and_counted() {
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let mut channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (mine, my_hca) = channel.create_cq(8).unwrap();
    feed.add(mine, CqId(0)).unwrap();
    let (mut other, other_hca) = channel.create_cq(8).unwrap();
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    other.req_notify(false).unwrap();
    other_hca.push(wc(99)).unwrap();
    my_hca.push(wc(1)).unwrap();
    let p = feed.on_channel_ready(16).unwrap();
    assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Completion { cq: CqId(0), wc }) if wc.wr_id == 1
    ));
    assert_eq!(feed.stats().unknown_events, 1);
    assert_eq!(feed.stats().events_got, 2);
    // Acked at once, on the CQ it named; its completion is not ours.
    let st = other_hca.stats();
    assert_eq!((st.events_got, st.events_acked, st.len), (1, 1, 1));
    assert_eq!(channel.stats().acked_unknown, 1);
    assert!(channel.get_cq_event().unwrap().is_none());
    // Its owner can destroy it: nothing is left unacknowledged.
    assert!(other.destroy().is_ok());
    drop(feed);
    assert_eq!(my_hca.stats().unacked_at_destroy, Some(0));
}

#[test]
fn a_clean_cqs_error_refused_as_full_in_progress_is_served_once_there_is_room() {
    // A clean CQ (armed, found empty) whose poll fails in `progress`, its
    // `CqError` refused because another poster took the last slot: no
    // channel event will come for it (the CQ is broken), so the next pass
    // must serve it, not skip it as clean.
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster.clone());
    let (b, hca_b) = channel.create_cq(64).unwrap();
    feed.add(b, CqId(1)).unwrap();
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    hca_b.fail_next_poll(libc::EIO);
    let filler = VerbsEvent::Completion {
        cq: CqId(9),
        wc: wc(9),
    };
    hca_b.during_next_poll(move || poster.post(filler).unwrap());
    assert_eq!(feed.progress(16).status, FeedStatus::Backpressure);
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Completion { cq: CqId(9), .. })
    ));
    let p = feed.arm_and_drain(16).unwrap();
    assert_eq!(p.delivered, 1, "the held CqError went out");
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Async(e)) if e.kind == evd_verbs::AsyncEventKind::CqError
    ));
    assert_eq!(feed.stats().failed_cqs, 1);
}

#[test]
fn an_event_for_cq_b_raised_while_cq_a_is_served_is_not_lost() {
    // Without a driver, step by step: B's event arrives in the middle of
    // A's drain; the pass that reports "drained" leaves it on the channel
    // (the fd stays readable), and the next wake delivers B.
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (a, hca_a) = channel.create_cq(64).unwrap();
    let (b, hca_b) = channel.create_cq(64).unwrap();
    feed.add(a, CqId(0)).unwrap();
    feed.add(b, CqId(1)).unwrap();
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    hca_a.push_batch(&[wc(0); 20]);
    let b_during = hca_b.clone();
    hca_a.during_next_poll(move || b_during.push(wc(1000)).unwrap());
    let p = feed.on_channel_ready(16).unwrap();
    assert_eq!((p.delivered, p.status), (16, FeedStatus::Budget));
    let p = feed.arm_and_drain(16).unwrap();
    assert_eq!((p.delivered, p.status), (4, FeedStatus::Drained));
    assert_eq!(channel.stats().queued, 1, "B's event waits on the channel");
    assert!(!hca_b.is_stranded());
    let p = feed.on_channel_ready(16).unwrap();
    assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    let got: Vec<_> = std::iter::from_fn(|| consumer.try_dequeue().ok()).collect();
    assert_eq!(got.len(), 21);
    assert!(matches!(
        got[20],
        VerbsEvent::Completion { cq: CqId(1), wc } if wc.wr_id == 1000
    ));
}

#[test]
fn events_for_other_cqs_raised_during_every_poll_reach_the_evd_through_the_driver() {
    // The same on a driver: each poll of CQ 0 completes on the next CQ,
    // whose event the driver must take and serve, round after round.
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(256).unwrap();
    let (s, feed) = setup(poster);
    let hcas = s.hcas.clone();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    let key = driver.register_channel(feed, FeedMode::Event).unwrap();
    let running = driver.spawn().unwrap();
    let mut total = 0;
    for round in 0..200u64 {
        let from = (round as usize) % CQS;
        let to = (from + 1) % CQS;
        let next = hcas[to].clone();
        hcas[from].during_next_poll(move || next.push(wc(round << 1 | 1)).unwrap());
        hcas[from].push(wc(round << 1)).unwrap();
        let mut got = Vec::new();
        let mut watchdog = Watchdog::new(WATCHDOG);
        while got.len() < 2 {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { wc, .. }) => {
                    assert_eq!(wc.wr_id >> 1, round);
                    got.push(wc.wr_id);
                    watchdog.progress();
                }
                Ok(other) => panic!("{other:?}"),
                Err(_) => {
                    assert!(!watchdog.expired(), "watchdog: round {round}");
                    let _ = consumer.wait(1, Some(Duration::from_millis(100)));
                }
            }
        }
        // Each of the round's two, once (their CQs differ: either order).
        got.sort_unstable();
        assert_eq!(got, [round << 1, round << 1 | 1], "round {round}");
        total += got.len();
    }
    assert_eq!(total, 400);
    let mut stopped = running.shutdown().unwrap();
    let feed = stopped.take(key).unwrap();
    drop(feed);
    nothing_after(&mut consumer, "after the last round");
    for hca in &hcas {
        assert_eq!(hca.stats().unacked_at_destroy, Some(0));
    }
}

/// A channel whose every CQ has one key, as a third-party channel with a
/// wrong `key_of` would: the second CQ added looks served already.
struct OneKey(SoftChannel);

impl SharedChannel for OneKey {
    type Cq = evd_verbs::soft::SoftCq;
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
    fn get_cq_event(&mut self) -> std::io::Result<Option<evd_verbs::ChannelEvent>> {
        self.0.get_cq_event()
    }
    fn key_of(&self, cq: &Self::Cq) -> Option<evd_verbs::CqKey> {
        self.0.key_of(cq).map(|_| evd_verbs::CqKey(1))
    }
    unsafe fn ack_unknown(&mut self, event: evd_verbs::ChannelEvent) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.0.ack_unknown(event) }
    }
}

/// A CQ whose key the feed serves already is handed back, with the id it
/// is served under; the CQ served is left as it was.
#[test]
fn a_cq_served_already_is_refused_with_the_id_it_is_served_under() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(OneKey(channel.clone()), poster);
    feed.add(channel.create_cq(4).unwrap().0, CqId(3)).unwrap();
    let refused = feed
        .add(channel.create_cq(4).unwrap().0, CqId(4))
        .unwrap_err();
    assert_eq!(
        refused.reason(),
        AddRefusal::AlreadyServed { served_as: CqId(3) }
    );
    assert_eq!(
        refused.to_string(),
        "the channel feed serves this CQ already, as CqId(3)"
    );
    assert_eq!(feed.feeds().map(|f| f.id()).collect::<Vec<_>>(), [CqId(3)]);
}

#[test]
fn a_cq_not_on_the_channel_is_refused_and_a_removed_feed_hands_back_every_cq() {
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let channel = SoftChannel::new().unwrap();
    let other = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let refused = feed
        .add(other.create_cq(4).unwrap().0, CqId(9))
        .unwrap_err();
    assert_eq!(refused.reason(), AddRefusal::NotOnChannel);
    assert!(
        other.key_of(&refused.into_cq()).is_some(),
        "another CQ handed back"
    );
    for i in 0..3 {
        feed.add(channel.create_cq(4).unwrap().0, CqId(i)).unwrap();
    }
    let running = running_driver();
    let key = running
        .handle()
        .register_channel(feed, FeedMode::Event)
        .unwrap();
    let feed = running.handle().remove(key).unwrap();
    let (feeds, _channel) = feed.into_parts();
    assert_eq!(
        feeds.iter().map(|f| f.id()).collect::<Vec<_>>(),
        [CqId(0), CqId(1), CqId(2)]
    );
    assert!(feeds.iter().all(|f| f.stats().arms == 1));
    running.shutdown().unwrap();
}

/// The four-CQ scenario (`scenarios/shared_channel.rs`) on soft CQs, with
/// what only a soft CQ shows: every event got acknowledged on its CQ,
/// nothing left in a CQ, and the channel's count of events balanced.
struct SoftFour {
    channel: SoftChannel,
    hcas: Vec<SoftCqProducer>,
}

impl ChannelDevices for SoftFour {
    type Channel = SoftChannel;

    fn create(&mut self, _first: u32) -> Result<(SoftChannel, Cqs<SoftChannel>), String> {
        let mut cqs = Vec::new();
        for _ in 0..ROUND_CQS {
            let (cq, hca) = self.channel.create_cq(128).map_err(e2s)?;
            cqs.push(cq);
            self.hcas.push(hca);
        }
        Ok((self.channel.clone(), cqs))
    }

    fn complete(&mut self, wr_id: u64) -> Res {
        for hca in &self.hcas {
            hca.push(wc(wr_id)).map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    }

    fn check(&self, i: usize, wc: &WorkCompletion) -> Res {
        ensure!(wc.status.is_success(), "CQ {i}: {wc:?}");
        Ok(())
    }

    fn finish(self, feed: ChannelFeed<SoftChannel>) -> Res {
        let stats: Vec<_> = feed.feeds().map(|f| f.stats()).collect();
        drop(feed);
        for (i, hca) in self.hcas.iter().enumerate() {
            let st = hca.stats();
            ensure!(
                st.len == 0
                    && st.unacked_at_destroy == Some(0)
                    && st.events_got == st.events_acked
                    && st.events_got == stats[i].events_got,
                "CQ {i}: {st:?}"
            );
        }
        let chan = self.channel.stats();
        ensure!(
            chan.acked_unknown == 0 && chan.raised == chan.got + chan.queued as u64 + chan.dropped,
            "{chan:?}"
        );
        Ok(())
    }
}

#[test]
fn four_cqs_on_one_channel_in_rounds_each_completion_once_in_order_every_event_acked() {
    let devices = SoftFour {
        channel: SoftChannel::new().unwrap(),
        hcas: Vec::new(),
    };
    four_cqs_on_one_channel(devices, 60).unwrap();
}

/// One CQ of the channel fails to re-arm: the consumer is told (its
/// `CqError`, after the completions it delivered), the CQ leaves the feed,
/// and the other CQs go on.
#[test]
fn a_cq_whose_arm_fails_reports_a_cq_error_and_the_others_go_on() {
    use evd_verbs::{AsyncElement, AsyncEventKind, PollError};
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (a, hca) = channel.create_cq(16).unwrap();
    let (b, hcb) = channel.create_cq(16).unwrap();
    feed.add(a, CqId(0)).unwrap();
    feed.add(b, CqId(1)).unwrap();
    assert_eq!(feed.arm_and_drain(64).unwrap().status, FeedStatus::Drained);
    hca.push(wc(1)).unwrap(); // uses A's arm up
    hca.fail_next_arm(libc::EIO);
    feed.on_channel_ready(64).unwrap();
    hcb.push(wc(2)).unwrap();
    feed.on_channel_ready(64).unwrap();
    let mut got = Vec::new();
    while let Ok(ev) = consumer.try_dequeue() {
        got.push(ev);
    }
    let ids: Vec<(CqId, u64)> = got
        .iter()
        .filter_map(|ev| match ev {
            VerbsEvent::Completion { cq, wc } => Some((*cq, wc.wr_id)),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [(CqId(0), 1), (CqId(1), 2)]);
    let errors: Vec<_> = got
        .iter()
        .filter_map(|ev| match ev {
            VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError => Some(a.element),
            _ => None,
        })
        .collect();
    assert_eq!(errors, [AsyncElement::Cq(CqId(0))], "the consumer is told");
    assert_eq!(feed.stats().failed_cqs, 1);
    let failure = feed
        .feeds()
        .find(|f| f.id() == CqId(0))
        .and_then(|f| f.failure());
    assert_eq!(failure, Some(PollError::ArmFailed(libc::EIO)));
}

/// A CQ whose arm fails while the EVD has no room for all it holds: its
/// drain is cut short, and the failure waits for the drain's end, which
/// fails the CQ then: it is never armed again.
#[test]
fn a_cq_whose_arm_fails_while_its_drain_is_cut_short_fails_once_drained() {
    use evd_verbs::{AsyncElement, AsyncEventKind, PollError};
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(2).unwrap();
    let channel = SoftChannel::new().unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (a, hca) = channel.create_cq(16).unwrap();
    feed.add(a, CqId(0)).unwrap();
    for i in 0..4 {
        hca.push(wc(i)).unwrap();
    }
    hca.fail_next_arm(libc::EIO);
    let p = feed.arm_and_drain(64).unwrap();
    assert_eq!((p.delivered, p.status), (2, FeedStatus::Backpressure));
    assert_eq!(feed.stats().failed_cqs, 0, "still draining");
    let mut got = Vec::new();
    for _ in 0..4 {
        while let Ok(ev) = consumer.try_dequeue() {
            got.push(ev);
        }
        feed.arm_and_drain(64).unwrap();
    }
    while let Ok(ev) = consumer.try_dequeue() {
        got.push(ev);
    }
    assert_eq!(got.len(), 5, "four completions and the CqError: {got:?}");
    let ids: Vec<u64> = got
        .iter()
        .filter_map(|ev| match ev {
            VerbsEvent::Completion { wc, .. } => Some(wc.wr_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [0, 1, 2, 3], "every completion, then");
    assert!(
        matches!(&got[4], VerbsEvent::Async(a) if a.kind == AsyncEventKind::CqError
            && a.element == AsyncElement::Cq(CqId(0))),
        "{got:?}"
    );
    assert_eq!(feed.stats().failed_cqs, 1);
    let failure = feed.feeds().next().and_then(|f| f.failure());
    assert_eq!(failure, Some(PollError::ArmFailed(libc::EIO)));
    assert!(!hca.stats().armed, "never armed");
}

/// A soft channel whose CQs are [`HookedCq`]s: a member CQ whose calls a
/// test takes over.
struct HookedChannel(SoftChannel);

impl evd_verbs::SharedChannel for HookedChannel {
    type Cq = common::hooked_cq::HookedCq;
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
    fn get_cq_event(&mut self) -> std::io::Result<Option<evd_verbs::ChannelEvent>> {
        self.0.get_cq_event()
    }
    fn key_of(&self, cq: &Self::Cq) -> Option<evd_verbs::CqKey> {
        self.0.key_of(&cq.cq)
    }
    unsafe fn ack_unknown(&mut self, event: evd_verbs::ChannelEvent) {
        // SAFETY: this method's contract, passed on to the soft channel.
        unsafe { self.0.ack_unknown(event) }
    }
}

/// A member CQ whose ack panics (the provider's code) while its events are
/// taken, the batch acknowledged with the event of the wake that used its
/// arm up: the feed must still serve that CQ (arm it again and drain it) on
/// its next call, or its completion, and every later one, waits unannounced.
#[test]
fn a_member_whose_ack_panics_while_its_events_are_taken_is_served_next() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let soft = SoftChannel::new().unwrap();
    let (cq, hca) = soft.create_cq(8).unwrap();
    let mut cq = common::hooked_cq::HookedCq::new(cq);
    let mut acks = 0;
    cq.ack_events = Some(Box::new(move |soft, count| {
        // SAFETY: the feed's call passes on its own contract's count.
        unsafe { soft.ack_events(count) };
        acks += 1;
        if acks == 1 {
            panic!("{}", common::panics::PROVOKED);
        }
    }));
    let mut feed = ChannelFeed::new(HookedChannel(soft), poster);
    assert!(feed.add(cq, CqId(5)).is_ok());
    // One short of a batch, got and served: the CQ is armed and drained.
    for _ in 1..evd_verbs::ACK_BATCH {
        hca.inject_spurious_event();
    }
    assert_eq!(
        feed.take_events().unwrap(),
        evd_verbs::ACK_BATCH as usize - 1
    );
    assert_eq!(feed.arm_and_drain(16).unwrap().status, FeedStatus::Drained);
    // A completion uses the arm up; its event completes the batch, whose
    // ack panics.
    hca.push(wc(7)).unwrap();
    let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.take_events()));
    assert!(taken.is_err(), "the ack's panic reaches the caller");
    // As the docs ask: call again before sleeping on the channel's fd.
    let p = feed.arm_and_drain(16).unwrap();
    assert_eq!((p.delivered, p.status), (1, FeedStatus::Drained));
    assert!(matches!(
        consumer.try_dequeue(),
        Ok(VerbsEvent::Completion { cq: CqId(5), wc }) if wc.wr_id == 7
    ));
}

/// An event type whose `From` panics on every completion of `CqId(0)`.
#[derive(Debug)]
struct PanicsOnCq0(VerbsEvent);

impl From<VerbsEvent> for PanicsOnCq0 {
    fn from(ev: VerbsEvent) -> Self {
        if let VerbsEvent::Completion { cq: CqId(0), .. } = ev {
            panic!("{}", common::panics::PROVOKED);
        }
        PanicsOnCq0(ev)
    }
}

/// A member whose every serving panics (user code) comes after the others
/// in the next call: the members behind it are served, not held up until
/// it stops panicking.
#[test]
fn a_member_whose_every_serving_panics_does_not_hold_the_others_up() {
    common::panics::quiet_provoked_panics();
    let (poster, mut consumer) = evd::bounded::<PanicsOnCq0>(16).unwrap();
    let channel = SoftChannel::new().unwrap();
    let (a, hca_a) = channel.create_cq(16).unwrap();
    let (b, hca_b) = channel.create_cq(16).unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    assert!(feed.add(a, CqId(0)).is_ok());
    assert!(feed.add(b, CqId(1)).is_ok());
    for i in 0..8 {
        hca_a.push(wc(i)).unwrap();
    }
    hca_b.push(wc(100)).unwrap();
    for call in 1..=2 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed.progress(16)));
        assert!(r.is_err(), "call {call}: CQ 0's conversion panics");
    }
    match consumer.try_dequeue() {
        Ok(PanicsOnCq0(VerbsEvent::Completion { cq: CqId(1), wc })) => assert_eq!(wc.wr_id, 100),
        other => panic!("CQ 1's completion: {other:?}"),
    }
}

/// A shared channel's CQ on a device reports its overrun as a real one
/// does: the driver that registers the channel feed feeds the device's
/// async events into the same EVD (nobody else takes them), and the
/// completion lost arrives there as `CqError` for that CQ, beside the one
/// kept.
#[test]
fn a_shared_channel_cqs_overrun_reaches_the_evd_through_its_device() {
    use common::driver::{none, take_processing};
    use evd_verbs::soft::{PushError, SoftDevice};
    use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind};
    let device = SoftDevice::unheard().unwrap();
    let channel = SoftChannel::new().unwrap();
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(8).unwrap();
    let mut feed = ChannelFeed::new(channel.clone(), poster);
    let (cq, hca) = channel.create_cq_on(1, CqId(3), &device).unwrap();
    feed.add(cq, CqId(3)).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).unwrap();
    driver.register_channel(feed, FeedMode::Event).unwrap();
    assert!(device.take_events().is_none(), "the driver took them");
    hca.push(WorkCompletion::new(1)).unwrap();
    assert_eq!(hca.push(WorkCompletion::new(2)), Err(PushError::Overrun));
    let got = take_processing(&mut driver, &mut consumer, 2, none);
    let lost = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(3)));
    assert!(got.contains(&VerbsEvent::Async(lost)), "{got:?}");
    let kept =
        |e: &VerbsEvent| matches!(e, VerbsEvent::Completion { cq: CqId(3), wc } if wc.wr_id == 1);
    assert!(got.iter().any(kept), "{got:?}");
}

/// The driver's unarmed polls after a wake (event mode) and in the
/// adaptive spin poll only the CQs the channel's events named: a quiet CQ
/// (armed and empty) is not polled however often the busy one wakes the
/// feed, and the busy one's completions all arrive.
#[test]
fn a_wake_polls_the_cqs_it_names_not_every_cq_on_the_channel() {
    for mode in [
        FeedMode::Event,
        FeedMode::Adaptive(evd_verbs::AdaptiveConfig::default()),
    ] {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
        let channel = SoftChannel::new().unwrap();
        let mut feed = ChannelFeed::new(channel.clone(), poster);
        let mut hcas = Vec::new();
        for i in 0..17 {
            let (cq, hca) = channel.create_cq(64).unwrap();
            feed.add(cq, CqId(i)).unwrap();
            hcas.push(hca);
        }
        let running = running_driver();
        let key = running.handle().register_channel(feed, mode).unwrap();
        // Every CQ armed once the first completion is through.
        hcas[0].push(wc(0)).unwrap();
        assert_eq!(take_completions(&mut consumer, 1), [0]);
        let quiet_polls = |running: &evd_verbs::RunningDriver| -> u64 {
            running
                .handle()
                .with_feed(key, |f| f.feeds().skip(1).map(|f| f.stats().polls).sum())
                .unwrap()
        };
        let before = quiet_polls(&running);
        for wr_id in 1..=200 {
            hcas[0].push(wc(wr_id)).unwrap();
            assert_eq!(take_completions(&mut consumer, 1), [wr_id]);
        }
        assert_eq!(quiet_polls(&running), before, "{mode:?}: quiet CQs polled");
        let mut stopped = running.shutdown().unwrap();
        drop(stopped.take(key).unwrap());
        nothing_after(&mut consumer, "after the shutdown");
    }
}

/// Take `n` completion events (under the watchdog), their `wr_id`s.
fn take_completions(consumer: &mut evd::Consumer<VerbsEvent>, n: usize) -> Vec<u64> {
    common::driver::take(consumer, n)
        .into_iter()
        .map(|ev| match ev {
            VerbsEvent::Completion { wc, .. } => wc.wr_id,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// A quiet CQ's completion while another CQ keeps the channel feed busy
/// (its adaptive spin never ends: a producer completes on the busy CQ all
/// along) reaches the EVD: its event is taken at the driver's next
/// collection of readiness, though the spin polls only the busy CQ.
#[test]
fn a_quiet_cqs_completion_during_another_cqs_spin_is_delivered() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    for backend in common::driver::BACKENDS {
        let (poster, mut consumer) = evd::bounded::<VerbsEvent>(256).unwrap();
        let channel = SoftChannel::new().unwrap();
        let mut feed = ChannelFeed::new(channel.clone(), poster);
        let (busy, busy_hca) = channel.create_cq(CQ_DEPTH).unwrap();
        let (quiet, quiet_hca) = channel.create_cq(CQ_DEPTH).unwrap();
        feed.add(busy, CqId(0)).unwrap();
        feed.add(quiet, CqId(1)).unwrap();
        let mode = FeedMode::Adaptive(evd_verbs::AdaptiveConfig::default());
        let mut driver = Driver::new(DriverConfig::default().with_backend(backend)).unwrap();
        let key = driver.register_channel(feed, mode).unwrap();
        let running = driver.spawn().unwrap();
        let (stop, taken) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let producer = {
            let (stop, taken) = (stop.clone(), taken.clone());
            std::thread::spawn(move || {
                let mut wr_id = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if wr_id - taken.load(Ordering::Acquire) < CQ_DEPTH as u64 / 2 {
                        busy_hca.push(wc(wr_id)).unwrap();
                        wr_id += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        };
        // The busy CQ's completions flowing: the feed spins on it.
        let busy_seen = std::cell::Cell::new(0u64);
        let take = |consumer: &mut evd::Consumer<VerbsEvent>| -> Option<u64> {
            match common::driver::take(consumer, 1).remove(0) {
                VerbsEvent::Completion { cq: CqId(0), wc } => {
                    assert_eq!(wc.wr_id, busy_seen.get(), "the busy CQ in order");
                    busy_seen.set(busy_seen.get() + 1);
                    taken.fetch_add(1, Ordering::Release);
                    None
                }
                VerbsEvent::Completion { cq: CqId(1), wc } => Some(wc.wr_id),
                other => panic!("unexpected {other:?}"),
            }
        };
        while busy_seen.get() < 1000 {
            assert_eq!(take(&mut consumer), None);
        }
        quiet_hca.push(wc(77)).unwrap();
        let quiet_got = loop {
            if let Some(wr_id) = take(&mut consumer) {
                break wr_id;
            }
        };
        assert_eq!(quiet_got, 77, "{backend:?}");
        stop.store(true, Ordering::Relaxed);
        producer.join().unwrap();
        let mut stopped = running.shutdown().unwrap();
        let feed = stopped.take(key).unwrap();
        assert_eq!(feed.stats().unknown_events, 0);
        drop(feed);
        while let Ok(ev) = consumer.try_dequeue() {
            assert!(
                matches!(ev, VerbsEvent::Completion { cq: CqId(0), .. }),
                "{ev:?}"
            );
        }
    }
}
