//! What a CQ's poll hands out: the provider's entries as this crate's
//! [`WorkCompletion`]s ([`work_completion`]), taken [`POLL_BATCH`] at a
//! time ([`poll_in_chunks`]).

use crate::event::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::feed::POLL_BATCH;
use crate::ibv::ffi;

/// A raw work completion as this crate's [`WorkCompletion`], as the feeds
/// convert what they poll: for applications that poll a CQ themselves
/// (`ffi::ibv_poll_cq`) and want the same type.
///
/// Only the fields `ibv_poll_cq(3)` defines are read, the others are zero:
/// an error completion keeps `wr_id`, `status`, `vendor_err` and `qp_num`
/// (providers leave the rest as an earlier completion wrote it: libmlx5
/// writes only those and `wc_flags`); a successful one has no `vendor_err`,
/// and a receive's `imm_data` is the immediate turned from the wire's
/// big-endian to host order with [`WcFlags::WITH_IMM`], the invalidated
/// rkey (host order already) with [`WcFlags::WITH_INV`], zero without
/// either (and on a send's completion, whose `WITH_IMM` only says that it
/// carried one: libmlx5 writes no value).
///
/// `byte_len` is read only for the opcodes that define it (receives, RDMA
/// reads, atomics) and `src_qp` only for receives (defined on UD QPs): a
/// provider writes only the fields its completion defines (libmlx5's send
/// completion leaves both alone), so an array polled into again and again
/// shows an earlier completion's values in them. Zero each entry once
/// converted all the same, as [`IbvCq`](super::IbvCq)'s poll does.
///
/// ```
/// use evd_verbs::ibv::{ffi, work_completion};
/// use evd_verbs::{WcFlags, WcOpcode, WcStatus};
/// let wc = ffi::ibv_wc {
///     wr_id: 7,
///     status: ffi::ibv_wc_status::IBV_WC_SUCCESS,
///     opcode: ffi::ibv_wc_opcode::IBV_WC_RECV,
///     vendor_err: 0,
///     byte_len: 64,
///     imm_data_invalidated_rkey_union: ffi::imm_data_invalidated_rkey_union_t {
///         imm_data: 0x1234_5678u32.to_be(),
///     },
///     qp_num: 42,
///     src_qp: 0,
///     wc_flags: ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0,
///     pkey_index: 0,
///     slid: 0,
///     sl: 0,
///     dlid_path_bits: 0,
/// };
/// let c = work_completion(&wc);
/// assert_eq!((c.wr_id, c.byte_len, c.qp_num), (7, 64, 42));
/// assert!(c.status.is_success() && c.status == WcStatus::SUCCESS);
/// assert_eq!(c.opcode, WcOpcode::RECV);
/// assert!(c.wc_flags.contains(WcFlags::WITH_IMM));
/// assert_eq!(c.imm_data, 0x1234_5678);
///
/// // A flush error whose other fields hold what an earlier completion left.
/// let flushed = ffi::ibv_wc { status: ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR, vendor_err: 0x81, ..wc };
/// let e = work_completion(&flushed);
/// assert_eq!((e.wr_id, e.status, e.vendor_err, e.qp_num), (7, WcStatus::WR_FLUSH_ERR, 0x81, 42));
/// assert_eq!((e.opcode, e.byte_len, e.imm_data, e.wc_flags), (WcOpcode(0), 0, 0, WcFlags(0)));
///
/// // A send's completion over an entry a receive wrote before.
/// let sent = ffi::ibv_wc { opcode: ffi::ibv_wc_opcode::IBV_WC_SEND, src_qp: 9, wc_flags: 0, ..wc };
/// let s = work_completion(&sent);
/// assert_eq!((s.opcode, s.byte_len, s.src_qp), (WcOpcode::SEND, 0, 0));
/// ```
pub fn work_completion(wc: &ffi::ibv_wc) -> WorkCompletion {
    let status = WcStatus(wc.status);
    if !status.is_success() {
        return WorkCompletion {
            wr_id: wc.wr_id,
            status,
            vendor_err: wc.vendor_err,
            qp_num: wc.qp_num,
            ..WorkCompletion::default()
        };
    }
    let flags = WcFlags(wc.wc_flags);
    // The union is plain integers either way, so reading it is always
    // defined. SAFETY: both members are u32.
    let union = unsafe { wc.imm_data_invalidated_rkey_union.imm_data };
    let opcode = WcOpcode(wc.opcode);
    // Defined for receives, RDMA reads and atomics only.
    let byte_len = match opcode {
        WcOpcode::RDMA_READ | WcOpcode::COMP_SWAP | WcOpcode::FETCH_ADD => wc.byte_len,
        _ if opcode.is_recv() => wc.byte_len,
        _ => 0,
    };
    let imm_data = if !opcode.is_recv() {
        0
    } else if flags.contains(WcFlags::WITH_INV) {
        // `invalidated_rkey`: providers write it in host order.
        union
    } else if flags.contains(WcFlags::WITH_IMM) {
        // `imm_data`: big-endian, as on the wire.
        u32::from_be(union)
    } else {
        0
    };
    WorkCompletion {
        wr_id: wc.wr_id,
        status,
        opcode,
        vendor_err: 0,
        byte_len,
        imm_data,
        qp_num: wc.qp_num,
        // A receive's (defined on UD QPs only).
        src_qp: if opcode.is_recv() { wc.src_qp } else { 0 },
        wc_flags: flags,
    }
}

/// Fill `out` a chunk of at most [`POLL_BATCH`] at a time with `poll_chunk`
/// (how many it wrote, or the provider's negative code), until a chunk
/// comes back short. Returns how many were written and the failure that
/// stopped it, if any: the completions taken out before a failure are the
/// caller's, whatever comes after.
pub(super) fn poll_in_chunks(
    out: &mut [WorkCompletion],
    mut poll_chunk: impl FnMut(&mut [WorkCompletion]) -> Result<usize, i32>,
) -> (usize, Option<i32>) {
    let mut total = 0;
    for chunk in out.chunks_mut(POLL_BATCH) {
        match poll_chunk(chunk) {
            Err(n) => return (total, Some(n)),
            Ok(n) => {
                total += n;
                if n < chunk.len() {
                    break;
                }
            }
        }
    }
    (total, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider holding `held` completions (wr_id 0, 1, ...) that fails
    /// with -5 on its call number `fail_at` (0-based).
    fn provider(
        held: u64,
        fail_at: usize,
    ) -> impl FnMut(&mut [WorkCompletion]) -> Result<usize, i32> {
        let (mut next, mut calls) = (0, 0);
        move |chunk| {
            calls += 1;
            if calls - 1 == fail_at {
                return Err(-5);
            }
            let n = chunk.len().min((held - next) as usize);
            for c in &mut chunk[..n] {
                *c = WorkCompletion::new(next);
                next += 1;
            }
            Ok(n)
        }
    }

    #[test]
    fn a_failure_after_a_full_chunk_keeps_the_completions_taken_out() {
        let mut out = [WorkCompletion::default(); 2 * POLL_BATCH];
        let (n, failed) = poll_in_chunks(&mut out, provider(100, 1));
        assert_eq!((n, failed), (POLL_BATCH, Some(-5)));
        assert!(
            out[..n]
                .iter()
                .enumerate()
                .all(|(i, c)| c.wr_id == i as u64)
        );
    }

    #[test]
    fn a_short_chunk_ends_the_poll_and_a_first_failure_takes_nothing() {
        let mut out = [WorkCompletion::default(); 3 * POLL_BATCH];
        assert_eq!(poll_in_chunks(&mut out, provider(20, 9)), (20, None));
        assert_eq!(poll_in_chunks(&mut out, provider(20, 0)), (0, Some(-5)));
        let exact = POLL_BATCH as u64;
        assert_eq!(
            poll_in_chunks(&mut out, provider(exact, 1)),
            (POLL_BATCH, Some(-5))
        );
    }
}
