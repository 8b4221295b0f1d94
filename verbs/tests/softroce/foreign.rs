//! Objects brought from outside: a CQ made with the caller's
//! `cq_context` (async CQ errors still named), a raw CQ and channel
//! wrapped Borrowed behind a feed, a raw context wrapped Borrowed and
//! Owned.

use crate::common::{Res, e2s, ensure};
use crate::{PORT, connect_pair, done, latency, room_for};
use evd::TryDequeueError;
use evd_verbs::ibv::{
    Context, CqConfig, IbvCq, Ownership, ProtectionDomain, QpCaps, QpState, SendOp, SendRequest,
    ffi, work_completion,
};
use evd_verbs::{
    AsyncElement, AsyncEventKind, AsyncEventSource, CompletionQueue, CqId, Driver, DriverConfig,
    Feed, FeedMode, VerbsEvent, WcOpcode,
};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CQ made with the caller's `cq_context` keeps it, and an async error
/// on it (an overrun: more receive completions than it holds) still
/// names it by its CqId. On a context of its own, so that its async
/// events are this test's.
pub(crate) fn cq_context_kept(_shared: &Arc<ProtectionDomain>) -> Res {
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mut events = ctx.async_events().map_err(|e| format!("async: {e}"))?;
    let mut marker = 0u64;
    let sentinel: *mut libc::c_void = (&mut marker as *mut u64).cast();
    let small = ctx
        .create_cq_with(&{
            let mut config = CqConfig::new(1, CqId(44));
            config.cq_context = sentinel;
            config
        })
        .map_err(|e| format!("create_cq_with: {e}"))?;
    // SAFETY: a live CQ.
    let (kept, cqe) = unsafe { ((*small.as_ptr()).cq_context, (*small.as_ptr()).cqe) };
    ensure!(
        kept == sentinel,
        "cq_context {kept:?}, made with {sentinel:?}"
    );
    let big = ctx
        .create_cq(64, CqId(43))
        .map_err(|e| format!("create_cq: {e}"))?;
    let caps = room_for(32);
    let sends = cqe as u64 + 4;
    ensure!(sends <= 32, "the small CQ holds {cqe}");
    let mut a = pd
        .create_rc_qp(&big, &big, &caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    let mut b = pd
        .create_rc_qp(&big, &small, &caps, PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&mut a, &mut b)?;
    let mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;
    for i in 0..sends {
        b.post_recv(i, &mr, 0, 64).map_err(e2s)?;
    }
    let sge = [mr.sge(1024, 8).map_err(e2s)?];
    for i in 0..sends {
        a.post_send_wr(&SendRequest::new(i, SendOp::Send, &sge).with_signaled(false))
            .map_err(e2s)?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        match events
            .next_event()
            .map_err(|e| format!("next_event: {e}"))?
        {
            Some(ev) if ev.kind == AsyncEventKind::CqError => {
                ensure!(
                    ev.element == AsyncElement::Cq(CqId(44)),
                    "the overrun names {:?} (other events: {seen:?})",
                    ev.element
                );
                break;
            }
            Some(ev) => seen.push(ev),
            None => {
                ensure!(
                    Instant::now() < deadline,
                    "no CQ error after 10 s (events: {seen:?})"
                );
                latency::wait_fd(events.fd(), 100);
            }
        }
    }
    // SAFETY: as above.
    let still = unsafe { (*small.as_ptr()).cq_context };
    ensure!(still == sentinel, "cq_context now {still:?}");
    drop((a, b, mr, small, big, events, pd));
    let _ = marker;
    ctx.close().map_err(|e| format!("context: {e:?}"))
}

/// A CQ and channel made with raw ffi calls, wrapped Borrowed: a feed on
/// it delivers receives through the event-driven driver, and dropping the
/// wrapper destroys neither (the test does, and both destroys return 0).
/// The sender's QP is on a raw CQ too (`create_rc_qp_raw`), polled with
/// `ibv_poll_cq` and converted with `work_completion`.
pub(crate) fn cq_from_raw_borrowed(pd: &Arc<ProtectionDomain>) -> Res {
    const N: u64 = 5;
    let ctx = pd.context();
    // SAFETY: a live context.
    let channel = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
    ensure!(!channel.is_null(), "ibv_create_comp_channel failed");
    // SAFETY: a live context and channel.
    let raw_b = unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, ptr::null_mut(), channel, 0) };
    // SAFETY: a live context; no channel.
    let raw_a =
        unsafe { ffi::ibv_create_cq(ctx.as_ptr(), 64, ptr::null_mut(), ptr::null_mut(), 0) };
    ensure!(!raw_a.is_null() && !raw_b.is_null(), "ibv_create_cq failed");
    // SAFETY: `raw_b` was made on `ctx` with `channel`, which only it uses;
    // both are destroyed below, after the wrapper and the QP are gone.
    let cq_b = unsafe { IbvCq::from_raw(ctx, raw_b, channel, CqId(52), Ownership::Borrowed) }
        .map_err(|e| format!("from_raw: {e}"))?;
    ensure!(
        cq_b.as_ptr() == raw_b && cq_b.channel_ptr() == channel && cq_b.id() == CqId(52),
        "{cq_b:?}"
    );
    // SAFETY: `raw_a` stays alive until destroyed below, after the QP.
    let mut a = unsafe { pd.create_rc_qp_raw(raw_a, raw_a, &QpCaps::default(), PORT) }
        .map_err(|e| format!("create_rc_qp_raw: {e}"))?;
    let mut b = pd
        .create_rc_qp(&cq_b, &cq_b, &QpCaps::default(), PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    connect_pair(&mut a, &mut b)?;
    let mut mr = pd.register(4096).map_err(|e| format!("reg_mr: {e}"))?;

    let (poster, mut consumer) = evd::bounded::<VerbsEvent>(64).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).map_err(|e| format!("io_uring: {e}"))?;
    let key = driver
        .register(Feed::new(cq_b, CqId(52), poster), FeedMode::Event)
        .map_err(e2s)?;
    let driver = driver.spawn().map_err(e2s)?;
    let mut wcs: [ffi::ibv_wc; 4] = [zeroed_wc(); 4];
    for i in 0..N {
        b.post_recv(i, &mr, 0, 64).map_err(e2s)?;
        crate::put(&mut mr, 1024, &i.to_le_bytes());
        a.post_send(100 + i, SendOp::Send, &mr, 1024, 8, false)
            .map_err(e2s)?;
        // The receive, through the channel and the driver.
        let deadline = Instant::now() + Duration::from_secs(10);
        let wc = loop {
            match consumer.try_dequeue() {
                Ok(VerbsEvent::Completion { cq, wc }) => {
                    ensure!(cq == CqId(52), "completion from {cq:?}");
                    break wc;
                }
                Ok(other) => return Err(format!("unexpected {other:?}")),
                Err(TryDequeueError::Empty) => {
                    let _ = consumer.wait(1, Some(Duration::from_millis(100)));
                    ensure!(Instant::now() < deadline, "receive {i}: nothing after 10 s");
                }
                Err(e) => return Err(format!("dequeue: {e:?}")),
            }
        };
        ensure!(done(&wc, WcOpcode::RECV, i), "recv {i}: {wc:?}");
        ensure!(
            crate::bytes(&mr, 0, 8) == i.to_le_bytes(),
            "payload {i} wrong"
        );
        // The send, polled by hand from the raw CQ.
        let wc = loop {
            // SAFETY: a live CQ and room for 4 entries.
            let n = unsafe { ffi::ibv_poll_cq(raw_a, 4, wcs.as_mut_ptr()) };
            ensure!(n >= 0, "ibv_poll_cq: {n}");
            if n > 0 {
                ensure!(n == 1, "{n} send completions at once");
                break work_completion(&wcs[0]);
            }
            ensure!(Instant::now() < deadline, "send {i}: nothing after 10 s");
        };
        ensure!(done(&wc, WcOpcode::SEND, 100 + i), "send {i}: {wc:?}");
    }
    let mut stopped = driver.shutdown().map_err(e2s)?;
    let feed = stopped.take(key).ok_or("the feed is gone")?;
    let stats = feed.stats();
    ensure!(stats.events_got > 0, "no channel event was used: {stats:?}");
    // The feed acks its events; the wrapper destroys nothing.
    drop(feed);
    drop(stopped);
    drop((a, b, mr));
    // SAFETY: made above; no wrapper or QP uses them any more.
    let r = unsafe { ffi::ibv_destroy_cq(raw_b) };
    ensure!(r == 0, "ibv_destroy_cq of the borrowed CQ: {r}");
    // SAFETY: as above; its CQ is gone.
    let r = unsafe { ffi::ibv_destroy_comp_channel(channel) };
    ensure!(r == 0, "ibv_destroy_comp_channel: {r}");
    // SAFETY: as above.
    let r = unsafe { ffi::ibv_destroy_cq(raw_a) };
    ensure!(r == 0, "ibv_destroy_cq of the raw CQ: {r}");
    Ok(())
}

/// An all-zero work completion, for `ibv_poll_cq` to fill.
fn zeroed_wc() -> ffi::ibv_wc {
    // SAFETY: integers and a union of integers: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// A context opened with raw ffi calls, wrapped Borrowed: objects made
/// from it work, and letting the wrapper go leaves the device open (the
/// test allocates a PD on it after, then closes it, which returns 0). One
/// wrapped Owned is closed by its wrapper.
pub(crate) fn context_from_raw(_shared: &Arc<ProtectionDomain>) -> Res {
    let open = || -> Result<*mut ffi::ibv_context, String> {
        let mut n = 0;
        // SAFETY: `n` is a live int; the list is freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        ensure!(!list.is_null() && n > 0, "no device list");
        // SAFETY: the first device of a live list.
        let raw = unsafe { ffi::ibv_open_device(*list) };
        // SAFETY: from ibv_get_device_list, freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        ensure!(!raw.is_null(), "ibv_open_device failed");
        Ok(raw)
    };
    let raw = open()?;
    // SAFETY: open until closed below, after the wrapper and everything
    // made from it are gone; wrapped once.
    let ctx = unsafe { Context::from_raw(raw, Ownership::Borrowed) };
    ensure!(
        ctx.as_ptr() == raw && ctx.ownership() == Ownership::Borrowed,
        "{ctx:?}"
    );
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, CqId(53))
        .map_err(|e| format!("create_cq: {e}"))?;
    let mut qp = pd
        .create_rc_qp(&cq, &cq, &QpCaps::default(), PORT)
        .map_err(|e| format!("create_qp: {e}"))?;
    ensure!(
        qp.query_state().map_err(e2s)? == QpState::Init,
        "a new QP is not in INIT"
    );
    // Its async events are its owner's: a driver does not take them unasked.
    ensure!(
        cq.device_events().is_none(),
        "a borrowed context's async events were taken"
    );
    qp.close().map_err(e2s)?;
    cq.close().map_err(|e| format!("cq: {e:?}"))?;
    pd.close().map_err(|e| format!("pd: {e:?}"))?;
    ctx.close().map_err(|e| format!("context: {e:?}"))?;
    // Still open.
    // SAFETY: the context is open (the wrapper did not close it).
    let pd = unsafe { ffi::ibv_alloc_pd(raw) };
    ensure!(!pd.is_null(), "ibv_alloc_pd on the borrowed context failed");
    // SAFETY: allocated above, once.
    let r = unsafe { ffi::ibv_dealloc_pd(pd) };
    ensure!(r == 0, "ibv_dealloc_pd: {r}");
    // SAFETY: opened above, closed once; nothing uses it.
    let r = unsafe { ffi::ibv_close_device(raw) };
    ensure!(r == 0, "ibv_close_device: {r}");

    let raw = open()?;
    // SAFETY: just opened, handed over: the wrapper closes it.
    let ctx = unsafe { Context::from_raw(raw, Ownership::Owned) };
    ctx.alloc_pd()
        .map_err(|e| format!("alloc_pd: {e}"))?
        .close()
        .map_err(|e| format!("pd: {e:?}"))?;
    // An owned context's, nobody listening, are taken (and let go).
    let cq = ctx
        .create_cq(16, CqId(54))
        .map_err(|e| format!("create_cq: {e}"))?;
    ensure!(
        cq.device_events().is_some(),
        "an owned context's async events were not taken"
    );
    cq.close().map_err(|e| format!("owned cq: {e:?}"))?;
    ctx.close().map_err(|e| format!("owned context: {e:?}"))
}

/// A device's async events have one taker at a time: a second
/// `async_events` is refused with `EBUSY` (two would split the device's
/// events between them), also while a driver serves them for a CQ feed of
/// that device; once the driver lets them go (the feed removed), they can
/// be taken.
pub(crate) fn async_events_have_one_taker(_shared: &Arc<ProtectionDomain>) -> Res {
    let busy = |r: std::io::Result<evd_verbs::ibv::IbvAsyncEvents>, what: &str| -> Res {
        ensure!(
            r.as_ref()
                .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)),
            "{what}: {:?}",
            r.map(|_| ())
        );
        Ok(())
    };
    let ctx = Context::open(None).map_err(|e| format!("open: {e}"))?;
    let first = ctx.async_events().map_err(|e| format!("async: {e}"))?;
    busy(ctx.async_events(), "a second taker")?;
    drop(first);
    let cq = ctx.create_cq(16, CqId(45)).map_err(e2s)?;
    let (poster, _consumer) = evd::bounded::<VerbsEvent>(16).unwrap();
    let mut driver = Driver::new(DriverConfig::default()).map_err(e2s)?;
    let key = driver
        .register(Feed::new(cq, CqId(45), poster), FeedMode::Event)
        .map_err(e2s)?;
    busy(ctx.async_events(), "while the driver serves them")?;
    drop(driver.remove(key).map_err(e2s)?);
    let events = ctx
        .async_events()
        .map_err(|e| format!("after the driver let them go: {e}"))?;
    drop(events);
    Ok(())
}
