//! A real CQ overrun on rxe, with no `AsyncFeed` registered: rxe drops the
//! completions that do not fit without failing the poll, and reports the
//! overrun only as the device's `IBV_EVENT_CQ_ERR`; the driver serves the
//! device's async events by itself when nobody listens, so the overrun
//! still reaches the consumer, as a `CqError` on the right CQ.

use crate::common::{Res, e2s, ensure};
use crate::pair_with;
use evd::TryDequeueError;
use evd_verbs::ibv::{ProtectionDomain, QpCaps, SendOp};
use evd_verbs::{
    AsyncElement, AsyncEventKind, CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent,
    WorkCompletion,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITES: u64 = 256;
const CQ_DEPTH: i32 = 4;
const EVD: usize = 8;
const ID: CqId = CqId(31);

pub fn cq_overrun_reaches_the_consumer(pd: &Arc<ProtectionDomain>) -> Res {
    let mut caps = QpCaps::default();
    caps.max_send_wr = WRITES as u32;
    caps.max_recv_wr = 4;
    let (p, cq_a, _cq_b) = pair_with(pd, CQ_DEPTH, (ID.0, ID.0 + 1), &caps)?;
    // A full EVD: the feed polls nothing (backpressure), so the CQ fills.
    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(EVD).map_err(e2s)?;
    for _ in 0..EVD {
        poster
            .post(VerbsEvent::Completion {
                cq: CqId(u32::MAX),
                wc: WorkCompletion::default(),
            })
            .map_err(|_| "prefill refused")?;
    }
    let mut driver = Driver::new(DriverConfig::default()).map_err(e2s)?;
    driver
        .register(Feed::new(cq_a, ID, poster), FeedMode::Event)
        .map_err(e2s)?;
    let driver = driver.spawn().map_err(e2s)?;
    // Each write puts its number (from 1) in its own slot at the peer.
    let mut src = pd.register(8 * WRITES as usize).map_err(e2s)?;
    for i in 0..WRITES {
        let at = 8 * i as usize;
        crate::put(&mut src, at, &(i + 1).to_le_bytes());
        let op = SendOp::Write {
            remote_addr: p.mr_b.addr() + at as u64,
            rkey: p.mr_b.rkey(),
        };
        p.a.post_send(i, op, &src, at, 8, false)
            .map_err(|e| format!("post write {i}: {e}"))?;
    }
    // Every write has landed at the peer once its last slot is written; by
    // then the acks of all but the last few have come back, so the 4-entry
    // CQ has overrun (the writes are acked in order).
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = 8 * (WRITES - 1) as usize;
    loop {
        // SAFETY: a live region of at least `last + 8` bytes; the HCA writes
        // it, so it is read volatile, as a whole aligned u64.
        // SAFETY: `last` is 8-aligned and 8 bytes inside `mr_b`, which is
        // registered (valid) while `p` lives.
        let v = unsafe { std::ptr::read_volatile((p.mr_b.addr() as usize + last) as *const u64) };
        if v == WRITES {
            break;
        }
        ensure!(Instant::now() < deadline, "the writes did not land in 10 s");
        std::thread::yield_now();
    }
    // Drain: the completions that fitted, then the overrun.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut completions = 0;
    loop {
        match consumer.try_dequeue() {
            Ok(VerbsEvent::Async(a)) => {
                ensure!(
                    a.kind == AsyncEventKind::CqError && a.element == AsyncElement::Cq(ID),
                    "expected a CqError on {ID:?}, got {a:?}"
                );
                break;
            }
            Ok(VerbsEvent::Completion { cq, .. }) => {
                if cq == ID {
                    completions += 1;
                }
            }
            Ok(other) => return Err(format!("unexpected event {other:?}")),
            Err(TryDequeueError::Empty) => {
                let _ = consumer.wait(1, Some(Duration::from_millis(100)));
            }
            Err(e) => return Err(format!("dequeue: {e:?}")),
        }
        ensure!(
            Instant::now() < deadline,
            "no CqError after 10 s ({completions} completions seen of {WRITES} writes)"
        );
    }
    ensure!(
        completions < WRITES,
        "all {WRITES} completions arrived: the CQ did not overrun"
    );
    drop(driver.shutdown().map_err(e2s)?);
    Ok(())
}
