//! rdma_cm on Soft-RoCE: connection setup and teardown between a listener
//! and a client in this process, over the guest's 10.0.0.1 (run.sh gives
//! dummy0 that address), every event read through `ibv::CmEvents`.

use crate::common::{Res, ensure};
use evd_verbs::ibv::{
    CmChannel, CmConnParams, CmEvents, CmId, Context, IbvCq, MemoryRegion, QpCaps, QueuePair,
    SendOp,
};
use evd_verbs::{
    CmEvent, CmEventKind, CmEventSource, CmToken, CompletionQueue, CqId, WorkCompletion,
};
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

/// The next completion of `cq`, busy-polled (10 s limit).
fn poll_one(cq: &mut IbvCq) -> Result<WorkCompletion, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut wc).map_err(|e| format!("poll: {e:?}"))? == 1 {
            return Ok(wc[0]);
        }
        ensure!(Instant::now() < deadline, "no completion after 10 s");
    }
}

/// Whether `ev`'s private data starts with `data` (the transport may pad
/// it).
fn carries(ev: &CmEvent, data: &[u8]) -> Res {
    ensure!(
        ev.private_data.as_bytes().starts_with(data),
        "{:?}: private data {:?}",
        ev.kind,
        ev.private_data
    );
    Ok(())
}

/// Resolve the address, then the route, of the client `id` to `to`.
fn resolve(id: &CmId, to: SocketAddr, events: &mut CmEvents) -> Res {
    id.resolve_addr(to, TIMEOUT)
        .map_err(|e| format!("resolve_addr: {e}"))?;
    expect(events, CmEventKind::AddrResolved, CLIENT)?;
    id.resolve_route(TIMEOUT)
        .map_err(|e| format!("resolve_route: {e}"))?;
    expect(events, CmEventKind::RouteResolved, CLIENT)?;
    Ok(())
}

/// A client identifier on `channel`, resolved to `addr(port)`, connecting
/// a QP of its own (its CQ named `cq`) with the default parameters.
fn connecting(
    channel: &CmChannel,
    port: u16,
    events: &mut CmEvents,
    cq: u32,
) -> Result<(CmId, QueuePair, IbvCq), String> {
    let client = CmId::new(channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
    resolve(&client, addr(port), events)?;
    let (mut qp, cq) = qp_for(&client, CqId(cq), 16)?;
    client
        .connect(&mut qp, &CmConnParams::default())
        .map_err(|e| format!("connect: {e}"))?;
    Ok((client, qp, cq))
}

/// A listener on `addr(port)`, its channel and the channel's events.
fn listening(port: u16, backlog: i32) -> Result<(CmEvents, CmChannel, CmId), String> {
    let (events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
    let listener = CmId::new(&channel, LISTENER).map_err(|e| format!("create_id: {e}"))?;
    listener
        .bind(addr(port))
        .map_err(|e| format!("bind: {e}"))?;
    listener
        .listen(backlog)
        .map_err(|e| format!("listen: {e}"))?;
    Ok((events, channel, listener))
}

/// A QP (in INIT) with its CQ of `depth`, on the device `id` is bound to.
pub(crate) fn qp_for(id: &CmId, cq: CqId, depth: i32) -> Result<(QueuePair, IbvCq), String> {
    let name = id.device_name().ok_or("identifier not bound to a device")?;
    let ctx = Context::open(Some(&name)).map_err(|e| format!("open {name}: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(depth, cq)
        .map_err(|e| format!("create_cq: {e}"))?;
    let qp = pd
        .create_rc_qp(&cq, &cq, &QpCaps::default(), id.port_num())
        .map_err(|e| format!("create_qp: {e}"))?;
    Ok((qp, cq))
}

/// [`qp_for`] with a 64-byte region and a receive posted into it. The
/// receive is posted in INIT, before the connection exists, as an
/// application does so that the first message finds one.
fn receiving_qp_for(id: &CmId, cq: u32) -> Result<(QueuePair, IbvCq, MemoryRegion), String> {
    let (qp, cq) = qp_for(id, CqId(cq), 16)?;
    let dst = qp.pd().register(64).map_err(|e| format!("reg: {e}"))?;
    qp.post_recv(7, &dst, 0, 64)
        .map_err(|e| format!("post_recv: {e}"))?;
    Ok((qp, cq, dst))
}

/// The RDMA reads and atomics `qp` may issue and accept in flight
/// (`max_rd_atomic`, `max_dest_rd_atomic`), as the device holds them.
fn rd_atomic(qp: &QueuePair) -> Result<(u8, u8), String> {
    use evd_verbs::ibv::ffi;
    // SAFETY: plain C structs of integers and pointers, for which zero is
    // a valid value; the call overwrites what the mask asks for.
    let (mut attr, mut init): (ffi::ibv_qp_attr, ffi::ibv_qp_init_attr) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    let mask = ffi::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0
        | ffi::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0;
    // SAFETY: a live QP and live out-parameters.
    let r = unsafe { ffi::ibv_query_qp(qp.as_ptr(), &mut attr, mask as i32, &mut init) };
    ensure!(
        r == 0,
        "ibv_query_qp: {}",
        std::io::Error::from_raw_os_error(r)
    );
    Ok((attr.max_rd_atomic, attr.max_dest_rd_atomic))
}

/// Connection parameters carrying `data`.
fn with_data(private_data: &[u8]) -> CmConnParams<'_> {
    let mut params = CmConnParams::default();
    params.private_data = private_data;
    params
}

/// Listen, connect, accept with private data both ways, establish on both
/// sides, disconnect: every event in order, with its token and data.
pub fn cm_connect_accept_disconnect(_: &Arc<evd_verbs::ibv::ProtectionDomain>) -> Res {
    let (mut events, channel, listener) = listening(7471, 4)?;
    let client = CmId::new(&channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
    resolve(&client, addr(7471), &mut events)?;
    let (mut client_qp, mut client_cq, client_dst) = receiving_qp_for(&client, 1)?;
    client
        .connect(&mut client_qp, &with_data(b"hello"))
        .map_err(|e| format!("connect: {e}"))?;
    let req = expect(&mut events, CmEventKind::ConnectRequest, CLIENT)?;
    ensure!(
        req.listener == Some(LISTENER),
        "request from {:?}",
        req.listener
    );
    ensure!(req.id >= CmToken::INCOMING, "request token {:?}", req.id);
    carries(&req, b"hello")?;
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
    let (mut server_qp, mut server_cq, server_dst) = receiving_qp_for(&server, 2)?;
    // Read and atomic depths other than the client's (1 and 1, the
    // default): the server's QP must hold to what its reply says. (Powers
    // of two: rxe rounds a depth up to one.)
    let mut accepted = with_data(b"welcome");
    (accepted.responder_resources, accepted.initiator_depth) = (2, 4);
    server
        .accept(&mut server_qp, &accepted)
        .map_err(|e| format!("accept: {e}"))?;
    let depths = rd_atomic(&server_qp)?;
    ensure!(
        depths == (4, 2),
        "server QP (issues, accepts) {depths:?}, not (4, 2)"
    );
    let resp = expect(&mut events, CmEventKind::ConnectResponse, CLIENT)?;
    carries(&resp, b"welcome")?;
    client
        .establish(&mut client_qp)
        .map_err(|e| format!("establish: {e}"))?;
    // A second establish is refused and leaves the live QP alone.
    let again = client.establish(&mut client_qp);
    ensure!(
        again
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidInput),
        "a second establish: {again:?}"
    );
    let state = client_qp.query_state().map_err(|e| format!("query: {e}"))?;
    ensure!(
        state == evd_verbs::ibv::QpState::Rts,
        "the QP after a second establish: {state:?}"
    );
    expect(&mut events, CmEventKind::Established, req.id)?;
    // The reply's depths reached the client's QP, mirrored.
    let depths = rd_atomic(&client_qp)?;
    ensure!(
        depths == (2, 4),
        "client QP (issues, accepts) {depths:?}, not (2, 4)"
    );
    // Data flows both ways over the connection librdmacm set up.
    for (from, to, tag) in [(0, 1, 0x5au8), (1, 0, 0xa5)] {
        let qps = [&client_qp, &server_qp];
        let from_qp = qps[from];
        let dst = [&client_dst, &server_dst][to];
        let mut src = from_qp.pd().register(64).map_err(|e| format!("reg: {e}"))?;
        crate::put(&mut src, 0, &[tag; 32]);
        from_qp
            .post_send(8, SendOp::Send, &src, 0, 32, false)
            .map_err(|e| format!("post_send: {e}"))?;
        let cqs = [&mut client_cq, &mut server_cq];
        let [c, s] = cqs;
        let (from_cq, to_cq) = if from == 0 { (c, s) } else { (s, c) };
        let got = poll_one(to_cq)?;
        ensure!(got.status.is_success(), "receive {tag:#x}: {got:?}");
        let sent = poll_one(from_cq)?;
        ensure!(sent.status.is_success(), "send {tag:#x}: {sent:?}");
        ensure!(
            crate::bytes(dst, 0, 32).iter().all(|&b| b == tag),
            "payload {tag:#x}"
        );
    }
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
/// rejected (or unreachable) too; an address with no route does not
/// resolve (an error or `AddrError`, with a status); all are failures.
pub fn cm_reject_and_unreachable(_: &Arc<evd_verbs::ibv::ProtectionDomain>) -> Res {
    let (mut events, channel, _listener) = listening(7472, 4)?;
    for (port, reject) in [(7472, true), (7473, false)] {
        let (client, _qp, _cq) = connecting(&channel, port, &mut events, 3)?;
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
    // An address with no route to it (TEST-NET-1; the guest has no default
    // route): reported at once by the call, or as an `AddrError` event.
    let lost = CmId::new(&channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
    // A token names one identifier: free again once the clients above were
    // closed, the new one starts unbound (their bindings forgotten), and a
    // second identifier with it is refused while this one lives.
    ensure!(
        lost.device_name().is_none() && lost.port_num() == 0,
        "a reused token starts unbound: {:?}",
        lost.device_name()
    );
    match CmId::new(&channel, CLIENT) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => return Err(format!("a token in use: {other:?}")),
    }
    match lost.resolve_addr(
        SocketAddr::from(([192, 0, 2, 1], 7474)),
        Duration::from_millis(500),
    ) {
        Err(e) => ensure!(
            e.raw_os_error() == Some(libc::ENETUNREACH),
            "resolving an unroutable address: {e}"
        ),
        Ok(()) => {
            let ev = next(&mut events)?;
            ensure!(
                ev.id == CLIENT && ev.kind == CmEventKind::AddrError,
                "an unroutable address: expected AddrError, got {ev:?}"
            );
            ensure!(ev.kind.is_failure() && ev.status != 0, "{ev:?}");
        }
    }
    lost.close().map_err(|e| format!("destroy: {e}"))?;
    Ok(())
}

/// What librdmacm would take before an identifier has a device, or while
/// its address resolves (a route, a connect or an accept before its
/// `AddrResolved` was read: librdmacm reads the device unchecked, and
/// writes the addresses when it gets the event) is refused with
/// `InvalidInput`; and requests on two channels that
/// feed one consumer carry distinct tokens, each taken by its token or
/// swept up with the channel's leftovers.
pub fn cm_calls_before_the_device_and_tokens_of_two_channels(
    pd: &Arc<evd_verbs::ibv::ProtectionDomain>,
) -> Res {
    // Refused by the crate, before any call: librdmacm's and the kernel's
    // refusals carry an errno.
    let refused = |r: std::io::Result<()>, what: &str| match r {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput && e.raw_os_error().is_none() => {
            Ok(())
        }
        other => Err(format!("{what}: {other:?}, not refused")),
    };
    let (mut events, channel) = CmChannel::new().map_err(|e| format!("channel: {e}"))?;
    let client = CmId::new(&channel, CLIENT).map_err(|e| format!("create_id: {e}"))?;
    refused(client.resolve_route(TIMEOUT), "a route before an address")?;
    refused(client.disconnect(), "a disconnect before an address")?;
    client
        .resolve_addr(addr(7475), TIMEOUT)
        .map_err(|e| format!("resolve_addr: {e}"))?;
    refused(client.resolve_route(TIMEOUT), "a route before AddrResolved")?;
    let cq = pd
        .context()
        .create_cq(16, CqId(5))
        .map_err(|e| format!("create_cq: {e}"))?;
    let mut qp = pd
        .create_rc_qp(&cq, &cq, &QpCaps::default(), 1)
        .map_err(|e| format!("create_qp: {e}"))?;
    refused(
        client.connect(&mut qp, &CmConnParams::default()),
        "a connect before AddrResolved",
    )?;
    refused(
        client.accept(&mut qp, &CmConnParams::default()),
        "an accept on no request, its address resolving",
    )?;
    expect(&mut events, CmEventKind::AddrResolved, CLIENT)?;
    client
        .resolve_route(TIMEOUT)
        .map_err(|e| format!("resolve_route once resolved: {e}"))?;
    expect(&mut events, CmEventKind::RouteResolved, CLIENT)?;
    client.close().map_err(|e| format!("destroy: {e}"))?;

    // Bound to the device's address, it has a device at once; but while
    // its address resolves, librdmacm writes its addresses on the thread
    // that gets the event: a route is refused until that event came.
    const BOUND: CmToken = CmToken(3);
    let bound = CmId::new(&channel, BOUND).map_err(|e| format!("create_id: {e}"))?;
    bound.bind(addr(0)).map_err(|e| format!("bind: {e}"))?;
    ensure!(bound.device_name().is_some(), "bound to the device");
    bound
        .resolve_addr(addr(7478), TIMEOUT)
        .map_err(|e| format!("resolve_addr: {e}"))?;
    refused(
        bound.resolve_route(TIMEOUT),
        "a route while the address resolves",
    )?;
    // Only the resolution that set the mark ends it: a second is refused
    // (the kernel would refuse it too, after overwriting the first's
    // destination), and a disconnect would read the device being set.
    refused(
        bound.resolve_addr(addr(7478), TIMEOUT),
        "a second resolution while the first is in flight",
    )?;
    refused(
        bound.disconnect(),
        "a disconnect while the address resolves",
    )?;
    expect(&mut events, CmEventKind::AddrResolved, BOUND)?;
    // Not a request's identifier: nothing to accept (its INIT attributes
    // would strip the QP's remote access before the kernel refused).
    refused(
        bound.accept(&mut qp, &CmConnParams::default()),
        "an accept on no request, bound and resolved",
    )?;
    bound
        .resolve_route(TIMEOUT)
        .map_err(|e| format!("resolve_route once resolved: {e}"))?;
    expect(&mut events, CmEventKind::RouteResolved, BOUND)?;
    bound.close().map_err(|e| format!("destroy: {e}"))?;

    // A listener on each of two channels, a request to each: their tokens
    // differ, or a consumer fed by both could not tell the connections
    // apart (nor take a request from the right channel).
    let mut tokens = Vec::new();
    for port in [7476, 7477] {
        let (mut listener_events, listener_channel, _listener) = listening(port, 4)?;
        let (client, _qp, _cq) = connecting(&channel, port, &mut events, 6)?;
        let req = expect(&mut listener_events, CmEventKind::ConnectRequest, CLIENT)?;
        tokens.push(req.id);
        // The second as a leftover a server sweeps up.
        let server = if port == 7476 {
            listener_channel.take_request(req.id).ok_or("not parked")?
        } else {
            let mut all = listener_channel.take_all_requests();
            ensure!(
                all.len() == 1 && all[0].0 == req.id,
                "leftovers: {:?}, not the request {:?}",
                all.iter().map(|(t, _)| t).collect::<Vec<_>>(),
                req.id
            );
            all.pop().expect("one").1
        };
        ensure!(listener_channel.pending_requests() == 0, "still parked");
        server.reject(b"").map_err(|e| format!("reject: {e}"))?;
        expect(&mut events, CmEventKind::Rejected, CLIENT)?;
        client.close().map_err(|e| format!("destroy: {e}"))?;
    }
    ensure!(
        tokens[0] != tokens[1],
        "requests on two channels share the token {:?}",
        tokens[0]
    );
    Ok(())
}

/// An accept the kernel refuses after the QP left INIT (private data over
/// the 196 bytes a reply carries over RoCE) leaves the QP in ERROR, as
/// librdmacm leaves its own, not ready to receive from a peer the
/// connection never reached. (The kernel refuses a reject after that too:
/// destroying the request's identifier answers the client.)
pub fn cm_accept_refused_leaves_the_qp_in_error(_: &Arc<evd_verbs::ibv::ProtectionDomain>) -> Res {
    use evd_verbs::ibv::QpState;
    let (mut events, channel, _listener) = listening(7479, 4)?;
    let (client, _client_qp, _client_cq) = connecting(&channel, 7479, &mut events, 7)?;
    let req = expect(&mut events, CmEventKind::ConnectRequest, CLIENT)?;
    let server = channel.take_request(req.id).ok_or("not parked")?;
    let (mut server_qp, _server_cq) = qp_for(&server, CqId(8), 16)?;
    let too_long = [7u8; 197];
    let r = server.accept(&mut server_qp, &with_data(&too_long));
    ensure!(
        r.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL)),
        "an accept with 197 bytes of private data: {r:?}"
    );
    let state = server_qp.query_state().map_err(|e| format!("query: {e}"))?;
    ensure!(
        state == QpState::Error,
        "the QP after the refused accept: {state:?}"
    );
    server
        .close()
        .map_err(|e| format!("destroy server id: {e}"))?;
    let ev = next(&mut events)?;
    ensure!(
        ev.id == CLIENT && ev.kind.is_failure(),
        "the client after the request's identifier went: {ev:?}"
    );
    client.close().map_err(|e| format!("destroy: {e}"))?;
    Ok(())
}

/// A listener hears its device go away: the guest's script removes rxe0
/// once this prints "listening"; the listener gets `DeviceRemoval`, and
/// destroying it (and the channel) lets the removal finish.
pub fn device_removal() -> Res {
    let (mut events, channel, listener) = listening(7490, 1)?;
    ensure!(listener.device_name().is_some(), "bound to no device");
    println!("device-removal: listening");
    let deadline = Instant::now() + Duration::from_secs(60);
    let ev = loop {
        if let Some(ev) = events
            .next_event()
            .map_err(|e| format!("rdma_get_cm_event: {e}"))?
        {
            break ev;
        }
        ensure!(Instant::now() < deadline, "no event in 60 s");
        std::thread::yield_now();
    };
    ensure!(
        ev.kind == CmEventKind::DeviceRemoval && ev.id == LISTENER && ev.kind.is_failure(),
        "expected DeviceRemoval on the listener, got {ev:?}"
    );
    listener.close().map_err(|e| format!("destroy: {e}"))?;
    drop((events, channel));
    Ok(())
}
