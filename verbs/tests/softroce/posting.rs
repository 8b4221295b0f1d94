//! Work requests and their completions on a connected pair, through
//! busy-polled feeds: RC send/recv, RDMA write with immediate, error
//! completions (a bad rkey, a send on an errored QP, a flushed receive),
//! the posting options (unsignaled, inline, send with immediate, RDMA
//! read, several SGEs each way), and memory registered with chosen access
//! (a write refused without REMOTE_WRITE).

use crate::common::{Res, e2s, ensure};
use crate::{carries_imm, done, fed, on, pair, pair_with};
use evd_verbs::ibv::{
    AccessFlags, MAX_SGES, MemoryRegion, PostWrError, ProtectionDomain, QpCaps, QpState, SendOp,
    SendRequest, Sge, ffi,
};
use evd_verbs::{CqId, WcOpcode, WcStatus};
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn rc_send_recv(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (1, 2))?);
    p.post_recvs(10)?;
    for i in 0..10u64 {
        crate::put(&mut p.mr_a, i as usize * 64, &[i as u8 + 1; 32]);
        p.a.post_send(i, SendOp::Send, &p.mr_a, i as usize * 64, 32, false)
            .map_err(e2s)?;
    }
    let got = fed.collect(20)?;
    let sends = on(&got, CqId(1));
    let recvs = on(&got, CqId(2));
    ensure!(
        sends.len() == 10 && recvs.len() == 10,
        "sends {} recvs {}",
        sends.len(),
        recvs.len()
    );
    for (i, wc) in sends.iter().enumerate() {
        ensure!(done(wc, WcOpcode::SEND, i as u64), "send {i}: {wc:?}");
    }
    for (i, wc) in recvs.iter().enumerate() {
        ensure!(
            done(wc, WcOpcode::RECV, 100 + i as u64) && wc.byte_len == 32,
            "recv {i}: {wc:?}"
        );
        ensure!(wc.qp_num == p.b.qp_num(), "recv on QP {}", wc.qp_num);
        let data = crate::bytes(&p.mr_b, i * 64, 32);
        ensure!(data.iter().all(|&x| x == i as u8 + 1), "payload {i} wrong");
    }
    Ok(())
}

pub(crate) fn rdma_write_with_imm(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (3, 4))?);
    p.b.post_recv(7, &p.mr_b, 0, 0).map_err(e2s)?;
    let ramp: Vec<u8> = (0..=255).collect();
    crate::put(&mut p.mr_a, 0, &ramp);
    let op = SendOp::WriteWithImm {
        remote_addr: p.mr_b.addr() + 1024,
        rkey: p.mr_b.rkey(),
        imm: 0x1234_5678,
    };
    p.a.post_send(8, op, &p.mr_a, 0, 256, true).map_err(e2s)?;
    let got = fed.collect(2)?;
    let write = got
        .iter()
        .find(|(c, _)| *c == CqId(3))
        .ok_or("no write completion")?
        .1;
    let recv = got
        .iter()
        .find(|(c, _)| *c == CqId(4))
        .ok_or("no receive completion")?
        .1;
    ensure!(done(&write, WcOpcode::RDMA_WRITE, 8), "write: {write:?}");
    ensure!(
        done(&recv, WcOpcode::RECV_RDMA_WITH_IMM, 7)
            && carries_imm(&recv, 0x1234_5678)
            && recv.byte_len == 256,
        "recv: {recv:?}"
    );
    ensure!(
        crate::bytes(&p.mr_b, 1024, 256) == ramp,
        "written data wrong"
    );
    Ok(())
}

pub(crate) fn error_completions(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (5, 6))?);
    // A write with a wrong rkey: the responder refuses it.
    let bad = SendOp::Write {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey() ^ 0x5a5a,
    };
    p.a.post_send(1, bad, &p.mr_a, 0, 64, false).map_err(e2s)?;
    fed.refused(CqId(5), 1, "bad rkey")?;
    // The requester's QP is now in error: a send on it is flushed.
    p.a.post_send(2, SendOp::Send, &p.mr_a, 0, 8, false)
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    ensure!(
        got[0].1.wr_id == 2 && got[0].1.status == WcStatus::WR_FLUSH_ERR,
        "send on errored QP: {got:?}"
    );
    // A receive outstanding when its QP is moved to error is flushed too.
    p.b.post_recv(3, &p.mr_b, 0, 64).map_err(e2s)?;
    p.b.set_error().map_err(e2s)?;
    let state = p.b.query_state().map_err(e2s)?;
    ensure!(state == QpState::Error, "after set_error: {state:?}");
    let got = fed.collect(1)?;
    ensure!(
        got[0].0 == CqId(6) && got[0].1.wr_id == 3 && got[0].1.status == WcStatus::WR_FLUSH_ERR,
        "flushed recv: {got:?}"
    );
    // A move to RESET needs the QP to itself: refused through `&self`,
    // done with `reset(&mut self)`.
    // SAFETY: all-zero is a valid ibv_qp_attr (integers only).
    let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = ffi::ibv_qp_state::IBV_QPS_RESET;
    let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
    match p.b.modify(&mut attr, mask) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
        other => return Err(format!("a move to RESET through modify: {other:?}")),
    }
    p.b.reset().map_err(e2s)?;
    let state = p.b.query_state().map_err(e2s)?;
    ensure!(state == QpState::Reset, "after reset: {state:?}");
    Ok(())
}

/// Three unsignaled sends then a signaled one: all four arrive, and only
/// the signaled one completes at the sender.
pub(crate) fn unsignaled_sends(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (31, 32))?);
    p.post_recvs(4)?;
    for i in 0..4u64 {
        let off = i as usize * 64;
        crate::put(&mut p.mr_a, off, &[0x40 + i as u8; 16]);
        let sges = [p.mr_a.sge(off, 16).map_err(e2s)?];
        let wr = SendRequest::new(i, SendOp::Send, &sges).with_signaled(i == 3);
        p.a.post_send_wr(&wr).map_err(e2s)?;
    }
    let mut got = fed.collect(5)?;
    got.extend(fed.quiet(Duration::from_millis(300))?);
    let sends = on(&got, CqId(31));
    let recvs = on(&got, CqId(32));
    ensure!(
        sends.len() == 1 && sends[0].wr_id == 3 && sends[0].status.is_success(),
        "sender completions: {sends:?}"
    );
    ensure!(recvs.len() == 4, "{} receives", recvs.len());
    for (i, wc) in recvs.iter().enumerate() {
        ensure!(
            wc.status.is_success() && wc.wr_id == 100 + i as u64 && wc.byte_len == 16,
            "recv {i}: {wc:?}"
        );
        let data = crate::bytes(&p.mr_b, i * 64, 16);
        ensure!(
            data.iter().all(|&x| x == 0x40 + i as u8),
            "payload {i} wrong"
        );
    }
    Ok(())
}

/// An inline send: the source is overwritten as soon as the post returns
/// and the receiver still sees what was posted; an unregistered buffer
/// (lkey 0) works inline; more than `max_inline_data` is refused.
pub(crate) fn inline_send(pd: &Arc<ProtectionDomain>) -> Res {
    let mut caps = QpCaps::default();
    caps.max_inline_data = 64;
    let (mut p, mut fed) = fed(pair_with(pd, 64, (33, 34), &caps)?);
    let max = p.a.caps().max_inline_data;
    ensure!(max >= 64, "granted max_inline_data {max}");
    p.b.post_recv(1, &p.mr_b, 0, 64).map_err(e2s)?;
    p.b.post_recv(2, &p.mr_b, 64, 64).map_err(e2s)?;
    let pattern: Vec<u8> = (0..48u8).map(|i| i ^ 0xa5).collect();
    crate::put(&mut p.mr_a, 0, &pattern);
    let sges = [p.mr_a.sge(0, 48).map_err(e2s)?];
    // SAFETY: `mr_a` is live while the request is posted.
    let inline = unsafe { SendRequest::new(10, SendOp::Send, &sges).with_inline(true) };
    p.a.post_send_wr(&inline).map_err(e2s)?;
    // Copied at post time: this must not reach the receiver.
    crate::put(&mut p.mr_a, 0, &[0; 48]);
    let unregistered = *b"inline from an unregistered stack buffer";
    // SAFETY: an inline send: the bytes are read during the post only, and
    // `unregistered` outlives it.
    let raw = unsafe { Sge::from_raw(unregistered.as_ptr() as u64, unregistered.len() as u32, 0) };
    let raw = [raw];
    // SAFETY: as above: `unregistered` is readable while it is posted.
    let inline = unsafe { SendRequest::new(11, SendOp::Send, &raw).with_inline(true) };
    p.a.post_send_wr(&inline).map_err(e2s)?;
    let got = fed.collect_ok(4)?;
    let recvs = on(&got, CqId(34));
    ensure!(
        recvs.len() == 2
            && recvs[0].byte_len == 48
            && recvs[1].byte_len == unregistered.len() as u32,
        "receives: {recvs:?}"
    );
    ensure!(
        crate::bytes(&p.mr_b, 0, 48) == pattern,
        "the inline payload is not what was posted: {:?}",
        crate::bytes(&p.mr_b, 0, 48)
    );
    ensure!(
        crate::bytes(&p.mr_b, 64, unregistered.len()) == unregistered,
        "unregistered inline payload wrong"
    );
    let long = [p.mr_a.sge(0, max as usize + 1).map_err(e2s)?];
    // SAFETY: `mr_a` is live (and the request is refused before any read).
    let too_long = unsafe { SendRequest::new(12, SendOp::Send, &long).with_inline(true) };
    match p.a.post_send_wr(&too_long) {
        Err(PostWrError::InlineTooLong { len, max: m })
            if len == u64::from(max) + 1 && m == max => {}
        other => return Err(format!("an inline send over the limit: {other:?}")),
    }
    Ok(())
}

/// A send with immediate: the receiver's completion carries it.
pub(crate) fn send_with_imm(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (35, 36))?);
    p.b.post_recv(5, &p.mr_b, 0, 64).map_err(e2s)?;
    crate::put(&mut p.mr_a, 0, b"with immediate!!");
    p.a.post_send(
        6,
        SendOp::SendWithImm { imm: 0xdead_beef },
        &p.mr_a,
        0,
        16,
        true,
    )
    .map_err(e2s)?;
    let got = fed.collect(2)?;
    let send = on(&got, CqId(35));
    let recv = on(&got, CqId(36));
    ensure!(
        send.len() == 1 && done(&send[0], WcOpcode::SEND, 6),
        "send: {send:?}"
    );
    ensure!(recv.len() == 1, "receives: {recv:?}");
    let r = recv[0];
    ensure!(
        done(&r, WcOpcode::RECV, 5) && carries_imm(&r, 0xdead_beef) && r.byte_len == 16,
        "recv: {r:?}"
    );
    ensure!(
        crate::bytes(&p.mr_b, 0, 16) == b"with immediate!!",
        "payload wrong"
    );
    Ok(())
}

/// An RDMA read of the peer's region lands in ours.
pub(crate) fn rdma_read(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (37, 38))?);
    let sevens: Vec<u8> = (0..300).map(|i| (i * 7) as u8).collect();
    crate::put(&mut p.mr_b, 2048, &sevens);
    let sges = [p.mr_a.sge(4096, 300).map_err(e2s)?];
    let read = SendOp::Read {
        remote_addr: p.mr_b.addr() + 2048,
        rkey: p.mr_b.rkey(),
    };
    p.a.post_send_wr(&SendRequest::new(9, read, &sges))
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    let (cq, wc) = got[0];
    ensure!(
        cq == CqId(37) && done(&wc, WcOpcode::RDMA_READ, 9),
        "read: {got:?}"
    );
    ensure!(
        crate::bytes(&p.mr_a, 4096, 300) == sevens,
        "read data wrong"
    );
    Ok(())
}

/// A send gathered from three SGEs (two regions, one of them the caller's
/// own memory registered raw) into a receive scattered over two: the
/// receiver gets the concatenation. More than MAX_SGES is refused.
pub(crate) fn multi_sge_send(pd: &Arc<ProtectionDomain>) -> Res {
    let mut caps = QpCaps::default();
    caps.max_send_sge = 3;
    caps.max_recv_sge = 2;
    let (mut p, mut fed) = fed(pair_with(pd, 64, (39, 40), &caps)?);
    ensure!(
        p.a.caps().max_send_sge >= 3 && p.b.caps().max_recv_sge >= 2,
        "granted {:?}",
        p.a.caps()
    );
    let mut own = vec![0u8; 256];
    // SAFETY: `own` outlives the region (closed below) and is used only
    // through it meanwhile.
    let mut own_mr =
        unsafe { pd.register_raw(own.as_mut_ptr(), own.len(), AccessFlags::LOCAL_WRITE) }
            .map_err(|e| format!("register_raw: {e}"))?;
    ensure!(
        own_mr.addr() == own.as_ptr() as u64 && own_mr.len() == 256,
        "{own_mr:?}"
    );
    crate::put(&mut p.mr_a, 0, b"0123456789");
    crate::put(&mut p.mr_a, 1000, b"abcdefghijklmnopqrst");
    crate::put(&mut own_mr, 100, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ!?#%");
    let expect: Vec<u8> = [
        &b"0123456789"[..],
        b"abcdefghijklmnopqrst",
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZ!?#%",
    ]
    .concat();
    p.b.post_recv_sges(
        7,
        &[
            p.mr_b.sge(0, 25).map_err(e2s)?,
            p.mr_b.sge(5000, 100).map_err(e2s)?,
        ],
    )
    .map_err(e2s)?;
    let sges = [
        p.mr_a.sge(0, 10).map_err(e2s)?,
        p.mr_a.sge(1000, 20).map_err(e2s)?,
        own_mr.sge(100, 30).map_err(e2s)?,
    ];
    p.a.post_send_wr(&SendRequest::new(8, SendOp::Send, &sges))
        .map_err(e2s)?;
    let got = fed.collect_ok(2)?;
    let recv = on(&got, CqId(40));
    ensure!(
        recv.len() == 1 && recv[0].byte_len == 60 && recv[0].wr_id == 7,
        "recv: {recv:?}"
    );
    let got_bytes = [
        crate::bytes(&p.mr_b, 0, 25),
        crate::bytes(&p.mr_b, 5000, 35),
    ]
    .concat();
    ensure!(
        got_bytes == expect,
        "scattered {:?}",
        String::from_utf8_lossy(&got_bytes)
    );
    let many = [sges[0]; MAX_SGES + 1];
    match p.a.post_send_wr(&SendRequest::new(9, SendOp::Send, &many)) {
        Err(PostWrError::TooManySges { given, max })
            if given == MAX_SGES + 1 && max == MAX_SGES => {}
        other => return Err(format!("{} SGEs: {other:?}", MAX_SGES + 1)),
    }
    ensure!(
        own_mr.close().map_err(e2s)?.is_none(),
        "a raw region gave a buffer back"
    );
    drop(own);
    Ok(())
}

/// The caller's buffer registered without REMOTE_WRITE: an RDMA write to
/// it fails with a remote-access error and leaves it untouched, while the
/// same write to a buffer registered with REMOTE_WRITE lands; both
/// buffers come back on close.
pub(crate) fn remote_write_refused(pd: &Arc<ProtectionDomain>) -> Res {
    let (mut p, mut fed) = fed(pair(pd, 64, (41, 42))?);
    let writable = pd
        .register_buffer(
            vec![0x11; 4096].into_boxed_slice(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .map_err(|e| format!("register_buffer: {e}"))?;
    let read_only = pd
        .register_buffer(
            vec![0x22; 4096].into_boxed_slice(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .map_err(|e| format!("register_buffer: {e}"))?;
    ensure!(
        !read_only.access().contains(AccessFlags::REMOTE_WRITE),
        "{read_only:?}"
    );
    crate::put(&mut p.mr_a, 0, &[0x77; 64]);
    let write = |mr: &MemoryRegion| SendOp::Write {
        remote_addr: mr.addr(),
        rkey: mr.rkey(),
    };
    p.a.post_send(1, write(&writable), &p.mr_a, 0, 64, false)
        .map_err(e2s)?;
    let got = fed.collect(1)?;
    ensure!(
        got[0].1.wr_id == 1 && got[0].1.status.is_success(),
        "write to a writable region: {got:?}"
    );
    p.a.post_send(2, write(&read_only), &p.mr_a, 0, 64, false)
        .map_err(e2s)?;
    fed.refused(CqId(41), 2, "write without REMOTE_WRITE")?;
    let w = writable.close().map_err(e2s)?.ok_or("no buffer back")?;
    let r = read_only.close().map_err(e2s)?.ok_or("no buffer back")?;
    ensure!(
        w.len() == 4096 && w[..64].iter().all(|&x| x == 0x77) && w[64..].iter().all(|&x| x == 0x11),
        "the writable buffer"
    );
    ensure!(
        r.len() == 4096 && r.iter().all(|&x| x == 0x22),
        "the refused write changed the buffer"
    );
    Ok(())
}
