//! The four-CQ scenario (`scenarios/shared_channel.rs`) on one real
//! completion channel: two connected QP pairs (each QP with its own CQ),
//! a send and its receive on each pair per work request, so that every CQ
//! completes each one; the CQs and the channel destroyed after the feed
//! with no destroy failing.

use super::{PORT, connect_pair, room_for};
use crate::common::{Res, ensure};
use crate::scenarios::shared_channel::{CQS, ChannelDevices, PER_ROUND, four_cqs_on_one_channel};
use evd_verbs::ibv::{
    CompletionChannel, CqConfig, IbvCq, MemoryRegion, ProtectionDomain, QueuePair, SendOp,
};
use evd_verbs::{ChannelFeed, WcOpcode, WorkCompletion, teardown_failures};
use std::sync::Arc;

struct Rxe {
    pd: Arc<ProtectionDomain>,
    /// CQ `i`'s QP: pair 0 sends on 0 and receives on 1, pair 1 sends on 2
    /// and receives on 3.
    qps: Vec<QueuePair>,
    mrs: Vec<MemoryRegion>,
    channel: Option<Arc<CompletionChannel>>,
    failures_before: u64,
}

impl ChannelDevices for Rxe {
    type Channel = Arc<CompletionChannel>;

    fn create(&mut self, first: u32) -> Result<(Self::Channel, Vec<IbvCq>), String> {
        let ctx = self.pd.context();
        let channel = ctx
            .create_channel()
            .map_err(|e| format!("create_channel: {e}"))?;
        let mut cqs = Vec::new();
        for i in 0..CQS as u32 {
            cqs.push(
                ctx.create_cq_on(&channel, &CqConfig::new(128, evd_verbs::CqId(first + i)))
                    .map_err(|e| format!("create_cq_on: {e}"))?,
            );
        }
        let caps = room_for(64);
        for cq in &cqs {
            self.qps.push(
                self.pd
                    .create_rc_qp(cq, cq, &caps, PORT)
                    .map_err(|e| format!("create_qp: {e}"))?,
            );
        }
        for pair in self.qps.chunks_exact_mut(2) {
            let [a, b] = pair else { unreachable!("pairs") };
            connect_pair(a, b)?;
        }
        self.mrs = (0..CQS)
            .map(|_| self.pd.register(1 << 16))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("reg_mr: {e}"))?;
        self.channel = Some(channel.clone());
        Ok((channel, cqs))
    }

    fn complete(&mut self, wr_id: u64) -> Res {
        let off = (wr_id % PER_ROUND * 64) as usize;
        for (send, recv) in [(0, 1), (2, 3)] {
            self.qps[recv]
                .post_recv(wr_id, &self.mrs[recv], off, 64)
                .map_err(|e| format!("post_recv: {e}"))?;
            self.qps[send]
                .post_send(wr_id, SendOp::Send, &self.mrs[send], off, 32, false)
                .map_err(|e| format!("post_send: {e}"))?;
        }
        Ok(())
    }

    fn check(&self, i: usize, wc: &WorkCompletion) -> Res {
        ensure!(wc.status.is_success(), "CQ {i}: {wc:?}");
        let op = if i % 2 == 0 {
            WcOpcode::SEND
        } else {
            WcOpcode::RECV
        };
        ensure!(wc.opcode == op, "CQ {i}: {wc:?}");
        Ok(())
    }

    fn finish(self, feed: ChannelFeed<Self::Channel>) -> Res {
        // The feeds ack what they got; the CQs go with the last QP, the
        // channel after the last CQ. A CQ destroy that waited for acks would
        // hang here (the watchdog fails the run); a failure is counted.
        drop(feed);
        drop(self.qps);
        drop(self.mrs);
        drop(self.channel);
        ensure!(
            teardown_failures() == self.failures_before,
            "teardown failures: {}",
            teardown_failures() - self.failures_before
        );
        Ok(())
    }
}

pub fn shared_channel_four_cqs(pd: &Arc<ProtectionDomain>) -> Res {
    let devices = Rxe {
        pd: pd.clone(),
        qps: Vec::new(),
        mrs: Vec::new(),
        channel: None,
        failures_before: teardown_failures(),
    };
    four_cqs_on_one_channel(devices, 60)
}
