//! RC ping-pong between two processes connected through rdma_cm, every
//! event (connection events and completions) through one EVD (feature
//! `ibverbs`; needs an RDMA device).
//!
//! ```text
//! # on host A (10.0.0.1):
//! cargo run --release -p evd-verbs --features ibverbs --example cm_pingpong -- server --addr 10.0.0.1
//! # on host B:
//! cargo run --release -p evd-verbs --features ibverbs --example cm_pingpong -- client --addr 10.0.0.1 --iters 10000
//! ```
//!
//! One EVD of [`Event`] per process is fed by a [`Driver`] (io_uring, or epoll
//! where it is refused) on its own thread: a [`CmFeed`] delivers the connection
//! manager's events and, once the connection exists, a completion [`Feed`] its
//! CQ's completions (`--mode event` or `adaptive`); with `--mode busy` the
//! application polls the completion feed itself. The client sends `--size`
//! bytes, the server echoes them, and the client prints a latency histogram
//! (p50, p99, p99.9) and the throughput.

use clap::{Parser, ValueEnum};
use evd::{Consumer, TryDequeueError, WaitError};
use evd_verbs::ibv::{
    CmChannel, CmConnParams, CmId, Context, MemoryRegion, QpCaps, QueuePair, SendOp,
};
use evd_verbs::{
    AdaptiveConfig, CmEvent, CmEventKind, CmFeed, CmToken, CqId, Driver, DriverConfig, Feed,
    FeedMode, RunningDriver, VerbsEvent, WcOpcode, WorkCompletion,
};
use hdrhistogram::Histogram;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Everything the application hears, in one EVD.
#[derive(Debug)]
enum Event {
    Verbs(VerbsEvent),
    /// Boxed: a connection event (private data inline) is six times a
    /// completion, and connection events are rare; the EVD's slots stay
    /// completion-sized.
    Cm(Box<CmEvent>),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    Server,
    Client,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Event,
    Adaptive,
    Busy,
}

#[derive(Parser, Debug, Clone)]
#[command(about = "RC ping-pong over rdma_cm, every event through one EVD")]
struct Args {
    /// Listen (server) or connect (client).
    role: Role,
    /// The RDMA device to use; the one the address resolves to if omitted
    /// (given, it must be that one).
    #[arg(long)]
    device: Option<String>,
    /// The server's IP address (an address of an RDMA device's netdev).
    #[arg(long)]
    addr: IpAddr,
    /// The server's rdma_cm port.
    #[arg(long, default_value_t = 7471)]
    port: u16,
    /// Message size in bytes (the client's; it tells the server in its
    /// connect request).
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// Round trips (client).
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// How completions reach the EVD.
    #[arg(long, value_enum, default_value_t = Mode::Event)]
    mode: Mode,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const LISTENER: CmToken = CmToken(1);
const ACTIVE: CmToken = CmToken(2);
const CQ: CqId = CqId(1);
const RECVS: u64 = 16;
const STALL: Duration = Duration::from_secs(10);

/// The next event, waiting on the EVD (a long silence is an error).
fn next(
    evd: &mut Consumer<Event>,
    busy: Option<&mut Feed<evd_verbs::ibv::IbvCq, Event>>,
) -> Res<Event> {
    let deadline = Instant::now() + STALL;
    let mut busy = busy;
    loop {
        match evd.try_dequeue() {
            Ok(ev) => return Ok(ev),
            Err(TryDequeueError::Empty) => {}
            // Nothing here posts lossily, and the feeds outlive this loop.
            Err(e) => return Err(format!("dequeue: {e}").into()),
        }
        match busy.as_deref_mut() {
            Some(feed) => {
                feed.progress(64);
            }
            None => match evd.wait(1, Some(Duration::from_millis(100))) {
                Ok(_) | Err(WaitError::Timeout { .. }) => {}
                Err(e) => return Err(format!("wait: {e}").into()),
            },
        }
        if Instant::now() > deadline {
            return Err("no event for 10 s".into());
        }
    }
}

/// Wait for a connection event of `kind`; completions are not expected yet.
fn cm_event(evd: &mut Consumer<Event>, kind: CmEventKind) -> Res<CmEvent> {
    match next(evd, None)? {
        Event::Cm(ev) if ev.kind == kind => Ok(*ev),
        other => Err(format!("waiting for {kind:?}, got {other:?}").into()),
    }
}

/// What either role works with: the EVD everything lands in, and the
/// connection manager's channel, served by the driver.
struct Conn {
    evd: Consumer<Event>,
    poster: evd::Poster<Event>,
    channel: CmChannel,
    driver: RunningDriver,
}

/// The verbs objects of one side of the connection.
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    feed: Option<Feed<evd_verbs::ibv::IbvCq, Event>>,
}

fn side(id: &CmId, args: &Args, poster: &evd::Poster<Event>, driver: &RunningDriver) -> Res<Side> {
    let name = id.device_name().ok_or("the identifier has no device")?;
    if let Some(want) = &args.device {
        if *want != name {
            return Err(format!("{} is on {name}, not {want}", args.addr).into());
        }
    }
    let ctx = Context::open(Some(&name))?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4 * RECVS as i32, CQ)?;
    let mut caps = QpCaps::default();
    caps.max_send_wr = 2 * RECVS as u32;
    caps.max_recv_wr = 2 * RECVS as u32;
    let qp = pd.create_rc_qp(&cq, &cq, &caps, id.port_num())?;
    let mr = pd.register(args.size.max(1) * (RECVS as usize + 1))?;
    let feed = Feed::new(cq, CQ, poster.clone());
    let feed = match args.mode {
        Mode::Busy => Some(feed),
        Mode::Event => {
            driver.handle().register(feed, FeedMode::Event)?;
            None
        }
        Mode::Adaptive => {
            driver
                .handle()
                .register(feed, FeedMode::Adaptive(AdaptiveConfig::default()))?;
            None
        }
    };
    let s = Side { qp, mr, feed };
    for i in 0..RECVS {
        s.post_recv(i, args.size)?;
    }
    Ok(s)
}

impl Side {
    /// Receive buffer `i` is slot `i + 1`; slot 0 is the send buffer.
    fn post_recv(&self, i: u64, size: usize) -> Res<()> {
        Ok(self
            .qp
            .post_recv(i, &self.mr, (i as usize + 1) * size, size)?)
    }

    fn send(&self, wr_id: u64, size: usize) -> Res<()> {
        Ok(self
            .qp
            .post_send(wr_id, SendOp::Send, &self.mr, 0, size, false)?)
    }

    /// The next completion, successful, skipping connection events that
    /// are not a disconnect.
    fn completion(&mut self, evd: &mut Consumer<Event>) -> Res<Option<WorkCompletion>> {
        loop {
            match next(evd, self.feed.as_mut())? {
                Event::Verbs(VerbsEvent::Completion { wc, .. }) if wc.status.is_success() => {
                    return Ok(Some(wc));
                }
                Event::Verbs(other) => return Err(format!("verbs event {other:?}").into()),
                Event::Cm(ev) if ev.kind == CmEventKind::Disconnected => return Ok(None),
                Event::Cm(ev) => println!("connection event {:?} on {:?}", ev.kind, ev.id),
            }
        }
    }
}

fn server(args: &Args, c: &mut Conn) -> Res<()> {
    let listener = CmId::new(&c.channel, LISTENER)?;
    listener.bind(SocketAddr::new(args.addr, args.port))?;
    listener.listen(1)?;
    println!("server: listening on {}:{}", args.addr, args.port);
    // However long the client takes to start (the silence limit counts from
    // the request on).
    let req = match c.evd.dequeue() {
        Ok(Event::Cm(ev)) if ev.kind == CmEventKind::ConnectRequest => *ev,
        Ok(other) => return Err(format!("waiting for a connect request, got {other:?}").into()),
        Err(e) => return Err(format!("dequeue: {e}").into()),
    };
    let id = c
        .channel
        .take_request(req.id)
        .ok_or("the request's identifier is gone")?;
    // The client's connect request names its message size.
    let size = match <[u8; 4]>::try_from(req.private_data.as_bytes().get(..4).unwrap_or(&[])) {
        Ok(b) => u32::from_le_bytes(b) as usize,
        Err(_) => return Err("the connect request carries no message size".into()),
    };
    let args = &Args {
        size,
        ..args.clone()
    };
    let mut s = side(&id, args, &c.poster, &c.driver)?;
    id.accept(&mut s.qp, &CmConnParams::default())?;
    // The first message may complete before `Established` arrives: both
    // come through the EVD, and the loop takes them in either order.
    println!(
        "server: accepted ({:?} mode), echoing {size}-byte messages",
        args.mode
    );
    let mut echoed = 0u64;
    let mut message = vec![0u8; args.size];
    // Echo each message from the send buffer; the receive is reposted at once.
    while let Some(wc) = s.completion(&mut c.evd)? {
        match wc.opcode {
            WcOpcode::RECV => {
                let (size, at) = (args.size, (wc.wr_id as usize + 1) * args.size);
                // Copied, not sliced: the other receives' buffers are the
                // device's while they are posted.
                s.mr.read(at, &mut message)?;
                s.mr.write(0, &message)?;
                s.post_recv(wc.wr_id, size)?;
                s.send(echoed, size)?;
                echoed += 1;
            }
            WcOpcode::SEND => {}
            other => return Err(format!("unexpected {other:?}").into()),
        }
    }
    id.disconnect()?;
    s.qp.set_error()?;
    println!("server: peer disconnected after {echoed} messages");
    Ok(())
}

fn client(args: &Args, c: &mut Conn) -> Res<()> {
    let id = CmId::new(&c.channel, ACTIVE)?;
    id.resolve_addr(
        SocketAddr::new(args.addr, args.port),
        Duration::from_secs(2),
    )?;
    cm_event(&mut c.evd, CmEventKind::AddrResolved)?;
    id.resolve_route(Duration::from_secs(2))?;
    cm_event(&mut c.evd, CmEventKind::RouteResolved)?;
    let mut s = side(&id, args, &c.poster, &c.driver)?;
    let size = (args.size as u32).to_le_bytes();
    let mut params = CmConnParams::default();
    params.private_data = &size;
    id.connect(&mut s.qp, &params)?;
    match next(&mut c.evd, None)? {
        Event::Cm(ev) if ev.kind == CmEventKind::ConnectResponse => id.establish(&mut s.qp)?,
        Event::Cm(ev) => {
            return Err(format!("connect failed: {:?} (status {})", ev.kind, ev.status).into());
        }
        other => return Err(format!("waiting for the connection, got {other:?}").into()),
    }
    let mut hist = Histogram::<u64>::new(3)?;
    let start = Instant::now();
    for i in 0..args.iters {
        let seq = i.to_le_bytes();
        let n = seq.len().min(args.size);
        s.mr.write(0, &seq[..n])?;
        let sent = Instant::now();
        s.send(i, args.size)?;
        // The echo's receive completes after our send's completion, or
        // (the completions race) before it: wait for the receive.
        loop {
            let wc = s.completion(&mut c.evd)?.ok_or("server disconnected")?;
            if wc.opcode != WcOpcode::RECV {
                continue;
            }
            hist.record(sent.elapsed().as_nanos() as u64)?;
            let at = (wc.wr_id as usize + 1) * args.size;
            let mut echo = [0u8; 8];
            s.mr.read(at, &mut echo[..n])?;
            if echo[..n] != seq[..n] {
                return Err(format!("echo {i} corrupted").into());
            }
            s.post_recv(wc.wr_id, args.size)?;
            break;
        }
    }
    let elapsed = start.elapsed();
    id.disconnect()?;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!(
        "client: {} round trips of {} bytes ({:?} mode) in {elapsed:.2?}: {:.0} round trips/s, {:.2} MB/s each way",
        args.iters,
        args.size,
        args.mode,
        args.iters as f64 / elapsed.as_secs_f64(),
        (args.iters * args.size as u64) as f64 / elapsed.as_secs_f64() / 1e6,
    );
    println!(
        "client: latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
        us(0.5),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1e3
    );
    s.qp.set_error()?;
    Ok(())
}

fn main() -> Res<()> {
    let args = Args::parse();
    if args.size == 0 {
        return Err("--size must be at least 1".into());
    }
    let (poster, evd) = evd::bounded::<Event>(256)?;
    let (events, channel) = CmChannel::new()?;
    let mut driver = Driver::new(DriverConfig::default())?;
    driver.register_cm(CmFeed::new(events, poster.clone()))?;
    let driver = driver.spawn()?;
    let mut c = Conn {
        evd,
        poster,
        channel,
        driver,
    };
    let result = match args.role {
        Role::Server => server(&args, &mut c),
        Role::Client => client(&args, &mut c),
    };
    c.driver.shutdown()?;
    result
}
