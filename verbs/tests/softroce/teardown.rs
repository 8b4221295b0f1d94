//! Every object closed explicitly, children first, with nothing failing
//! in a Drop.

use crate::common::{Res, e2s, ensure};
use crate::{GID_INDEX, PORT, latency, room_for};
use evd_verbs::ibv::{
    ConnectParams, Context, CqConfig, IbvCq, MemoryRegion, ProtectionDomain, QueuePair, SendOp,
};
use evd_verbs::{
    CloseError, CompletionQueue, CqId, SharedChannel, WorkCompletion, teardown_failures,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every object closed explicitly, children first (QP, MR, CQ, PD,
/// context), on a context of its own: each close is Ok, the shared ones
/// refuse while a child holds them, and no destroy fails in a Drop. The CQ
/// is closed holding a channel event not yet acknowledged, which its close
/// must acknowledge (else ibv_destroy_cq waits for it forever).
pub(crate) fn explicit_teardown(_shared: &Arc<ProtectionDomain>) -> Res {
    let failures = teardown_failures();
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    let mut cq = ctx
        .create_cq(16, CqId(11))
        .map_err(|e| format!("create_cq: {e}"))?;
    let qp = loopback_qp(&pd, &cq, 77)?;

    // A loopback send and its receive, with the CQ armed: one channel event.
    send_to_itself(&mut cq, &qp, &mr)?;
    let channel = cq.channel_fd().expect("a channel");
    while !cq.get_event().map_err(|e| format!("get_event: {e}"))? {
        // Wait on the channel fd itself; the timeout is a watchdog.
        ensure!(
            latency::wait_fd(channel, 10_000),
            "no channel event after 10 s"
        );
    }
    poll_both(&mut cq)?;

    // The QP holds the CQ and the PD, the PD the context.
    let cq = match cq.close() {
        Err(CloseError::InUse { handle, .. }) => handle,
        other => return Err(format!("close of a CQ a QP uses: {other:?}")),
    };
    let ctx = match ctx.close() {
        Err(CloseError::InUse { handle, .. }) => handle,
        other => return Err(format!("close of a context a PD uses: {other:?}")),
    };

    qp.close().map_err(|e| format!("qp: {e}"))?;
    ensure!(
        mr.close().map_err(|e| format!("mr: {e}"))?.is_some(),
        "an owned region gave no buffer back"
    );
    cq.close().map_err(|e| format!("cq: {e}"))?;
    pd.close().map_err(|e| format!("pd: {e}"))?;
    ctx.close().map_err(|e| format!("context: {e}"))?;
    ensure!(
        teardown_failures() == failures,
        "{} destroys failed in Drop",
        teardown_failures() - failures
    );
    Ok(())
}

/// A CQ on a shared completion channel whose event was got through the
/// channel and not acknowledged: its close acknowledges it (the channel
/// counts what it got for each CQ), which `ibv_destroy_cq` would wait for
/// for ever; an `ack_unknown` of that event after the close is skipped (it
/// would acknowledge a freed CQ), and a CQ made next on the channel (at the
/// same address, maybe) closes as cleanly. The closes run on a thread of
/// their own, so that a hang fails this case instead of the run.
pub(crate) fn a_shared_channel_cq_acks_a_dropped_event_at_close(
    _shared: &Arc<ProtectionDomain>,
) -> Res {
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    let mut channel = ctx
        .create_channel()
        .map_err(|e| format!("create_channel: {e}"))?;
    let mut cq = ctx
        .create_cq_on(&channel, &CqConfig::new(16, CqId(12)))
        .map_err(|e| format!("create_cq_on: {e}"))?;
    let qp = loopback_qp(&pd, &cq, 78)?;
    send_to_itself(&mut cq, &qp, &mr)?;
    let event = loop {
        if let Some(ev) = channel
            .get_cq_event()
            .map_err(|e| format!("get_cq_event: {e}"))?
        {
            break ev;
        }
        ensure!(
            latency::wait_fd(channel.fd(), 10_000),
            "no channel event after 10 s"
        );
    };
    ensure!(
        channel.key_of(&cq) == Some(event.cq()),
        "another CQ's event"
    );
    poll_both(&mut cq)?;
    qp.close().map_err(|e| format!("qp: {e}"))?;
    closed_within_10_s("the CQ", cq)?;
    // SAFETY: got from this channel; its CQ's destroy acknowledged it,
    // which the channel knows: skipped.
    unsafe { channel.ack_unknown(event) };
    let next = ctx
        .create_cq_on(&channel, &CqConfig::new(16, CqId(13)))
        .map_err(|e| format!("create_cq_on: {e}"))?;
    closed_within_10_s("the next CQ", next)?;
    drop((mr, pd, channel, ctx));
    Ok(())
}

/// A QP on `cq` (for both queues), connected to itself, its PSNs from `psn`.
fn loopback_qp(pd: &Arc<ProtectionDomain>, cq: &IbvCq, psn: u32) -> Result<QueuePair, String> {
    let mut qp = pd
        .create_rc_qp(cq, cq, &room_for(8), PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let me = qp
        .endpoint(PORT, GID_INDEX, psn)
        .map_err(|e| format!("gid: {e}"))?;
    qp.connect(me, &{
        let mut params = ConnectParams::default();
        params.sq_psn = me.psn;
        params
    })
    .map_err(|e| format!("connect: {e}"))?;
    Ok(qp)
}

/// Arm `cq`, then a receive and a send of 8 bytes of `mr` to itself on
/// `qp`: two completions and one channel event.
fn send_to_itself(cq: &mut IbvCq, qp: &QueuePair, mr: &MemoryRegion) -> Res {
    cq.req_notify(false).map_err(|e| format!("arm: {e}"))?;
    qp.post_recv(1, mr, 0, 64).map_err(e2s)?;
    qp.post_send(2, SendOp::Send, mr, 1024, 8, false)
        .map_err(e2s)
}

/// Poll `cq` until the two completions of [`send_to_itself`] are in, both
/// successful; 10 s without them fails.
fn poll_both(cq: &mut IbvCq) -> Res {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wcs = [WorkCompletion::default(); 4];
    let mut polled = 0;
    while polled < 2 {
        polled += cq.poll(&mut wcs[polled..]).map_err(e2s)?;
        ensure!(
            Instant::now() < deadline,
            "{polled} of 2 completions after 10 s"
        );
    }
    for wc in &wcs[..2] {
        ensure!(wc.status.is_success(), "{wc:?}");
    }
    Ok(())
}

/// Close `cq` on a thread of its own: a close that still waits after 10 s
/// fails (`what`) instead of hanging the run.
fn closed_within_10_s(what: &str, cq: IbvCq) -> Res {
    let (closed, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = closed.send(cq.close().map_err(|e| e.to_string()));
    });
    done.recv_timeout(Duration::from_secs(10))
        .map_err(|_| format!("{what}'s close still waits after 10 s"))?
        .map_err(|e| format!("{what}: {e}"))
}
