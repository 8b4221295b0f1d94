//! The SingleInstance scenario with real connections: one EVD under
//! SingleInstance upcalls, fed at the same time by real CQ completions and
//! rdma_cm events (the driver's thread), software events from two
//! application threads, and the device's async events (a link toggled down
//! and up). Never two upcalls at once, every event exactly once and in
//! order per source, an event posted by the handler delivered by the same
//! upcall, no upcall after Teardown returns.

use crate::{ensure, Res};
use evd::{Invoke, PostError, Poster};
use evd_verbs::ibv::{
    CmChannel, CmConnParams, CmId, Context, IbvCq, MemoryRegion, ProtectionDomain, QpCaps,
    QueuePair, SendOp,
};
use evd_verbs::{
    AsyncEventKind, AsyncFeed, CmEvent, CmEventKind, CmFeed, CmToken, CqId, Driver, DriverConfig,
    Feed, FeedMode, VerbsEvent,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

const WRITES: u64 = 2000; // per side
const WINDOW: u64 = 8; // outstanding writes per QP
const APP_EVENTS: u64 = 4000; // per application thread
const FOLLOW_UP_EVERY: u64 = 200;
const CAPACITY: usize = 16384;
const LISTENER: CmToken = CmToken(11);
const CLIENT: CmToken = CmToken(12);
const CLIENT_CQ: CqId = CqId(21);
const SERVER_CQ: CqId = CqId(22);

#[derive(Debug)]
enum Event {
    Verbs(VerbsEvent),
    /// Boxed: a connection event (private data inline) is six times a
    /// completion, and connection events are rare; the EVD's slots stay
    /// completion-sized.
    Cm(Box<CmEvent>),
    App {
        thread: u8,
        seq: u64,
    },
    FollowUp {
        thread: ThreadId,
    },
}

impl From<VerbsEvent> for Event {
    fn from(ev: VerbsEvent) -> Self {
        Event::Verbs(ev)
    }
}

impl From<CmEvent> for Event {
    fn from(ev: CmEvent) -> Self {
        Event::Cm(Box::new(ev))
    }
}

#[derive(Default)]
struct Log {
    writes: [Vec<u64>; 2],
    app: [Vec<u64>; 2],
    port_events: usize,
    follow_ups: u64,
    violations: Vec<String>,
}

struct Shared {
    log: Mutex<Log>,
    in_flight: AtomicUsize,
    torn_down: AtomicBool,
    completed: [AtomicU64; 2],
}

fn post(poster: &Poster<Event>, ev: Event) -> Res {
    match poster.post(ev) {
        Ok(()) => Ok(()),
        Err(PostError::Full(_)) => Err(format!("capacity {CAPACITY} is above the events")),
        Err(PostError::Closed(_)) => Err("the consumer lives to the end".into()),
    }
}

fn wait_until(what: &str, done: impl Fn() -> bool) -> Res {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        ensure!(Instant::now() < deadline, "{what}: not after 30 s");
        thread::yield_now();
    }
    Ok(())
}

/// A QP in INIT with its CQ and a region, on the identifier's device.
fn verbs_for(id: &CmId, cq: CqId) -> Result<(QueuePair, IbvCq, MemoryRegion), String> {
    let name = id.device_name().ok_or("identifier not bound")?;
    let ctx = Context::open(Some(&name)).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(64, cq)
        .map_err(|e| format!("create_cq: {e}"))?;
    let qp = pd
        .create_rc_qp(&cq, &cq, &QpCaps::default(), id.port_num())
        .map_err(|e| format!("create_qp: {e}"))?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    Ok((qp, cq, mr))
}

pub fn single_instance_every_source(_: &Arc<ProtectionDomain>) -> Res {
    let (poster, consumer) = evd::bounded::<Event>(CAPACITY).map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        log: Mutex::new(Log::default()),
        in_flight: AtomicUsize::new(0),
        torn_down: AtomicBool::new(false),
        completed: [AtomicU64::new(0), AtomicU64::new(0)],
    });
    let (cm_tx, cm_rx) = mpsc::channel::<CmEvent>();
    let seen = shared.clone();
    let own = poster.clone();
    let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, _more| {
        let overlapping = seen.in_flight.fetch_add(1, Ordering::Relaxed) != 0;
        let after_teardown = seen.torn_down.load(Ordering::Acquire);
        let mut follow_up = false;
        {
            let mut log = seen.log.lock().unwrap();
            if overlapping {
                log.violations.push("two upcalls at once".into());
            }
            if after_teardown {
                log.violations
                    .push("an upcall after Teardown returned".into());
            }
            match ev {
                Ok(Event::Verbs(VerbsEvent::Completion { cq, wc })) => {
                    let side = usize::from(cq == SERVER_CQ);
                    if !wc.status.is_success() {
                        log.violations.push(format!("{cq:?}: {wc:?}"));
                    }
                    log.writes[side].push(wc.wr_id);
                    seen.completed[side].fetch_add(1, Ordering::Release);
                }
                Ok(Event::Verbs(VerbsEvent::Async(a))) => {
                    if matches!(
                        a.kind,
                        AsyncEventKind::PortError | AsyncEventKind::PortActive
                    ) {
                        log.port_events += 1;
                    }
                }
                Ok(Event::Cm(c)) => {
                    // The main thread drives the connection from these.
                    let _ = cm_tx.send(*c);
                }
                Ok(Event::App { thread, seq }) => {
                    log.app[usize::from(thread)].push(seq);
                    follow_up = seq % FOLLOW_UP_EVERY == 0;
                }
                Ok(Event::FollowUp { thread }) => {
                    log.follow_ups += 1;
                    if thread != thread::current().id() {
                        log.violations
                            .push("a follow-up delivered by another upcall".into());
                    }
                }
                Err(o) => log.violations.push(format!("overflow {o:?}")),
            }
        }
        if follow_up
            && own
                .post(Event::FollowUp {
                    thread: thread::current().id(),
                })
                .is_err()
        {
            seen.log
                .lock()
                .unwrap()
                .violations
                .push("follow-up refused".into());
        }
        seen.in_flight.fetch_sub(1, Ordering::Relaxed);
    });

    let (events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
    let device = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| e.to_string())?;
    driver
        .register_cm(CmFeed::new(events, poster.clone()))
        .map_err(|e| e.to_string())?;
    let async_events = device.async_events().map_err(|e| e.to_string())?;
    driver
        .register_async(AsyncFeed::new(async_events, poster.clone()))
        .map_err(|e| e.to_string())?;
    let driver = driver.spawn().map_err(|e| e.to_string())?;
    let next_cm = |want: CmEventKind| -> Result<CmEvent, String> {
        let ev = cm_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| format!("no {want:?} after 10 s"))?;
        ensure!(ev.kind == want, "expected {want:?}, got {ev:?}");
        Ok(ev)
    };

    // The application threads post throughout.
    let go = Arc::new(AtomicBool::new(false));
    let apps: Vec<_> = (0..2u8)
        .map(|t| {
            let (p, go) = (poster.clone(), go.clone());
            thread::spawn(move || -> Res {
                while !go.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                for seq in 0..APP_EVENTS {
                    post(&p, Event::App { thread: t, seq })?;
                }
                Ok(())
            })
        })
        .collect();
    go.store(true, Ordering::Release);

    // Connect, through events delivered by upcalls.
    let listener = CmId::new(&channel, LISTENER).map_err(|e| e.to_string())?;
    let addr = SocketAddr::from(([10, 0, 0, 1], 7481));
    listener.bind(addr).map_err(|e| format!("bind: {e}"))?;
    listener.listen(2).map_err(|e| format!("listen: {e}"))?;
    let client = CmId::new(&channel, CLIENT).map_err(|e| e.to_string())?;
    client
        .resolve_addr(addr, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    next_cm(CmEventKind::AddrResolved)?;
    client
        .resolve_route(Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    next_cm(CmEventKind::RouteResolved)?;
    let (client_qp, client_cq, client_mr) = verbs_for(&client, CLIENT_CQ)?;
    client
        .connect(&client_qp, &CmConnParams::default())
        .map_err(|e| format!("connect: {e}"))?;
    let req = next_cm(CmEventKind::ConnectRequest)?;
    let server = channel.take_request(req.id).ok_or("request not parked")?;
    let (server_qp, server_cq, server_mr) = verbs_for(&server, SERVER_CQ)?;
    server
        .accept(&server_qp, &CmConnParams::default())
        .map_err(|e| format!("accept: {e}"))?;
    next_cm(CmEventKind::ConnectResponse)?;
    client
        .establish(&client_qp)
        .map_err(|e| format!("establish: {e}"))?;
    next_cm(CmEventKind::Established)?;
    let handle = driver.handle();
    handle
        .register(
            Feed::new(client_cq, CLIENT_CQ, poster.clone()),
            FeedMode::Event,
        )
        .map_err(|e| e.to_string())?;
    handle
        .register(
            Feed::new(server_cq, SERVER_CQ, poster.clone()),
            FeedMode::Adaptive(Default::default()),
        )
        .map_err(|e| e.to_string())?;

    // RDMA writes both ways, a window at a time: completions on both CQs.
    let sides = [
        (&client_qp, &client_mr, &server_mr),
        (&server_qp, &server_mr, &client_mr),
    ];
    let mut posted = [0u64; 2];
    while posted.iter().any(|&p| p < WRITES) {
        for (side, (qp, local, remote)) in sides.iter().enumerate() {
            let done = shared.completed[side].load(Ordering::Acquire);
            while posted[side] < WRITES && posted[side] < done + WINDOW {
                let op = SendOp::Write {
                    remote_addr: remote.addr(),
                    rkey: remote.rkey(),
                };
                qp.post_send(posted[side], op, local, 0, 64, false)
                    .map_err(|e| format!("post write: {e}"))?;
                posted[side] += 1;
            }
        }
        thread::yield_now();
    }
    wait_until("every write completed", || {
        shared
            .completed
            .iter()
            .all(|c| c.load(Ordering::Acquire) >= WRITES)
    })?;

    // Async events: the link goes down and up again.
    for state in ["down", "up"] {
        let st = std::process::Command::new("/usr/bin/ip")
            .args(["link", "set", "dummy0", state])
            .status()
            .map_err(|e| format!("ip link: {e}"))?;
        ensure!(st.success(), "ip link set dummy0 {state}: {st}");
    }
    wait_until("a port event", || {
        shared.log.lock().unwrap().port_events > 0
    })?;

    // Teardown while the application threads may still post.
    let mut rest = upcalls.teardown();
    shared.torn_down.store(true, Ordering::Release);
    for a in apps {
        a.join().map_err(|_| "app thread panicked")??;
    }
    let mut log = shared.log.lock().unwrap();
    while let Ok(ev) = rest.try_dequeue() {
        match ev {
            Event::App { thread, seq } => log.app[usize::from(thread)].push(seq),
            Event::FollowUp { .. } => log.follow_ups += 1,
            Event::Verbs(VerbsEvent::Completion { .. }) => log
                .violations
                .push("a completion after all were seen".into()),
            _ => {}
        }
    }
    ensure!(
        log.violations.is_empty(),
        "violations: {:?}",
        log.violations
    );
    for (side, writes) in log.writes.iter().enumerate() {
        ensure!(
            *writes == (0..WRITES).collect::<Vec<_>>(),
            "side {side}: {} completions, not 0..{WRITES} in order",
            writes.len()
        );
    }
    for (t, app) in log.app.iter().enumerate() {
        ensure!(
            *app == (0..APP_EVENTS).collect::<Vec<_>>(),
            "app thread {t}: {} events, not 0..{APP_EVENTS} in order",
            app.len()
        );
    }
    let follow_ups = 2 * APP_EVENTS.div_ceil(FOLLOW_UP_EVERY);
    ensure!(
        log.follow_ups == follow_ups,
        "{} of {follow_ups} follow-ups",
        log.follow_ups
    );
    drop(log);
    client
        .disconnect()
        .map_err(|e| format!("disconnect: {e}"))?;
    drop(driver.shutdown().map_err(|e| e.to_string())?);
    drop((client_qp, server_qp, client_mr, server_mr));
    drop((server, client, listener));
    Ok(())
}
