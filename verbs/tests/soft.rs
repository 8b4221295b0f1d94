//! The software providers' own promises: the verbs semantics they mirror
//! (arming, acknowledgements, destroy), and their test hooks.

use evd_verbs::soft::{SoftChannel, SoftCq};
use evd_verbs::{CompletionQueue, SharedChannel, WorkCompletion};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier};

/// An over-acknowledgement is refused with a panic, and the CQ's counts
/// are left as they were: the event got is still owed, and the CQ can be
/// destroyed once it is acknowledged.
#[test]
fn an_over_acknowledgement_is_refused_and_changes_nothing() {
    let (mut cq, hca) = SoftCq::new(4).unwrap();
    hca.inject_spurious_event();
    assert!(cq.get_event().unwrap());
    // SAFETY: one event was got; acknowledging two is the error under test.
    let refused = catch_unwind(AssertUnwindSafe(|| unsafe { cq.ack_events(2) }));
    assert!(refused.is_err());
    let s = hca.stats();
    assert_eq!((s.events_got, s.events_acked), (1, 0));
    let mut cq = cq.destroy().unwrap_err();
    // SAFETY: the one event got above, acknowledged once.
    unsafe { cq.ack_events(1) };
    assert!(cq.destroy().is_ok());
    assert_eq!(hca.stats().unacked_at_destroy, Some(0));
}

/// `destroy` refuses while a channel event got is unacknowledged, as
/// `ibv_destroy_cq` waits for it; a shared channel's `get_cq_event` on
/// another thread either gets its event before the destroy (which then
/// refuses) or finds the CQ destroyed (and gets nothing). Never both a
/// successful destroy and an event got of it.
#[test]
fn a_destroy_racing_a_shared_channel_s_get_never_leaves_an_event_unacknowledged() {
    // A third thread taking the CQ's lock (its stats) widens any window
    // between the destroy's check and its mark.
    for _ in 0..20_000 {
        let mut channel = SoftChannel::new().unwrap();
        let (cq, hca) = channel.create_cq(4).unwrap();
        hca.inject_spurious_event();
        let start = Arc::new(Barrier::new(3));
        let go = start.clone();
        let getter = std::thread::spawn(move || {
            go.wait();
            let ev = channel.get_cq_event().unwrap();
            (channel, ev)
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (go, stopped, stats) = (start.clone(), stop.clone(), hca.clone());
        let hammer = std::thread::spawn(move || {
            go.wait();
            while !stopped.load(Relaxed) {
                let _ = stats.stats();
            }
        });
        start.wait();
        let refused = cq.destroy().err();
        let (mut channel, ev) = getter.join().unwrap();
        stop.store(true, Relaxed);
        hammer.join().unwrap();
        if refused.is_none() {
            assert_eq!(hca.stats().unacked_at_destroy, Some(0));
        }
        if let Some(ev) = ev {
            assert!(
                refused.is_some(),
                "destroyed with an event got and unacknowledged"
            );
            // SAFETY: got above from this channel, of the CQ still alive
            // (its destroy was refused); acknowledged once.
            unsafe { channel.ack_unknown(ev) };
        }
        drop(refused); // every event got is acknowledged now
    }
}

/// A `during_next_poll` closure that holds the CQ's producer handle (to
/// post from inside the poll, say) and never runs does not keep the CQ's
/// state, or its eventfd, alive once the CQ and the handles are dropped.
#[test]
fn a_closure_no_poll_ran_is_dropped_with_the_cq() {
    let alive = Arc::new(());
    let (cq, hca) = SoftCq::new(4).unwrap();
    let (held, producer) = (alive.clone(), hca.clone());
    hca.during_next_poll(move || {
        let _held = &held;
        producer.push(WorkCompletion::default()).unwrap();
    });
    drop(cq);
    drop(hca);
    assert_eq!(
        Arc::strong_count(&alive),
        1,
        "the closure was never dropped"
    );
}

/// The same for a closure set after the CQ was dropped: no poll will run
/// it, so it is dropped at once.
#[test]
fn a_closure_set_after_the_cq_was_dropped_is_dropped_at_once() {
    let alive = Arc::new(());
    let (cq, hca) = SoftCq::new(4).unwrap();
    drop(cq);
    let (held, producer) = (alive.clone(), hca.clone());
    hca.during_next_poll(move || {
        let _held = &held;
        producer.push(WorkCompletion::default()).unwrap();
    });
    assert_eq!(Arc::strong_count(&alive), 1, "kept by a CQ that is gone");
    drop(hca);
}

/// A `during_next_poll` closure that panics leaves the CQ as it was: the
/// poll it ran in puts back what it took, and the next poll has every
/// completion, in order, followed by what the closure completed first.
#[test]
fn a_poll_whose_closure_panics_takes_no_completion() {
    let (mut cq, hca) = SoftCq::new(8).unwrap();
    let mut out = [WorkCompletion::default(); 8];
    poll_whose_closure_pushes_then_panics(&mut cq, &hca, &[3], &mut out);
    let n = cq.poll(&mut out).unwrap();
    let ids: Vec<u64> = out[..n].iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(hca.stats().polled, 3);
}

/// Push completions 1 and 2, then poll into `out` with a `during_next_poll`
/// closure that pushes `pushed` and panics: the poll must unwind.
fn poll_whose_closure_pushes_then_panics(
    cq: &mut SoftCq,
    hca: &evd_verbs::soft::SoftCqProducer,
    pushed: &'static [u64],
    out: &mut [WorkCompletion],
) {
    assert_eq!(
        hca.push_batch(&[WorkCompletion::new(1), WorkCompletion::new(2)]),
        2
    );
    let producer = hca.clone();
    hca.during_next_poll(move || {
        for &id in pushed {
            producer.push(WorkCompletion::new(id)).unwrap();
        }
        panic!("a closure that panics");
    });
    assert!(catch_unwind(AssertUnwindSafe(|| cq.poll(out))).is_err());
}

/// An arm for the next completion stays one until it fires: a later
/// solicited-only `req_notify` does not narrow it, so an unsolicited
/// completion still raises the event (IBA C11-31, C11-32).
#[test]
fn a_solicited_only_arm_does_not_narrow_a_pending_next_completion_arm() {
    let (mut cq, hca) = SoftCq::new(4).unwrap();
    cq.req_notify(false).unwrap();
    cq.req_notify(true).unwrap();
    hca.push(WorkCompletion::default()).unwrap();
    assert!(cq.get_event().unwrap());
    // SAFETY: the one event got above.
    unsafe { cq.ack_events(1) };
    // A solicited-only arm on its own waits for a solicited completion.
    cq.req_notify(true).unwrap();
    hca.push(WorkCompletion::default()).unwrap();
    assert!(!cq.get_event().unwrap());
}

/// A completion added in the re-arm window raises nothing from the arm
/// that follows it, but an earlier arm still pending fires for it.
#[test]
fn a_completion_in_the_rearm_window_fires_only_an_arm_already_pending() {
    let (mut cq, hca) = SoftCq::new(4).unwrap();
    hca.complete_in_next_rearm_window(WorkCompletion::new(1));
    cq.req_notify(false).unwrap();
    assert!(!cq.get_event().unwrap(), "not armed when it landed");
    // Now armed; the next window's completion lands under that arm.
    hca.complete_in_next_rearm_window(WorkCompletion::new(2));
    cq.req_notify(false).unwrap();
    assert!(cq.get_event().unwrap(), "the pending arm fires");
    // SAFETY: the one event got above.
    unsafe { cq.ack_events(1) };
}

/// An overrun, as rxe's (`rxe_cq_post`): the completion that does not fit
/// is lost, refused to its producer and reported on the CQ's device, one
/// `CqError` per completion lost, and nothing else happens. The channel is
/// not woken and a pending arm stays pending; the CQ is not broken: its
/// poll delivers what it holds, and a completion that fits later is added
/// (and fires that arm).
#[test]
fn an_overrun_loses_only_the_completion_that_did_not_fit() {
    use evd_verbs::soft::{PushError, SoftDevice};
    use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEventSource, CqId};
    let (mut device_events, device) = SoftDevice::new().unwrap();
    let (mut cq, hca) = SoftCq::with_device(2, CqId(7), &device).unwrap();
    hca.push(WorkCompletion::new(0)).unwrap();
    hca.push(WorkCompletion::new(1)).unwrap();
    cq.req_notify(false).unwrap();
    assert_eq!(hca.push(WorkCompletion::new(2)), Err(PushError::Overrun));
    assert_eq!(hca.push(WorkCompletion::new(3)), Err(PushError::Overrun));
    let s = hca.stats();
    assert_eq!((s.len, s.pushed, s.overruns), (2, 2, 2), "{s:?}");
    assert_eq!((s.armed, s.channel_events), (true, 0), "{s:?}");
    assert!(!cq.get_event().unwrap(), "the channel was not woken");
    let lost = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(7)));
    assert_eq!(device_events.next_event().unwrap(), Some(lost));
    assert_eq!(device_events.next_event().unwrap(), Some(lost));
    assert_eq!(device_events.next_event().unwrap(), None);
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out), Ok(2));
    assert_eq!((out[0].wr_id, out[1].wr_id), (0, 1));
    hca.push(WorkCompletion::new(4)).unwrap();
    assert!(cq.get_event().unwrap(), "the arm was still pending");
    // SAFETY: one event of `cq` was got above and not acknowledged.
    unsafe { cq.ack_events(1) };
    assert_eq!(cq.poll(&mut out), Ok(1));
    assert_eq!(out[0].wr_id, 4);
    assert_eq!(device_events.next_event().unwrap(), None);
}

/// On a shared channel too, an overrun raises no channel event, armed or
/// not: the channel's queue stays empty and the arm stays pending (the
/// lost completion is the device's to report).
#[test]
fn an_overrun_raises_nothing_on_a_shared_channel() {
    use evd_verbs::soft::PushError;
    let channel = SoftChannel::new().unwrap();
    let (mut cq, hca) = channel.create_cq(1).unwrap();
    hca.push(WorkCompletion::new(0)).unwrap();
    // Armed: a completion added now would raise an event; the one lost to
    // the overrun raises none.
    cq.req_notify(false).unwrap();
    assert_eq!(hca.push(WorkCompletion::new(1)), Err(PushError::Overrun));
    let s = channel.stats();
    assert_eq!((s.queued, s.raised), (0, 0), "{s:?}");
    assert!(hca.stats().armed, "the arm is still pending");
    let mut out = [WorkCompletion::default(); 2];
    assert_eq!(cq.poll(&mut out), Ok(1));
    assert_eq!(out[0].wr_id, 0);
}

/// A poll whose closure panics puts its completions back ahead of what the
/// closure pushed into the room that poll made: the CQ then holds more than
/// its capacity, and every push overruns (reported, not kept) until polls
/// bring it below its capacity again.
#[test]
fn a_cq_over_its_capacity_after_a_panicked_poll_overruns_until_polled_below_it() {
    use evd_verbs::soft::PushError;
    let (mut cq, hca) = SoftCq::new(2).unwrap();
    let mut out = [WorkCompletion::default(); 2];
    poll_whose_closure_pushes_then_panics(&mut cq, &hca, &[3, 4], &mut out);
    assert_eq!(hca.stats().len, 4);
    assert_eq!(hca.push(WorkCompletion::new(5)), Err(PushError::Overrun));
    assert_eq!(cq.poll(&mut out[..1]), Ok(1));
    assert_eq!(hca.push(WorkCompletion::new(6)), Err(PushError::Overrun));
    assert_eq!(cq.poll(&mut out), Ok(2));
    assert_eq!(hca.push(WorkCompletion::new(7)), Ok(()));
    let s = hca.stats();
    assert_eq!((s.len, s.overruns), (2, 2), "{s:?}");
}

/// `set_error_every(n)` marks every `n`-th completion added: one lost to an
/// overrun does not count.
#[test]
fn a_completion_lost_to_an_overrun_does_not_count_for_the_error_every_nth() {
    use evd_verbs::WcStatus;
    use evd_verbs::soft::PushError;
    let (mut cq, hca) = SoftCq::new(1).unwrap();
    hca.set_error_every(2);
    hca.push(WorkCompletion::new(1)).unwrap();
    assert_eq!(hca.push(WorkCompletion::new(2)), Err(PushError::Overrun));
    let mut out = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut out), Ok(1));
    assert!(out[0].status.is_success());
    hca.push(WorkCompletion::new(3)).unwrap();
    assert_eq!(cq.poll(&mut out), Ok(1));
    assert_eq!((out[0].wr_id, out[0].status), (3, WcStatus::WR_FLUSH_ERR));
}

/// A destroyed CQ's overrun events nobody took go with it, as the kernel
/// drops a destroyed CQ's unread async events (`ib_uverbs_release_ucq`): a
/// later CQ of the same device under the same `CqId` is not blamed for
/// them. The device's other events stay, in order.
#[test]
fn a_destroyed_cqs_unread_overrun_events_go_with_it() {
    use evd_verbs::soft::{PushError, SoftDevice};
    use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEventSource, CqId};
    let (mut device_events, device) = SoftDevice::new().unwrap();
    let overrun = |cq: &evd_verbs::soft::SoftCqProducer| {
        cq.push(WorkCompletion::new(0)).unwrap();
        assert_eq!(cq.push(WorkCompletion::new(1)), Err(PushError::Overrun));
    };
    let (old, old_hca) = SoftCq::with_device(1, CqId(5), &device).unwrap();
    let (_other, other_hca) = SoftCq::with_device(1, CqId(6), &device).unwrap();
    overrun(&old_hca);
    let port = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1));
    device.raise(port);
    overrun(&other_hca);
    drop(old);
    let (_new, new_hca) = SoftCq::with_device(1, CqId(5), &device).unwrap();
    let other = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(6)));
    assert_eq!(device_events.next_event().unwrap(), Some(port));
    assert_eq!(device_events.next_event().unwrap(), Some(other));
    assert_eq!(device_events.next_event().unwrap(), None, "none of CQ 5");
    // The new CQ's own overrun is its own.
    overrun(&new_hca);
    let new = AsyncEvent::new(AsyncEventKind::CqError, AsyncElement::Cq(CqId(5)));
    assert_eq!(device_events.next_event().unwrap(), Some(new));
}

/// Every async event wakes an edge-triggered waiter on the device's fd (as
/// the kernel wakes an async fd's pollers on every event), not only the
/// first of those queued.
#[test]
fn every_async_event_wakes_an_edge_triggered_waiter() {
    use evd_verbs::soft::SoftDevice;
    use evd_verbs::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEventSource};
    use rustix::event::{Timespec, epoll};
    let (events, device) = SoftDevice::new().unwrap();
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
    // SAFETY: `events` owns the fd and outlives this borrow (it is only
    // registered here; the epoll set is dropped before `events`).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(events.fd()) };
    let flags = epoll::EventFlags::IN | epoll::EventFlags::ET;
    epoll::add(&ep, fd, epoll::EventData::new_u64(0), flags).unwrap();
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut ready = Vec::with_capacity(1);
    let port = AsyncEvent::new(AsyncEventKind::PortError, AsyncElement::Port(1));
    for nth in ["first", "second, the first still queued"] {
        device.raise(port);
        ready.clear();
        epoll::wait(&ep, rustix::buffer::spare_capacity(&mut ready), Some(&zero)).unwrap();
        assert_eq!(ready.len(), 1, "the {nth} event woke the waiter");
    }
    drop(ep);
}
