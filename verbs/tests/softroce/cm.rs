//! rdma_cm on Soft-RoCE: connection setup and teardown between a listener
//! and a client in this process, over the guest's 10.0.0.1 (run.sh gives
//! dummy0 that address), every event read through `ibv::CmEvents`.

use crate::{ensure, Res};
use evd_verbs::ibv::{CmChannel, CmConnParams, CmEvents, CmId, Context, QueuePair};
use evd_verbs::{CmEvent, CmEventKind, CmEventSource, CmToken, CqId};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: CmToken = CmToken(1);
const CLIENT: CmToken = CmToken(2);
const TIMEOUT: Duration = Duration::from_secs(2);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

/// The next event of `events` (10 s limit).
fn next(events: &mut CmEvents) -> Result<CmEvent, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(ev) = events
            .next_event()
            .map_err(|e| format!("rdma_get_cm_event: {e}"))?
        {
            return Ok(ev);
        }
        ensure!(Instant::now() < deadline, "no CM event after 10 s");
        std::thread::yield_now();
    }
}

fn expect(events: &mut CmEvents, kind: CmEventKind, id: CmToken) -> Result<CmEvent, String> {
    let ev = next(events).map_err(|e| format!("waiting for {kind:?} on {id:?}: {e}"))?;
    ensure!(
        ev.kind == kind && (ev.id == id || kind == CmEventKind::ConnectRequest),
        "expected {kind:?} on {id:?}, got {ev:?}"
    );
    Ok(ev)
}

/// A QP (in INIT) with its CQ, on the device `id` is bound to.
fn qp_for(id: &CmId, cq: u32) -> Result<(QueuePair, Arc<Context>), String> {
    let name = id.device_name().ok_or("identifier not bound to a device")?;
    let ctx = Context::open(Some(&name)).map_err(|e| format!("open {name}: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, CqId(cq))
        .map_err(|e| format!("create_cq: {e}"))?;
    let qp = pd
        .create_rc_qp(&cq, &cq, 8)
        .map_err(|e| format!("create_qp: {e}"))?;
    Ok((qp, ctx))
}

/// Listen, connect, accept with private data both ways, establish on both
/// sides, disconnect: every event in order, with its token and data.
pub fn cm_connect_accept_disconnect(_: &Arc<evd_verbs::ibv::ProtectionDomain>) -> Res {
    let (mut events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
    let listener = CmId::new(&channel, LISTENER).map_err(|e| format!("create_id: {e}"))?;
    listener
        .bind(addr(7471))
        .map_err(|e| format!("bind: {e}"))?;
    listener.listen(4).map_err(|e| format!("listen: {e}"))?;
    let client = CmId::new(&channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
    client
        .resolve_addr(addr(7471), TIMEOUT)
        .map_err(|e| format!("resolve_addr: {e}"))?;
    expect(&mut events, CmEventKind::AddrResolved, CLIENT)?;
    client
        .resolve_route(TIMEOUT)
        .map_err(|e| format!("resolve_route: {e}"))?;
    expect(&mut events, CmEventKind::RouteResolved, CLIENT)?;
    let (client_qp, _cctx) = qp_for(&client, 1)?;
    client
        .connect(
            &client_qp,
            &CmConnParams {
                private_data: b"hello",
                ..Default::default()
            },
        )
        .map_err(|e| format!("connect: {e}"))?;
    let req = expect(&mut events, CmEventKind::ConnectRequest, CLIENT)?;
    ensure!(
        req.listener == Some(LISTENER),
        "request from {:?}",
        req.listener
    );
    ensure!(req.id >= CmToken::INCOMING, "request token {:?}", req.id);
    ensure!(
        req.private_data.as_bytes().starts_with(b"hello"),
        "request data {:?}",
        req.private_data
    );
    ensure!(
        req.peer_qp_num == client_qp.qp_num(),
        "request names QP {} not {}",
        req.peer_qp_num,
        client_qp.qp_num()
    );
    let server = channel
        .take_request(req.id)
        .ok_or("request identifier not parked")?;
    ensure!(channel.take_request(req.id).is_none(), "taken twice");
    let (server_qp, _sctx) = qp_for(&server, 2)?;
    server
        .accept(
            &server_qp,
            &CmConnParams {
                private_data: b"welcome",
                ..Default::default()
            },
        )
        .map_err(|e| format!("accept: {e}"))?;
    let resp = expect(&mut events, CmEventKind::ConnectResponse, CLIENT)?;
    ensure!(
        resp.private_data.as_bytes().starts_with(b"welcome"),
        "response data {:?}",
        resp.private_data
    );
    client
        .establish(&client_qp)
        .map_err(|e| format!("establish: {e}"))?;
    expect(&mut events, CmEventKind::Established, req.id)?;
    client
        .disconnect()
        .map_err(|e| format!("disconnect: {e}"))?;
    // The server hears the disconnect request and answers it with its own
    // disconnect (the DREP); only then does the client hear it.
    expect(&mut events, CmEventKind::Disconnected, req.id)?;
    server
        .disconnect()
        .map_err(|e| format!("server disconnect: {e}"))?;
    expect(&mut events, CmEventKind::Disconnected, CLIENT)?;
    server
        .close()
        .map_err(|e| format!("destroy server id: {e}"))?;
    client
        .close()
        .map_err(|e| format!("destroy client id: {e}"))?;
    listener
        .close()
        .map_err(|e| format!("destroy listener: {e}"))?;
    Ok(())
}

/// A rejected request reaches the client as `Rejected` with the
/// rejecter's private data; a connect to a port nobody listens on is
/// rejected (or unreachable) too; both are failures.
pub fn cm_reject_and_unreachable(_: &Arc<evd_verbs::ibv::ProtectionDomain>) -> Res {
    let (mut events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
    let listener = CmId::new(&channel, LISTENER).map_err(|e| format!("create_id: {e}"))?;
    listener
        .bind(addr(7472))
        .map_err(|e| format!("bind: {e}"))?;
    listener.listen(4).map_err(|e| format!("listen: {e}"))?;
    for (port, reject) in [(7472, true), (7473, false)] {
        let client = CmId::new(&channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
        client
            .resolve_addr(addr(port), TIMEOUT)
            .map_err(|e| format!("resolve_addr: {e}"))?;
        expect(&mut events, CmEventKind::AddrResolved, CLIENT)?;
        client
            .resolve_route(TIMEOUT)
            .map_err(|e| format!("resolve_route: {e}"))?;
        expect(&mut events, CmEventKind::RouteResolved, CLIENT)?;
        let (qp, _ctx) = qp_for(&client, 3)?;
        client
            .connect(&qp, &CmConnParams::default())
            .map_err(|e| format!("connect: {e}"))?;
        if reject {
            let req = expect(&mut events, CmEventKind::ConnectRequest, CLIENT)?;
            let server = channel.take_request(req.id).ok_or("not parked")?;
            server
                .reject(b"go away")
                .map_err(|e| format!("reject: {e}"))?;
        }
        let ev = next(&mut events)?;
        ensure!(ev.id == CLIENT, "event for {:?}: {ev:?}", ev.id);
        ensure!(
            matches!(ev.kind, CmEventKind::Rejected | CmEventKind::Unreachable),
            "port {port}: expected a rejection, got {ev:?}"
        );
        ensure!(ev.kind.is_failure(), "{:?} is a failure", ev.kind);
        if reject {
            ensure!(
                ev.kind == CmEventKind::Rejected
                    && ev.private_data.as_bytes().starts_with(b"go away"),
                "reject data: {ev:?}"
            );
        }
        client.close().map_err(|e| format!("destroy: {e}"))?;
    }
    ensure!(channel.pending_requests() == 0, "requests left parked");
    Ok(())
}
