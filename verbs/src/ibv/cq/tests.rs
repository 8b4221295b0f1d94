//! `IbvCq::poll` against a provider of this test's own: a zeroed context
//! whose `poll_cq` writes, into the entries it is given, only the fields a
//! script says (as a provider writes only what its completion defines).
//! Nothing of libibverbs is called: the context and the CQ are borrowed,
//! with no channel.

use super::*;
use crate::event::{WcFlags, WcOpcode, WcStatus};
use std::collections::VecDeque;

/// What one `poll_cq` call writes: a patch per entry.
type Patch = fn(&mut ffi::ibv_wc);

/// A `poll_cq` call that writes its entries and then fails (as libmlx5
/// returns its `CQ_POLL_ERR` after entries it did write).
const FAILS: Patch = |_| {};

/// The calls' patches, in order, reached through the CQ's `cq_context`.
struct Script(VecDeque<Vec<Patch>>);

unsafe extern "C" fn scripted_poll(cq: *mut ffi::ibv_cq, n: i32, wc: *mut ffi::ibv_wc) -> i32 {
    // SAFETY: `cq_context` is the test's live `Script`, polled by one
    // thread (the test's).
    let script = unsafe { &mut *(*cq).cq_context.cast::<Script>() };
    let mut batch = script.0.pop_front().unwrap_or_default();
    let fails = batch
        .last()
        .is_some_and(|p| std::ptr::fn_addr_eq(*p, FAILS));
    if fails {
        batch.pop();
    }
    assert!(batch.len() <= n as usize, "the script writes past the poll");
    for (i, patch) in batch.iter().enumerate() {
        // SAFETY: the caller passed `n` entries.
        patch(unsafe { &mut *wc.add(i) });
    }
    if fails { -2 } else { batch.len() as i32 }
}

/// Every completion the scripted provider hands out, one `poll` per call of
/// the script.
fn polled(calls: Vec<Vec<Patch>>) -> Vec<WorkCompletion> {
    let polls = calls.len();
    let mut script = Script(calls.into());
    // SAFETY: C structs of integers, pointers and optional fn pointers,
    // for which all zero is a valid value (null, None).
    let (mut ctx, mut cq): (Box<ffi::ibv_context>, Box<ffi::ibv_cq>) =
        unsafe { (Box::new(mem::zeroed()), Box::new(mem::zeroed())) };
    ctx.ops.poll_cq = Some(scripted_poll);
    cq.context = &mut *ctx;
    cq.cq_context = (&mut script as *mut Script).cast();
    // SAFETY: borrowed (nothing is closed or destroyed), live until the end
    // of this function, which drops the wrappers first.
    let context = unsafe { Context::from_raw(&mut *ctx, Ownership::Borrowed) };
    // SAFETY: a CQ on `context` with no channel, polled by this thread only.
    let mut ibv_cq = unsafe {
        IbvCq::from_raw(
            &context,
            &mut *cq,
            ptr::null_mut(),
            CqId(1),
            Ownership::Borrowed,
        )
    }
    .expect("wrapped");
    let mut all = Vec::new();
    for _ in 0..polls {
        let mut out = [WorkCompletion::default(); POLL_BATCH];
        // A failed poll takes nothing (its entries are lost with it).
        if let Ok(n) = ibv_cq.poll(&mut out) {
            all.extend_from_slice(&out[..n]);
        }
    }
    drop(ibv_cq);
    drop(context);
    all
}

/// What a provider writes of every successful completion on QP 5: its id,
/// status, opcode and flags.
fn succeeded(
    wc: &mut ffi::ibv_wc,
    wr_id: u64,
    opcode: ffi::ibv_wc_opcode::Type,
    flags: ffi::ibv_wc_flags,
) {
    wc.wr_id = wr_id;
    wc.status = ffi::ibv_wc_status::IBV_WC_SUCCESS;
    wc.opcode = opcode;
    wc.qp_num = 5;
    wc.wc_flags = flags.0;
}

fn received_with_imm(wc: &mut ffi::ibv_wc) {
    let (opcode, imm) = (
        ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
        ffi::ibv_wc_flags::IBV_WC_WITH_IMM,
    );
    succeeded(wc, 1, opcode, imm);
    wc.byte_len = 4096;
    wc.src_qp = 77;
    wc.imm_data_invalidated_rkey_union.imm_data = 0xabcdu32.to_be();
}

#[test]
fn an_error_completion_carries_no_field_an_earlier_completion_left() {
    // libmlx5's error completion: wr_id, status, vendor_err, qp_num and a
    // zero wc_flags, nothing else written.
    let flushed: Patch = |wc| {
        wc.wr_id = 2;
        wc.status = ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
        wc.vendor_err = 0x81;
        wc.qp_num = 5;
        wc.wc_flags = 0;
    };
    let wcs = polled(vec![vec![received_with_imm], vec![flushed]]);
    assert_eq!(wcs.len(), 2);
    assert_eq!(wcs[0].imm_data, 0xabcd);
    let expected = WorkCompletion::new(2).with_status(WcStatus::WR_FLUSH_ERR);
    assert_eq!(wcs[1], expected.with_vendor_err(0x81).with_qp_num(5));
}

#[test]
fn a_field_a_successful_completion_leaves_unwritten_is_zero_not_an_earlier_ones() {
    // libmlx5's send completion: no byte_len, no src_qp, no immediate.
    let sent: Patch = |wc| succeeded(wc, 2, ffi::ibv_wc_opcode::IBV_WC_SEND, ffi::ibv_wc_flags(0));
    let wcs = polled(vec![vec![received_with_imm], vec![sent]]);
    assert_eq!(wcs.len(), 2);
    let expected = WorkCompletion::new(2).with_opcode(WcOpcode::SEND);
    assert_eq!(wcs[1], expected.with_qp_num(5));
}

#[test]
fn an_invalidated_rkey_is_delivered_in_the_host_order_providers_write_it() {
    let invalidated: Patch = |wc| {
        let inv = ffi::ibv_wc_flags::IBV_WC_WITH_INV;
        succeeded(wc, 1, ffi::ibv_wc_opcode::IBV_WC_RECV, inv);
        wc.byte_len = 8;
        wc.imm_data_invalidated_rkey_union.invalidated_rkey = 0x1122_3344;
    };
    let wcs = polled(vec![vec![invalidated]]);
    assert_eq!(wcs.len(), 1);
    assert!(wcs[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(wcs[0].imm_data, 0x1122_3344);
}

/// The completion of a send with immediate: `WITH_IMM` set (the send
/// carried one) and no immediate (`ibv_poll_cq(3)`: only a receive's);
/// libmlx5 writes none, so the field holds whatever it held (here, as in
/// an array the caller reuses, an earlier receive's immediate).
fn sent_with_imm(wc: &mut ffi::ibv_wc) {
    wc.imm_data_invalidated_rkey_union.imm_data = 0xabcdu32.to_be();
    let imm = ffi::ibv_wc_flags::IBV_WC_WITH_IMM;
    succeeded(wc, 2, ffi::ibv_wc_opcode::IBV_WC_SEND, imm);
}

#[test]
fn a_send_completion_with_imm_carries_no_immediate_an_earlier_receive_left() {
    let wcs = polled(vec![vec![received_with_imm], vec![sent_with_imm]]);
    assert_eq!(wcs.len(), 2);
    let expected = WorkCompletion::new(2).with_opcode(WcOpcode::SEND);
    let expected = expected.with_qp_num(5).with_flags(WcFlags::WITH_IMM);
    assert_eq!(wcs[1], expected);
}

#[test]
fn entries_a_failed_poll_wrote_show_in_no_later_completion() {
    let wcs = polled(vec![vec![received_with_imm, FAILS], vec![sent_with_imm]]);
    assert_eq!(wcs.len(), 1, "the failed poll's entry is lost with it");
    let expected = WorkCompletion::new(2).with_opcode(WcOpcode::SEND);
    let expected = expected.with_qp_num(5).with_flags(WcFlags::WITH_IMM);
    assert_eq!(wcs[0], expected);
}

/// A CQ's async events carry the name of its latest wrapping, whichever
/// wrapping of another CQ goes first.
#[test]
fn a_cqs_async_events_name_its_latest_wrapping_after_another_cq_goes() {
    // SAFETY: C structs of integers, pointers and optional fn pointers,
    // for which all zero is a valid value (null, None).
    let (mut ctx, mut x, mut p): (Box<ffi::ibv_context>, Box<ffi::ibv_cq>, Box<ffi::ibv_cq>) = unsafe {
        (
            Box::new(mem::zeroed()),
            Box::new(mem::zeroed()),
            Box::new(mem::zeroed()),
        )
    };
    x.context = &mut *ctx;
    p.context = &mut *ctx;
    // SAFETY: borrowed (nothing is closed or destroyed), live until the end
    // of this function, which drops the wrappers first.
    let context = unsafe { Context::from_raw(&mut *ctx, Ownership::Borrowed) };
    let wrap = |cq: &mut ffi::ibv_cq, id| {
        // SAFETY: a CQ on `context` with no channel, never polled.
        unsafe { IbvCq::from_raw(&context, cq, ptr::null_mut(), CqId(id), Ownership::Borrowed) }
            .expect("wrapped")
    };
    let on_x = wrap(&mut x, 9);
    let (first, latest) = (wrap(&mut p, 1), wrap(&mut p, 2));
    drop(on_x);
    assert_eq!(context.cq_id(&mut *p), Some(CqId(2)));
    drop(latest);
    assert_eq!(context.cq_id(&mut *p), Some(CqId(1)));
    drop(first);
    assert_eq!(context.cq_id(&mut *p), None);
    drop(context);
}
