//! The every-source scenario (`scenarios/every_source.rs`) with real
//! connections: the completions of RDMA writes both ways over an rdma_cm
//! connection (the client's CQ in event mode, the server's adaptive), the
//! rdma_cm events that set the connection up (driven from the events the
//! upcalls deliver), and the device's async events (a link toggled down
//! and up).

use crate::cm::qp_for;
use crate::common::{Res, e2s, ensure};
use crate::scenarios::every_source::{Apps, Devices, Event, Log, Traffic, every_source_at_once};
use evd::Poster;
use evd_verbs::ibv::{
    CmChannel, CmConnParams, CmEvents, CmId, Context, IbvAsyncEvents, IbvCq, MemoryRegion,
    ProtectionDomain, QueuePair, SendOp,
};
use evd_verbs::{AsyncEventKind, CmEvent, CmEventKind, CmToken, CqId, Driver, Feed, FeedMode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const WRITES: u64 = 2000; // per side
const WINDOW: u64 = 8; // outstanding writes per QP
const LISTENER: CmToken = CmToken(11);
const CLIENT: CmToken = CmToken(12);
const CLIENT_CQ: CqId = CqId(21);
const SERVER_CQ: CqId = CqId(22);

/// One side of the connection: its QP and its region.
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
}

/// What the connection holds, dropped in this order (fields drop in
/// declaration order): the QPs and regions, then the identifiers.
#[derive(Default)]
struct Rxe {
    sides: Vec<Side>,
    server: Option<CmId>,
    client: Option<CmId>,
    listener: Option<CmId>,
    device: Option<Arc<Context>>,
    channel: Option<CmChannel>,
}

/// A QP in INIT with its CQ and a region, on the identifier's device.
fn verbs_for(id: &CmId, cq: CqId) -> Result<(Side, IbvCq), String> {
    let (qp, cq) = qp_for(id, cq, 64)?;
    let mr = qp.pd().register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    Ok((Side { qp, mr }, cq))
}

impl Devices for Rxe {
    const THREADS: usize = 0;

    type Cm = CmEvents;
    type Async = IbvAsyncEvents;

    fn sources(&mut self) -> Result<(CmEvents, IbvAsyncEvents), String> {
        let (events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
        let device = Context::open(None).map_err(|e| format!("open: {e}"))?;
        let async_events = device.async_events().map_err(e2s)?;
        (self.device, self.channel) = (Some(device), Some(channel));
        Ok((events, async_events))
    }

    /// The CQs come with the connection: `traffic` registers them.
    fn register(&mut self, _: &mut Driver, _: &Poster<Event>) -> Res {
        Ok(())
    }

    fn traffic(&mut self, t: Traffic<'_>) -> Res {
        t.go.wait();
        let next_cm = |want: CmEventKind| -> Result<CmEvent, String> {
            let ev =
                t.cm.recv_timeout(Duration::from_secs(10))
                    .map_err(|_| format!("no {want:?} after 10 s"))?;
            ensure!(ev.kind == want, "expected {want:?}, got {ev:?}");
            Ok(ev)
        };
        let channel = self.channel.as_ref().ok_or("not registered")?;

        // Connect, through events delivered by upcalls.
        let listener = CmId::new(channel, LISTENER).map_err(e2s)?;
        let addr = SocketAddr::from(([10, 0, 0, 1], 7481));
        listener.bind(addr).map_err(|e| format!("bind: {e}"))?;
        listener.listen(2).map_err(|e| format!("listen: {e}"))?;
        let client = CmId::new(channel, CLIENT).map_err(e2s)?;
        client
            .resolve_addr(addr, Duration::from_secs(2))
            .map_err(e2s)?;
        next_cm(CmEventKind::AddrResolved)?;
        client.resolve_route(Duration::from_secs(2)).map_err(e2s)?;
        next_cm(CmEventKind::RouteResolved)?;
        let (mut client_side, client_cq) = verbs_for(&client, CLIENT_CQ)?;
        client
            .connect(&mut client_side.qp, &CmConnParams::default())
            .map_err(|e| format!("connect: {e}"))?;
        let req = next_cm(CmEventKind::ConnectRequest)?;
        let server = channel.take_request(req.id).ok_or("request not parked")?;
        let (mut server_side, server_cq) = verbs_for(&server, SERVER_CQ)?;
        server
            .accept(&mut server_side.qp, &CmConnParams::default())
            .map_err(|e| format!("accept: {e}"))?;
        next_cm(CmEventKind::ConnectResponse)?;
        client
            .establish(&mut client_side.qp)
            .map_err(|e| format!("establish: {e}"))?;
        next_cm(CmEventKind::Established)?;
        t.handle
            .register(
                Feed::new(client_cq, CLIENT_CQ, t.poster.clone()),
                FeedMode::Event,
            )
            .map_err(e2s)?;
        t.handle
            .register(
                Feed::new(server_cq, SERVER_CQ, t.poster.clone()),
                FeedMode::Adaptive(Default::default()),
            )
            .map_err(e2s)?;
        self.sides = vec![client_side, server_side];
        (self.server, self.client, self.listener) = (Some(server), Some(client), Some(listener));

        // RDMA writes both ways, a window at a time: completions on both CQs.
        let cqs = [CLIENT_CQ, SERVER_CQ];
        let mut posted = [0u64; 2];
        while posted.iter().any(|&p| p < WRITES) {
            for (side, cq) in cqs.iter().enumerate() {
                let done = t.shared.log().completions(*cq) as u64;
                let (local, remote) = (&self.sides[side], &self.sides[1 - side]);
                while posted[side] < WRITES && posted[side] < done + WINDOW {
                    let op = SendOp::Write {
                        remote_addr: remote.mr.addr(),
                        rkey: remote.mr.rkey(),
                    };
                    local
                        .qp
                        .post_send(posted[side], op, &local.mr, 0, 64, false)
                        .map_err(|e| format!("post write: {e}"))?;
                    posted[side] += 1;
                }
            }
            thread::yield_now();
        }
        drop(
            t.shared
                .wait_until("every write completed", writes_completed)?,
        );

        // Async events: the link goes down and up again.
        for state in ["down", "up"] {
            let st = std::process::Command::new("/usr/bin/ip")
                .args(["link", "set", "dummy0", state])
                .status()
                .map_err(|e| format!("ip link: {e}"))?;
            ensure!(st.success(), "ip link set dummy0 {state}: {st}");
        }
        Ok(())
    }

    fn delivered(&self, log: &Log) -> bool {
        writes_completed(log) && port_events(log) > 0
    }

    fn check(&self, log: &Log) -> Res {
        for cq in [CLIENT_CQ, SERVER_CQ] {
            ensure!(
                log.per_cq.get(&cq) == Some(&(0..WRITES).collect()),
                "{cq:?}: {} completions, not 0..{WRITES} in order",
                log.completions(cq)
            );
        }
        ensure!(port_events(log) > 0, "no port event");
        Ok(())
    }

    fn finish(&mut self) -> Res {
        let client = self.client.as_ref().ok_or("never connected")?;
        client.disconnect().map_err(|e| format!("disconnect: {e}"))
    }
}

fn writes_completed(log: &Log) -> bool {
    [CLIENT_CQ, SERVER_CQ]
        .iter()
        .all(|&cq| log.completions(cq) as u64 >= WRITES)
}

fn port_events(log: &Log) -> usize {
    log.async_events
        .iter()
        .filter(|a| {
            matches!(
                a.kind,
                AsyncEventKind::PortError | AsyncEventKind::PortActive
            )
        })
        .count()
}

pub fn single_instance_every_source(_: &Arc<ProtectionDomain>) -> Res {
    every_source_at_once(
        Rxe::default(),
        Apps {
            events: 4000,
            follow_up_every: 200,
        },
    )
}
