//! The promise: user code that panics (a handler, a waker, an event's
//! `Drop`) never wedges the EVD or strands a notification. Every path that
//! takes a notification (post, post_lossy, post_batch, close, resize, a CNO
//! trigger) delivers it even when the user code it runs, or drops, panics;
//! the panic reaches the caller (a room waiter's waker's panic is swallowed
//! instead, wherever it is woken), and the EVD goes on: the next post is
//! delivered, nothing is lost or duplicated, no upcall instance or token is
//! left in flight, and teardown returns.
//!
//! This binary's `main.rs` has the first cases of each kind (a panicking
//! handler under either policy, a waker that panics on a post and on
//! `Poster::close`); `room.rs` a room waker that panics on a head store that
//! frees two slots; `loom/panics.rs` the lossy post whose event panics on
//! drop, in every interleaving. Here every position is walked by one table with the same
//! checks, and the orderings of `post_lossy` and close get their own tests.
//!
//! Every planted panic has the payload [`Planted`], which the panic hook
//! keeps quiet and [`caught`] insists on: a failed assertion inside the EVD's
//! user code is never mistaken for the planted panic. The table runs twice:
//! the second time the payload is [`Trapped`], whose own `Drop` panics, so a
//! panic the EVD swallows must be swallowed whole (rust-lang/rust#86027),
//! and one it passes on reaches the caller intact.

use crate::common::enabled;
use evd::{
    ArmStatus, BatchPostError, Cno, Invoke, Lossy, Overflow, PostError, RecvError, TryDequeueError,
    UpcallPolicy,
};
use std::cell::Cell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll, Wake, Waker};

// --- planted panics -----------------------------------------------------------

/// The payload of every panic these tests plant.
pub(crate) struct Planted;

/// The payload planted while [`TRAPPED`] is set: its `Drop` raises a
/// planted panic, unless [`caught`] defused it.
pub(crate) struct Trapped {
    armed: bool,
}

impl Drop for Trapped {
    fn drop(&mut self) {
        if self.armed {
            std::panic::panic_any(Planted);
        }
    }
}

thread_local! {
    /// This thread plants [`Trapped`] payloads.
    static TRAPPED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with this thread planting [`Trapped`] payloads.
fn trapped(f: impl FnOnce()) {
    TRAPPED.set(true);
    f();
    TRAPPED.set(false);
}

pub(crate) fn plant() -> ! {
    if TRAPPED.get() {
        std::panic::panic_any(Trapped { armed: true })
    }
    std::panic::panic_any(Planted)
}

/// Keep the hook from printing planted panics; every other panic prints.
pub(crate) fn quiet_planted_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            if !p.is::<Planted>() && !p.is::<Trapped>() {
                default(info);
            }
        }));
    });
}

/// Run `f`: `Ok` with its result, or `Err(())` if it raised a planted panic
/// (a [`Trapped`] payload is defused). Any other panic (a failed assertion)
/// goes on.
pub(crate) fn caught<R>(f: impl FnOnce() -> R) -> Result<R, ()> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(p) if p.is::<Planted>() => Err(()),
        Err(p) => match p.downcast::<Trapped>() {
            Ok(mut trap) => {
                trap.armed = false;
                Err(())
            }
            Err(p) => std::panic::resume_unwind(p),
        },
    }
}

/// `f` must raise a planted panic.
pub(crate) fn must_panic<R>(what: &str, f: impl FnOnce() -> R) {
    assert!(
        caught(f).is_err(),
        "{what}: the planted panic did not surface"
    );
}

// --- events -------------------------------------------------------------------

/// An event whose `Drop` panics while it is live. Whoever takes it (a
/// handler, a dequeue) defuses it; an event given up by a lossy post, or
/// dropped by the EVD, is dropped live. Every drop is counted.
struct Ev {
    seq: u64,
    live: bool,
    drops: Arc<AtomicU64>,
}

impl Ev {
    /// Defuse and return the sequence number.
    fn take(mut self) -> u64 {
        self.live = false;
        self.seq
    }
}

impl Drop for Ev {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.live {
            plant();
        }
    }
}

/// Makes events with fresh sequence numbers and remembers what the EVD
/// accepted and what it reported lost, to check exactly-once at the end.
#[derive(Default)]
struct Ledger {
    next: u64,
    drops: Arc<AtomicU64>,
    accepted: Vec<u64>,
    lost: u64,
}

impl Ledger {
    /// A defused event (its drop is quiet).
    fn ev(&mut self) -> Ev {
        self.make(false)
    }

    /// A live event: its drop panics.
    fn live(&mut self) -> Ev {
        self.make(true)
    }

    fn make(&mut self, live: bool) -> Ev {
        self.next += 1;
        Ev {
            seq: self.next,
            live,
            drops: self.drops.clone(),
        }
    }

    /// Post a defused event that must be accepted.
    fn post(&mut self, poster: &evd::Poster<Ev>) -> u64 {
        let ev = self.ev();
        let seq = ev.seq;
        assert!(poster.post(ev).is_ok(), "post of {seq} refused");
        self.accepted.push(seq);
        seq
    }
}

// --- wakers -------------------------------------------------------------------

/// A waker that counts its wakes and, if `panics`, panics in each.
struct TestWaker {
    wakes: AtomicU64,
    panics: bool,
}

impl TestWaker {
    fn new(panics: bool) -> (Arc<TestWaker>, Waker) {
        let w = Arc::new(TestWaker {
            wakes: AtomicU64::new(0),
            panics,
        });
        (w.clone(), Waker::from(w))
    }

    fn wakes(&self) -> u64 {
        self.wakes.load(SeqCst)
    }
}

impl Wake for TestWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        if self.panics {
            plant();
        }
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// Arm the consumer with `waker` (a `Recv` polled once on an empty ring, as
/// `register_panicking_waker` in `main.rs`).
fn arm_with<T>(consumer: &mut evd::Consumer<T>, waker: &Waker) {
    let mut recv = consumer.recv();
    assert!(
        poll_once(&mut recv, waker).is_pending(),
        "the ring is empty"
    );
    drop(recv);
    assert!(consumer.query().armed);
}

// --- the checks after a panic -------------------------------------------------

/// Drain a consumer: the events' sequence numbers, and the losses reported,
/// until the ring is empty (or closed and drained).
fn drain(consumer: &mut evd::Consumer<Ev>) -> (Vec<u64>, u64) {
    let (mut got, mut lost) = (Vec::new(), 0);
    loop {
        match consumer.try_dequeue() {
            Ok(ev) => got.push(ev.take()),
            Err(TryDequeueError::Overflow(o)) => lost += o.lost,
            Err(TryDequeueError::Empty | TryDequeueError::Closed) => return (got, lost),
        }
    }
}

/// No upcall instance, token or room waiter is left behind.
fn nothing_in_flight(q: &evd::Query, case: &str) {
    assert_eq!(
        q.upcalls_in_flight, 0,
        "{case}: an upcall instance in flight"
    );
    assert!(!q.in_upcall, "{case}: the upcall token is still taken");
    assert!(!q.room_wanted, "{case}: a room waiter is left queued");
}

/// A consumer after the panic: still usable. The next post is dequeued; every
/// event accepted before (`taken` were already dequeued) comes exactly once;
/// every loss is reported; closing ends the stream.
fn check_consumer(
    case: &str,
    poster: evd::Poster<Ev>,
    mut consumer: evd::Consumer<Ev>,
    mut ledger: Ledger,
    taken: Vec<u64>,
) {
    let q = consumer.query();
    nothing_in_flight(&q, case);
    let (mut got, lost) = drain(&mut consumer);
    if !q.closed {
        let seq = ledger.post(&poster);
        let next = consumer.try_dequeue().map(Ev::take);
        assert_eq!(next, Ok(seq), "{case}: the next post");
        got.push(seq);
    }
    got.extend(taken);
    got.sort_unstable();
    assert_eq!(got, ledger.accepted, "{case}: each event exactly once");
    assert_eq!(lost, ledger.lost, "{case}: each loss reported");
    assert_eq!(
        consumer.arm(),
        if q.closed {
            ArmStatus::Closed
        } else {
            ArmStatus::Armed
        }
    );
    poster.close();
    assert_eq!(consumer.try_dequeue().err(), Some(TryDequeueError::Closed));
    assert_eq!(
        futures::executor::block_on(consumer.recv()).err(),
        Some(RecvError::Closed),
        "{case}"
    );
    // Every event made was dropped exactly once (the last one is the
    // refused post's, handed back and dropped here).
    let ev = ledger.ev();
    assert!(matches!(poster.post(ev), Err(PostError::Closed(_))));
    drop((poster, consumer));
    assert_eq!(ledger.drops.load(SeqCst), ledger.next, "{case}: drops");
}

/// What an upcall handler heard: sequence numbers and losses.
#[derive(Default)]
struct Heard {
    seqs: Mutex<Vec<u64>>,
    lost: AtomicU64,
}

impl Heard {
    /// Record `ev` (defusing it); `Some(seq)` for an event.
    fn record(&self, ev: Result<Ev, Overflow>) -> Option<u64> {
        match ev {
            Ok(ev) => {
                let seq = ev.take();
                self.seqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(seq);
                Some(seq)
            }
            Err(o) => {
                self.lost.fetch_add(o.lost, SeqCst);
                None
            }
        }
    }

    fn seqs(&self) -> Vec<u64> {
        let mut s = self.seqs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        s.sort_unstable();
        s
    }
}

/// An upcall dispatcher after the panic: no instance in flight, the next
/// post is handled by the next upcall, every event came once, teardown
/// returns and leaves nothing queued.
fn check_upcalls(
    case: &str,
    poster: evd::Poster<Ev>,
    up: evd::Upcalls<Ev>,
    heard: &Heard,
    mut ledger: Ledger,
) {
    let q = up.query();
    if q.upcalls_in_flight != 0 || q.in_upcall {
        // Its drop would wait for the stranded instance forever.
        std::mem::forget(up);
        panic!("{case}: an upcall instance is stranded: {q:?}");
    }
    nothing_in_flight(&q, case);
    let seq = ledger.post(&poster);
    assert!(
        heard.seqs().contains(&seq),
        "{case}: the next post was not handled"
    );
    assert_eq!(
        heard.seqs(),
        ledger.accepted,
        "{case}: each event exactly once"
    );
    assert_eq!(
        heard.lost.load(SeqCst),
        ledger.lost,
        "{case}: each loss reported"
    );
    nothing_in_flight(&up.query(), case);
    let mut consumer = up.teardown();
    assert_eq!(
        consumer.try_dequeue().err(),
        Some(TryDequeueError::Empty),
        "{case}"
    );
    drop((poster, consumer));
    assert_eq!(ledger.drops.load(SeqCst), ledger.next, "{case}: drops");
}

// --- the table ----------------------------------------------------------------

/// Where user code panics.
#[derive(Clone, Copy, Debug)]
enum Position {
    /// The `Drop` of the event a lossy post gives up (nothing owed here;
    /// the owed cases are the stress test below and the loom models).
    LossyEventDrop,
    /// The consumer's waker, woken by a batch post.
    ConsumerWakerOnBatchPost,
    /// The consumer's waker, woken by a lossy post that queues.
    ConsumerWakerOnLossyPost,
    /// The consumer's waker, woken by the close of the last poster's drop.
    ConsumerWakerOnLastPosterDrop,
    /// A room waiter's waker, woken by the head store that frees its slot.
    RoomWakerOnHeadStore,
    /// A room waiter's waker, woken by close.
    RoomWakerOnClose,
    /// A room waiter's waker, woken by the end of a resize (one that grows
    /// the ring).
    RoomWakerOnResize,
    /// A SingleInstance handler.
    SingleInstanceHandler,
    /// A ManyInstances handler.
    ManyInstancesHandler,
    /// An `FnMut` handler (`into_upcalls_mut`), on a loss report.
    FnMutHandlerOnLossReport,
    /// The CNO's waker, woken by a post's trigger.
    CnoWakerOnTrigger,
    /// The CNO's waker, woken by the trigger of a direct wait that gives up
    /// (a dropped `Recv`) and hands the queued events to the CNO.
    CnoWakerOnWithdraw,
    /// The closure of `dequeue_with`.
    DequeueWithClosure,
    /// The consumer's waker (left by an async wait), dropped by
    /// `into_upcalls` (before, it stayed, and the instance that exits after
    /// its handler disabled upcalls woke it, on the posting thread).
    ConsumerWakerDroppedByIntoUpcalls,
    /// The consumer's waker, woken by the post of a `PostSink` that was
    /// waiting for room behind another poster.
    ConsumerWakerOnSinkPost,
    /// A `Poster::closed` future's waker, woken by close.
    CloseWaiterWakerOnClose,
}

const POSITIONS: [Position; 16] = [
    Position::LossyEventDrop,
    Position::ConsumerWakerOnBatchPost,
    Position::ConsumerWakerOnLossyPost,
    Position::ConsumerWakerOnLastPosterDrop,
    Position::RoomWakerOnHeadStore,
    Position::RoomWakerOnClose,
    Position::RoomWakerOnResize,
    Position::SingleInstanceHandler,
    Position::ManyInstancesHandler,
    Position::FnMutHandlerOnLossReport,
    Position::CnoWakerOnTrigger,
    Position::CnoWakerOnWithdraw,
    Position::DequeueWithClosure,
    Position::ConsumerWakerDroppedByIntoUpcalls,
    Position::ConsumerWakerOnSinkPost,
    Position::CloseWaiterWakerOnClose,
];

#[test]
fn user_code_that_panics_never_wedges_the_evd_or_strands_a_notification() {
    quiet_planted_panics();
    every_position();
}

#[test]
fn a_panic_whose_payload_panics_on_drop_never_wedges_the_evd_either() {
    quiet_planted_panics();
    trapped(every_position);
}

/// Each position's scenario; a planted panic that escapes one where the
/// scenario does not expect it fails the test by name.
fn every_position() {
    for p in POSITIONS {
        let case = format!("{p:?}");
        let escaped = caught(|| match p {
            Position::LossyEventDrop => lossy_event_drop(&case),
            Position::ConsumerWakerOnBatchPost => consumer_waker_on_batch_post(&case),
            Position::ConsumerWakerOnLossyPost => consumer_waker_on_lossy_post(&case),
            Position::ConsumerWakerOnLastPosterDrop => consumer_waker_on_last_poster_drop(&case),
            Position::RoomWakerOnHeadStore => room_waker_on_head_store(&case),
            Position::RoomWakerOnClose => room_waker_on_close(&case),
            Position::RoomWakerOnResize => room_waker_on_resize(&case),
            Position::SingleInstanceHandler => handler(&case, UpcallPolicy::SingleInstance),
            Position::ManyInstancesHandler => handler(&case, UpcallPolicy::ManyInstances),
            Position::FnMutHandlerOnLossReport => fnmut_handler_on_loss_report(&case),
            Position::CnoWakerOnTrigger => cno_waker_on_trigger(&case),
            Position::CnoWakerOnWithdraw => cno_waker_on_withdraw(&case),
            Position::DequeueWithClosure => dequeue_with_closure(&case),
            Position::ConsumerWakerDroppedByIntoUpcalls => {
                consumer_waker_dropped_by_into_upcalls(&case)
            }
            Position::ConsumerWakerOnSinkPost => consumer_waker_on_sink_post(&case),
            Position::CloseWaiterWakerOnClose => close_waiter_waker_on_close(&case),
        })
        .is_err();
        assert!(!escaped, "{case}: a planted panic escaped the EVD");
    }
}

fn lossy_event_drop(case: &str) {
    let (poster, consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster); // full
    let ev = ledger.live();
    must_panic(case, || poster.post_lossy(ev));
    ledger.lost += 1;
    assert_eq!(
        ledger.drops.load(SeqCst),
        1,
        "{case}: the given-up event dropped once"
    );
    assert_eq!(consumer.query().lost, 1, "{case}: counted");
    check_consumer(case, poster, consumer, ledger, Vec::new());
}

fn consumer_waker_on_batch_post(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    let (w, waker) = TestWaker::new(true);
    arm_with(&mut consumer, &waker);
    let mut batch = vec![ledger.ev(), ledger.ev(), ledger.ev()];
    let seqs: Vec<u64> = batch.iter().map(|e| e.seq).collect();
    must_panic(case, || poster.post_batch(&mut batch));
    assert!(
        batch.is_empty(),
        "{case}: the batch was taken before the wake"
    );
    ledger.accepted.extend(seqs);
    assert_eq!(w.wakes(), 1, "{case}: woken once");
    let q = consumer.query();
    assert!(
        !q.armed && q.notified,
        "{case}: the batch took the notification"
    );
    check_consumer(case, poster, consumer, ledger, Vec::new());
    assert_eq!(w.wakes(), 1, "{case}: the old waker is not woken again");
}

fn consumer_waker_on_lossy_post(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(2).unwrap();
    let mut ledger = Ledger::default();
    let (w, waker) = TestWaker::new(true);
    arm_with(&mut consumer, &waker);
    let ev = ledger.ev();
    let seq = ev.seq;
    must_panic(case, || poster.post_lossy(ev));
    ledger.accepted.push(seq);
    assert_eq!(w.wakes(), 1, "{case}: woken once");
    check_consumer(case, poster, consumer, ledger, Vec::new());
}

fn consumer_waker_on_last_poster_drop(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster);
    let taken = vec![consumer.try_dequeue().unwrap().take()];
    let (w, waker) = TestWaker::new(true);
    arm_with(&mut consumer, &waker);
    // A second handle keeps the EVD open until the last one goes.
    let last = poster.clone();
    drop(poster);
    must_panic(case, move || drop(last));
    assert_eq!(w.wakes(), 1, "{case}: woken once");
    assert!(consumer.is_closed(), "{case}: closed");
    let poster = consumer.poster(); // made after close: finds it closed
    check_consumer(case, poster, consumer, ledger, taken);
}

fn room_waker_on_head_store(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster); // full
    let mut room = poster.room_waiter();
    let (bad, bad_waker) = TestWaker::new(true);
    assert!(
        room.poll_room(&mut Context::from_waker(&bad_waker))
            .is_pending()
    );
    // The consumer has the event in hand: the waker's panic is not its
    // business, and does not reach it.
    let taken = vec![
        consumer
            .try_dequeue()
            .expect("not lost to the waker")
            .take(),
    ];
    assert_eq!(bad.wakes(), 1, "{case}: woken once");
    assert_eq!(consumer.query().room_wakes, 1);
    let (_, good) = TestWaker::new(false);
    assert_eq!(
        room.poll_room(&mut Context::from_waker(&good)),
        Poll::Ready(Ok(1)),
        "{case}: the freed slot is found"
    );
    ledger.post(room.poster());
    drop(room);
    check_consumer(case, poster, consumer, ledger, taken);
}

fn room_waker_on_close(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster); // full

    // Two waiters, the first one's waker panics: the second is still woken.
    let (bad, bad_waker) = TestWaker::new(true);
    let (good, good_waker) = TestWaker::new(false);
    let mut first = poster.post_async(ledger.ev());
    let mut second = poster.room_waiter();
    assert!(poll_once(&mut first, &bad_waker).is_pending());
    assert!(
        second
            .poll_room(&mut Context::from_waker(&good_waker))
            .is_pending()
    );
    // Close from the consumer side: the wakers' panics do not reach it.
    consumer.close();
    assert_eq!((bad.wakes(), good.wakes()), (1, 1), "{case}: both woken");
    assert!(matches!(
        poll_once(&mut first, &good_waker),
        Poll::Ready(Err(PostError::Closed(_)))
    ));
    assert_eq!(
        second.poll_room(&mut Context::from_waker(&good_waker)),
        Poll::Ready(Err(BatchPostError::Closed))
    );
    drop((first, second));
    check_consumer(case, poster, consumer, ledger, Vec::new());
}

fn close_waiter_waker_on_close(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(2).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster);
    // Two waiters, the first one's waker panics: the second is still woken.
    let (bad, bad_waker) = TestWaker::new(true);
    let (good, good_waker) = TestWaker::new(false);
    {
        let mut first = std::pin::pin!(poster.closed());
        let mut second = std::pin::pin!(poster.closed());
        assert!(poll_once(&mut first, &bad_waker).is_pending());
        assert!(poll_once(&mut second, &good_waker).is_pending());
        // Close from the consumer side: the waker's panic does not reach it.
        consumer.close();
        assert_eq!((bad.wakes(), good.wakes()), (1, 1), "{case}: both woken");
        assert_eq!(poll_once(&mut first, &good_waker), Poll::Ready(()));
        assert_eq!(poll_once(&mut second, &good_waker), Poll::Ready(()));
    }
    check_consumer(case, poster, consumer, ledger, Vec::new());
}

fn room_waker_on_resize(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster); // full
    let (bad, bad_waker) = TestWaker::new(true);
    let mut room = poster.room_waiter();
    assert!(
        room.poll_room(&mut Context::from_waker(&bad_waker))
            .is_pending()
    );
    assert_eq!(
        consumer.resize(2),
        Ok(2),
        "{case}: the waker's panic does not reach it"
    );
    assert_eq!(bad.wakes(), 1, "{case}: woken once");
    let (_, good) = TestWaker::new(false);
    assert_eq!(
        room.poll_room(&mut Context::from_waker(&good)),
        Poll::Ready(Ok(1))
    );
    ledger.post(room.poster());
    drop(room);
    check_consumer(case, poster, consumer, ledger, Vec::new());
}

/// The handler panics on one planted event (after hearing it).
fn handler(case: &str, policy: UpcallPolicy) {
    let (poster, consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    let heard = Arc::new(Heard::default());
    let panic_on = Arc::new(AtomicU64::new(0));
    let (h, p) = (heard.clone(), panic_on.clone());
    let up = consumer.into_upcalls(policy, Invoke::Any, move |ev, _| {
        if h.record(ev) == Some(p.load(SeqCst)) {
            plant();
        }
    });
    ledger.post(&poster);
    let ev = ledger.ev();
    panic_on.store(ev.seq, SeqCst);
    ledger.accepted.push(ev.seq);
    must_panic(case, || poster.post(ev));
    check_upcalls(case, poster, up, &heard, ledger);
}

/// Dropping a sink that holds an event (refused as full, never flushed)
/// drops that event and its `Poster`; when both panic (the event's `Drop`,
/// and the consumer's waker run by the close the last poster makes), the
/// second must not come while the first unwinds, which aborts the process.
/// The first goes on; the event is dropped once and the EVD is closed.
#[test]
fn dropping_a_sink_whose_held_event_and_closing_poster_both_panic_does_not_abort() {
    use futures::Sink;
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    let permit = poster.clone().try_reserve_owned().unwrap(); // full
    let (w, panicking) = TestWaker::new(true);
    arm_with(&mut consumer, &panicking); // nothing queued: armed
    let mut sink = poster.into_sink();
    let refused = Pin::new(&mut sink).start_send(ledger.live());
    assert!(refused.is_ok(), "held, not refused: {refused:?}");
    drop(permit.release()); // the sink's handle is the last now
    must_panic("the sink's drop", move || drop(sink));
    assert_eq!(ledger.drops.load(SeqCst), 1, "the held event dropped once");
    assert_eq!(w.wakes(), 1, "the close woke the consumer");
    assert!(consumer.is_closed());
}

/// A sink waits for room behind a `post_async`; a freed slot wakes the
/// first, and the sink, polled again with its seat still queued, posts into
/// it and the consumer's waker panics out of `poll_ready`. The sink's seat
/// must not outlive that post: left queued, it would be handed the wake of a
/// later freed slot and swallow it (its next poll has nothing to post), and
/// a poster waiting behind it would sleep beside an empty ring.
fn consumer_waker_on_sink_post(case: &str) {
    use futures::Sink;
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster); // full
    let waiting = |poster, ev: Ev| {
        let (w, waker) = TestWaker::new(false);
        let mut post = evd::Poster::post_async(poster, ev);
        assert!(poll_once(&mut post, &waker).is_pending(), "full");
        (w, waker, post)
    };
    let b = ledger.ev();
    let b_seq = b.seq;
    let (first_w, first_waker, mut first) = waiting(&poster, b);
    let (_, sink_waker) = TestWaker::new(false);
    let mut sink_cx = Context::from_waker(&sink_waker);
    let mut sink = poster.clone().into_sink();
    let c = ledger.ev();
    ledger.accepted.push(c.seq);
    Pin::new(&mut sink).start_send(c).unwrap();
    assert!(Pin::new(&mut sink).poll_ready(&mut sink_cx).is_pending());
    let mut taken = vec![consumer.try_dequeue().unwrap().take()];
    assert_eq!(first_w.wakes(), 1, "{case}: the first waiter woken");
    let (_, panicking) = TestWaker::new(true);
    arm_with(&mut consumer, &panicking);
    must_panic(case, || Pin::new(&mut sink).poll_ready(&mut sink_cx));
    // The first waiter finds the ring full again and waits at the front; a
    // third waits behind it.
    assert!(poll_once(&mut first, &first_waker).is_pending());
    let d = ledger.ev();
    let d_seq = d.seq;
    let (third_w, third_waker, mut third) = waiting(&poster, d);
    taken.push(consumer.try_dequeue().unwrap().take());
    assert!(matches!(
        poll_once(&mut first, &first_waker),
        Poll::Ready(Ok(()))
    ));
    ledger.accepted.push(b_seq);
    taken.push(consumer.try_dequeue().unwrap().take());
    assert_eq!(third_w.wakes(), 1, "{case}: the freed slot woke the waiter");
    assert!(matches!(
        poll_once(&mut third, &third_waker),
        Poll::Ready(Ok(()))
    ));
    ledger.accepted.push(d_seq);
    assert!(matches!(
        Pin::new(&mut sink).poll_ready(&mut sink_cx),
        Poll::Ready(Ok(()))
    ));
    drop((first, third, sink));
    ledger.accepted.sort_unstable(); // the sink's event was accepted first
    check_consumer(case, poster, consumer, ledger, taken);
}

/// A waker a dropped `Recv` left registered (the consumer armed) is
/// dropped by `into_upcalls`, and its panic unwinds out of that call with
/// the dispatcher (its handler, whose own drop panics too, dropped under a
/// guard: no abort): the EVD closes, and a later post is refused (its event
/// dropped once).
fn consumer_waker_dropped_by_into_upcalls(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    {
        let waker = Waker::from(Arc::new(PanicsOnDrop(AtomicU64::new(0))));
        arm_with(&mut consumer, &waker);
    } // the slot keeps the only clone
    // The handler owns user code that panics when dropped too: dropped on
    // the waker's unwind, it must be dropped under a guard (a second panic
    // there would abort the process).
    let owned = Arc::new(PanicsOnDrop(AtomicU64::new(0)));
    let h = move |_: Result<Ev, Overflow>, _| {
        let _ = &owned;
        unreachable!("no event")
    };
    must_panic(case, move || {
        consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, h)
    });
    let ev = ledger.ev();
    assert!(
        matches!(poster.post(ev), Err(PostError::Closed(_))),
        "{case}: closed with the consumer"
    );
    assert_eq!(
        ledger.drops.load(SeqCst),
        1,
        "{case}: the refused event, once"
    );
}

/// The `FnMut` handler panics on the report of a loss: the report was given
/// (it is not reported twice), and the token is given back.
fn fnmut_handler_on_loss_report(case: &str) {
    let (poster, consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    let heard = Arc::new(Heard::default());
    let h = heard.clone();
    let mut up = consumer.into_upcalls_mut(Invoke::New, move |ev, _| {
        if h.record(ev).is_none() {
            plant();
        }
    });
    up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
    ledger.post(&poster); // full, nothing runs
    let ev = ledger.live();
    must_panic(case, || poster.post_lossy(ev)); // its drop
    ledger.lost += 1;
    // Enabling with Invoke::Any runs an instance here: the event, then the
    // report, on which the handler panics.
    must_panic(case, || {
        up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
    });
    check_upcalls(case, poster, up, &heard, ledger);
}

/// The setup of the CNO cases: an EVD of 4 slots bound to a CNO with `key`
/// and enabled, and the CNO's `ready_set` future polled once with a waker
/// that panics when woken (the last field records its wakes).
struct CnoCase(
    Cno,
    evd::Poster<Ev>,
    evd::Consumer<Ev>,
    Ledger,
    Arc<TestWaker>,
);

impl CnoCase {
    fn new(key: u64) -> Self {
        let mut cno = Cno::new(2).unwrap();
        let (poster, consumer) = enabled::<Ev>(&cno, key);
        let (waiter, waker) = TestWaker::new(true);
        let mut keys = Vec::new();
        {
            let mut ready = cno.ready_set(&mut keys);
            assert!(poll_once(&mut ready, &waker).is_pending());
        }
        CnoCase(cno, poster, consumer, Ledger::default(), waiter)
    }
}

/// Unbinds the consumer of a CNO case, then [`check_consumer`].
fn check_unbound(
    case: &str,
    poster: evd::Poster<Ev>,
    mut consumer: evd::Consumer<Ev>,
    ledger: Ledger,
    taken: Vec<u64>,
) {
    consumer.unbind_cno();
    check_consumer(case, poster, consumer, ledger, taken);
}

fn cno_waker_on_trigger(case: &str) {
    const KEY: u64 = 7;
    let CnoCase(mut cno, poster, mut consumer, mut ledger, w) = CnoCase::new(KEY);
    let ev = ledger.ev();
    ledger.accepted.push(ev.seq);
    must_panic(case, || poster.post(ev));
    assert_eq!(w.wakes(), 1, "{case}: the CNO's waiter woken once");
    assert_eq!(
        cno.try_next(),
        Some(KEY),
        "{case}: the key reached the ready set"
    );
    assert_eq!(cno.try_next(), None, "{case}: once");
    // Serve it, re-enable, and the next post triggers the CNO again.
    let (mut taken, lost) = drain(&mut consumer);
    assert_eq!(lost, 0);
    assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
    ledger.post(&poster);
    assert_eq!(cno.try_next(), Some(KEY), "{case}: triggered again");
    taken.extend(drain(&mut consumer).0);
    assert_eq!(w.wakes(), 1, "{case}: the old waker is not woken again");
    check_unbound(case, poster, consumer, ledger, taken);
}

fn cno_waker_on_withdraw(case: &str) {
    const KEY: u64 = 9;
    let CnoCase(mut cno, poster, mut consumer, mut ledger, w) = CnoCase::new(KEY);
    // A direct waiter preempts the CNO: the post wakes it and leaves the
    // enable in place. Dropped unresolved, it hands the event to the CNO.
    let (direct_w, direct_waker) = TestWaker::new(false);
    let mut recv = consumer.recv();
    assert!(poll_once(&mut recv, &direct_waker).is_pending());
    ledger.post(&poster);
    assert_eq!(direct_w.wakes(), 1, "{case}: the direct waiter woken");
    assert_eq!(cno.try_next(), None, "{case}: the direct waiter preempted");
    must_panic(case, move || drop(recv));
    assert_eq!(w.wakes(), 1, "{case}: the CNO's waiter woken once");
    assert_eq!(
        cno.try_next(),
        Some(KEY),
        "{case}: the event was handed to the CNO"
    );
    let (taken, lost) = drain(&mut consumer);
    assert_eq!(lost, 0);
    check_unbound(case, poster, consumer, ledger, taken);
}

fn dequeue_with_closure(case: &str) {
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    for _ in 0..3 {
        ledger.post(&poster);
    }
    // A poster waits for room: the unwinding closure's head store wakes it.
    let mut room = poster.room_waiter();
    ledger.post(&poster); // full
    let (w, waker) = TestWaker::new(false);
    assert!(
        room.poll_room(&mut Context::from_waker(&waker))
            .is_pending()
    );
    let mut taken = Vec::new();
    must_panic(case, || {
        consumer.dequeue_with(4, |ev| {
            taken.push(ev.take());
            if taken.len() == 2 {
                plant();
            }
        })
    });
    assert_eq!(taken.len(), 2, "{case}: the panic stopped the batch");
    assert_eq!(consumer.len(), 2, "{case}: the rest stays queued");
    assert_eq!(w.wakes(), 1, "{case}: the room waiter woken");
    assert_eq!(
        room.poll_room(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(2))
    );
    drop(room);
    check_consumer(case, poster, consumer, ledger, taken);
}

// --- close: every owed wake, whoever panics first ------------------------------

#[test]
fn close_wakes_a_waiting_poster_even_if_the_consumers_waker_panics() {
    // One slot, two waiting posters; a dequeue frees the slot and wakes the
    // first, leaving the ring empty and the second queued. The consumer arms
    // with a waker that panics. Close owes the consumer its wake and every
    // waiting poster theirs: the consumer's panic must not cost the poster
    // its wake (it would sleep forever on a closed EVD).
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<Ev>(1).unwrap();
    let mut ledger = Ledger::default();
    ledger.post(&poster);
    let (first_w, first_waker) = TestWaker::new(false);
    let (second_w, second_waker) = TestWaker::new(false);
    let mut first = poster.post_async(ledger.ev());
    let mut second = poster.post_async(ledger.ev());
    assert!(poll_once(&mut first, &first_waker).is_pending());
    assert!(poll_once(&mut second, &second_waker).is_pending());
    let taken = vec![consumer.try_dequeue().unwrap().take()];
    assert_eq!((first_w.wakes(), second_w.wakes()), (1, 0));
    let (consumer_w, consumer_waker) = TestWaker::new(true);
    arm_with(&mut consumer, &consumer_waker);
    must_panic("close", || poster.close());
    assert_eq!(consumer_w.wakes(), 1, "the consumer woken");
    assert_eq!(second_w.wakes(), 1, "the waiting poster woken by close");
    for f in [&mut first, &mut second] {
        assert!(matches!(
            poll_once(f, &first_waker),
            Poll::Ready(Err(PostError::Closed(_)))
        ));
    }
    drop((first, second));
    check_consumer("close", poster, consumer, ledger, taken);
}

#[test]
fn close_wakes_both_the_direct_waiter_and_the_cno_whichever_waker_panics() {
    // An EVD enabled on its CNO and armed by a direct waiter too (the direct
    // waiter preempts the CNO, so both flags stay set): its close owes both
    // a trigger and a wake. Each target's waker panics in turn; the other
    // must still hear of the close.
    quiet_planted_panics();
    const KEY: u64 = 3;
    for cno_panics in [true, false] {
        let case = if cno_panics {
            "the CNO's waker panics"
        } else {
            "the consumer's waker panics"
        };
        let mut cno = Cno::new(1).unwrap();
        let (poster, mut consumer) = evd::bounded::<Ev>(2).unwrap();
        consumer.bind_cno(&cno, KEY).unwrap();
        assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
        let (cno_w, cno_waker) = TestWaker::new(cno_panics);
        let mut keys = Vec::new();
        {
            let mut ready = cno.ready_set(&mut keys);
            assert!(poll_once(&mut ready, &cno_waker).is_pending());
        }
        let (direct_w, direct_waker) = TestWaker::new(!cno_panics);
        // Held while the EVD closes: a `Recv` dropped unresolved withdraws
        // its arm from an EVD bound to a CNO.
        let mut recv = consumer.recv();
        assert!(poll_once(&mut recv, &direct_waker).is_pending());
        must_panic(case, || poster.close());
        assert_eq!(cno_w.wakes(), 1, "{case}: the CNO's waiter woken");
        assert_eq!(cno.try_next(), Some(KEY), "{case}: the close's key");
        assert_eq!(direct_w.wakes(), 1, "{case}: the direct waiter woken");
        let (_, quiet) = TestWaker::new(false);
        assert!(
            matches!(
                poll_once(&mut recv, &quiet),
                Poll::Ready(Err(RecvError::Closed))
            ),
            "{case}: the direct waiter sees the end"
        );
        drop(recv);
        consumer.unbind_cno();
        check_consumer(case, poster, consumer, Ledger::default(), Vec::new());
    }
}

// --- post_lossy: the notification a loss took, under a panicking Drop -----------

/// The old `post_lossy` dropped the given-up event before delivering the
/// notification its loss had taken: an event whose `Drop` panicked then left
/// an upcall token and instance count taken forever (`upcalls_in_flight ==
/// 1` with an event queued, and a teardown that hangs).
///
/// The window is a race: the lossy post finds the ring (of one slot) full
/// while the steady thread's instance holds the token, and that instance
/// drains the ring and exits before the loss's RMW on the word, which then
/// takes the token. So this repeats it: the steady thread posts until the
/// lossy thread has given up `LOSSES` events (or made `ATTEMPTS` lossy
/// posts). No post is retried and no wait depends on the EVD, so a wedged EVD
/// (every post refused as full from then on) fails the checks instead of
/// hanging the test. The outcome checked is the same whatever the
/// interleavings (the loom model
/// `a_lossy_post_whose_event_panics_on_drop_still_delivers_the_upcall_it_took`
/// explores them).
#[test]
fn a_lossy_post_whose_event_panics_on_drop_never_wedges_upcalls() {
    const LOSSES: u64 = 2000;
    const ATTEMPTS: u64 = 200_000;
    quiet_planted_panics();
    let (poster, consumer) = evd::bounded::<Ev>(1).unwrap();
    let drops = Arc::new(AtomicU64::new(0));
    let heard = Arc::new(Heard::default());
    let h = heard.clone();
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        h.record(ev);
    });
    let made = Arc::new(AtomicU64::new(0));
    let ev = {
        let (drops, made) = (drops.clone(), made.clone());
        move |live| Ev {
            seq: made.fetch_add(1, SeqCst) + 1,
            live,
            drops: drops.clone(),
        }
    };
    let done = Arc::new(AtomicBool::new(false));
    let steady = {
        let (poster, done, ev) = (poster.clone(), done.clone(), ev.clone());
        std::thread::spawn(move || {
            let mut posted = 0u64;
            while !done.load(SeqCst) {
                match poster.post(ev(false)) {
                    Ok(()) => posted += 1,
                    Err(PostError::Full(_)) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            posted
        })
    };
    let lossy = {
        let (poster, done, ev) = (poster.clone(), done.clone(), ev.clone());
        let steady_started = made.clone();
        std::thread::spawn(move || {
            // Start once the steady thread posts.
            while steady_started.load(SeqCst) == 0 {
                std::hint::spin_loop();
            }
            let (mut posted, mut lost) = (0u64, 0u64);
            for _ in 0..ATTEMPTS {
                if lost == LOSSES {
                    break;
                }
                match caught(|| poster.post_lossy(ev(true))) {
                    // Queued: the handler defuses it.
                    Ok(Ok(Lossy::Posted)) => posted += 1,
                    // Given up: its drop panicked, after the notification.
                    Err(()) => lost += 1,
                    Ok(other) => panic!("unexpected {:?}", other.map_err(|e| e.to_string())),
                }
            }
            done.store(true, SeqCst);
            (posted, lost)
        })
    };
    let (lossy_posted, lost) = lossy.join().unwrap();
    let steady_posted = steady.join().unwrap();
    let q = up.query();
    if q.upcalls_in_flight != 0 || q.in_upcall {
        // Its drop would wait for the stranded instance forever.
        std::mem::forget(up);
        panic!("an upcall instance is stranded after {lost} losses: {q:?}");
    }
    // A final post runs the next instance, which drains the ring.
    assert!(
        poster.post(ev(false)).is_ok(),
        "the final post is refused: {:?}",
        up.query()
    );
    let q = up.query();
    assert_eq!((q.len, q.upcalls_in_flight), (0, 0), "{q:?}");
    let handled = heard.seqs().len() as u64;
    assert_eq!(
        handled,
        steady_posted + lossy_posted + 1,
        "each event handled once"
    );
    assert_eq!(heard.lost.load(SeqCst), lost, "each loss reported");
    assert_eq!(q.lost, lost);
    let mut consumer = up.teardown();
    assert_eq!(consumer.try_dequeue().err(), Some(TryDequeueError::Empty));
    drop((poster, consumer));
    // Every event made was dropped once: handled, given up, or refused.
    assert_eq!(drops.load(SeqCst), made.load(SeqCst), "drops");
}

// --- a wake run while a handler's panic unwinds ----------------------------------

/// The child half of
/// [`a_handler_that_panics_after_disabling_upcalls_does_not_abort_the_process`]:
/// it runs only in the child process that test starts.
const CHILD: &str = "EVD_PANICS_TEST_CHILD";

/// A consumer that once waited asynchronously (its task's waker panics, as a
/// broken executor's may) is handed to upcalls; the handler disables them
/// (`dat_evd_modify_upcall` from the upcall) and then panics. The instance's
/// unwind gives the token back and, finding upcalls disabled with none left
/// in flight, wakes the consumer's slot for a teardown that might wait.
/// `into_upcalls` let go of the stale waker, so nothing is woken; kept, it
/// was woken there, and its panic during the unwind aborted the process
/// (`instance::left` also guards that wake). Run in a child process, so
/// that an abort fails this test instead of killing the test binary.
#[test]
fn a_handler_that_panics_after_disabling_upcalls_does_not_abort_the_process() {
    if std::env::var_os(CHILD).is_some() {
        return handler_that_disables_then_panics();
    }
    let name = "a_handler_that_panics_after_disabling_upcalls_does_not_abort_the_process";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--include-ignored", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn handler_that_disables_then_panics() {
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    let mut ledger = Ledger::default();
    let (w, waker) = TestWaker::new(true);
    arm_with(&mut consumer, &waker);
    let heard = Arc::new(Heard::default());
    let slot: Arc<Mutex<Option<evd::Upcalls<Ev>>>> = Arc::new(Mutex::new(None));
    let panic_on = Arc::new(AtomicU64::new(0));
    let (h, s, p) = (heard.clone(), slot.clone(), panic_on.clone());
    let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
        if h.record(ev) == Some(p.load(SeqCst)) {
            let mut up = s.lock().unwrap();
            let up = up.as_mut().expect("installed before the posts");
            up.set_policy(UpcallPolicy::Disabled, Invoke::New).unwrap();
            plant();
        }
    });
    *slot.lock().unwrap() = Some(up);
    ledger.post(&poster);
    let ev = ledger.ev();
    panic_on.store(ev.seq, SeqCst);
    ledger.accepted.push(ev.seq);
    must_panic("the handler", || poster.post(ev));
    assert_eq!(w.wakes(), 0, "into_upcalls let go of the stale waker");
    let mut up = slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap();
    assert_eq!(up.query().policy, UpcallPolicy::Disabled);
    assert_eq!(up.query().upcalls_in_flight, 0);
    up.set_policy(UpcallPolicy::SingleInstance, Invoke::Any)
        .unwrap();
    check_upcalls("disable, then panic", poster, up, &heard, ledger);
}

/// `modify_cno` owes the new CNO the key of an event that came before the
/// move, and that CNO's waiter has a waker that panics: the panic reaches
/// the caller after the key, and the binding's trigger count agrees with the
/// slot's, so a later disable (whose barrier waits for every trigger this
/// consumer counted) returns instead of waiting for ever.
#[test]
fn a_cno_waker_that_panics_on_modify_cnos_trigger_leaves_the_binding_usable() {
    quiet_planted_panics();
    let old = Cno::new(4).unwrap();
    let mut new = Cno::new(4).unwrap();
    let (poster, mut consumer) = evd::bounded::<u8>(4).unwrap();
    consumer.bind_cno(&old, 1).unwrap();
    assert_eq!(consumer.enable_cno(), Ok(ArmStatus::Armed));
    poster.post(1).unwrap(); // key 1 is pending on the old CNO
    let (w, waker) = TestWaker::new(true);
    let mut keys = Vec::new();
    {
        let mut ready = new.ready_set(&mut keys);
        assert!(poll_once(&mut ready, &waker).is_pending());
    }
    must_panic("modify_cno", || consumer.modify_cno(&new, 2));
    assert_eq!(w.wakes(), 1);
    assert_eq!(new.try_next(), Some(2), "the key reached the new CNO");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        assert_eq!(consumer.try_dequeue(), Ok(1));
        consumer.disable_cno();
        let _ = tx.send(consumer.unbind_cno());
    });
    let unbound = rx.recv_timeout(std::time::Duration::from_secs(60));
    assert_eq!(unbound, Ok(Some(2)), "disable and unbind returned");
    drop(poster);
}

/// A pending `Recv` on an EVD enabled on its CNO is dropped by an unwinding
/// (its task panicked) after a post it preempted the CNO for: its withdrawal
/// hands the event to the CNO, whose waiter's waker panics too. That second
/// panic is not raised inside the unwinding (which would abort the process);
/// the event reaches the CNO.
#[test]
fn a_recv_dropped_by_an_unwinding_hands_its_event_to_the_cno_even_if_the_cnos_waker_panics() {
    quiet_planted_panics();
    const KEY: u64 = 11;
    let CnoCase(mut cno, poster, mut consumer, mut ledger, w) = CnoCase::new(KEY);
    let (_, direct_waker) = TestWaker::new(false);
    must_panic("the task", || {
        let mut recv = consumer.recv();
        assert!(poll_once(&mut recv, &direct_waker).is_pending());
        ledger.post(&poster);
        plant();
    });
    assert_eq!(w.wakes(), 1, "the CNO's waiter woken once");
    assert_eq!(cno.try_next(), Some(KEY), "the event was handed to the CNO");
    let (taken, lost) = drain(&mut consumer);
    assert_eq!(lost, 0);
    check_unbound("unwinding recv", poster, consumer, ledger, taken);
}

/// A waker whose own `Drop` raises a planted panic once its last reference
/// goes; counts its wakes.
struct PanicsOnDrop(AtomicU64);

impl Wake for PanicsOnDrop {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        plant();
    }
}

#[test]
fn futures_dropped_by_an_unwind_whose_registered_waker_panics_on_drop_do_not_abort() {
    // A task's `Poster::closed` future, and its `Poster::reserve` future
    // waiting at the permit limit, each registered in its list with a waker
    // whose `Drop` panics, then dropped by an unwind (another branch of the
    // task panicked). The list's clone is the waker's last reference: its
    // panic there would be a second one during the unwind, which aborts the
    // process (the failure of this test). The task's own panic goes on; the
    // EVD goes on.
    quiet_planted_panics();
    let ring = evd::Permit::<Ev>::MAX_OUT.next_power_of_two() * 2;
    let (poster, mut consumer) = evd::bounded::<Ev>(ring).unwrap();
    let waker = || Waker::from(Arc::new(PanicsOnDrop(AtomicU64::new(0))));
    let closed = {
        let mut f = Box::pin(poster.closed());
        let w = waker();
        assert!(poll_once(&mut f, &w).is_pending());
        f
    };
    let permits: Vec<_> = (0..evd::Permit::<Ev>::MAX_OUT)
        .map(|_| poster.clone().try_reserve_owned().ok().unwrap())
        .collect();
    let reserving = {
        let mut f = Box::pin(poster.reserve());
        let w = waker();
        assert!(poll_once(&mut f, &w).is_pending(), "at the permit limit");
        f
    };
    let unwound = caught(move || {
        let _task = (closed, reserving);
        plant();
    });
    assert!(unwound.is_err(), "the task's own panic goes on");
    drop(permits);
    let mut ledger = Ledger::default();
    ledger.post(&poster);
    let taken = vec![consumer.try_dequeue().unwrap().take()];
    check_consumer("registered wakers", poster, consumer, ledger, taken);
}

/// A waker a `Recv` registered and no notification took (here: the future
/// dropped on an EVD bound to a CNO, whose withdrawal clears the arm and
/// leaves the waker in place) is the consumer's user code: it goes with the
/// consumer, its drop's panic out of the consumer's drop. It used to stay
/// registered until the last poster freed the EVD, and a poster dropped by
/// an unwinding then raised a second panic (an abort of the process).
#[test]
fn a_waker_the_consumer_left_registered_goes_with_the_consumer() {
    quiet_planted_panics();
    let cno = Cno::new(2).unwrap();
    let (poster, mut consumer) = evd::bounded::<Ev>(4).unwrap();
    consumer.bind_cno(&cno, 5).unwrap();
    {
        let mut recv = consumer.recv();
        let w = Waker::from(Arc::new(PanicsOnDrop(AtomicU64::new(0))));
        assert!(poll_once(&mut recv, &w).is_pending());
    }
    // Leaked if the assertion below fails: dropped by that failure's
    // unwinding, it would run the waker's drop and abort the test binary.
    let poster = std::mem::ManuallyDrop::new(poster);
    let dropped = caught(move || drop(consumer));
    assert!(
        dropped.is_err(),
        "the waker's drop ran in the consumer's, and its panic came out"
    );
    // The last handle, dropped by an unwinding: an abort here is the
    // failure (a second panic during the first).
    let poster = std::mem::ManuallyDrop::into_inner(poster);
    let unwound = caught(move || {
        let _last = poster;
        plant();
    });
    assert!(unwound.is_err(), "the poster's own panic goes on, alone");
}

/// The CNO's waiter's waker drops the `Cno` (it marks itself gone, then its
/// ready ring closes and discards the key the trigger pushed) and then
/// panics, inside the post's trigger: the trigger still finds the CNO gone
/// and tells the EVD's own targets, as any trigger that finds it gone
/// does; the panic reaches the poster after that.
#[test]
fn a_cno_dropped_by_its_waiters_waker_mid_trigger_still_tells_the_evd_if_that_waker_panics() {
    quiet_planted_panics();
    struct DropsTheCnoThenPanics(Mutex<Option<Cno>>);
    impl Wake for DropsTheCnoThenPanics {
        fn wake(self: Arc<Self>) {
            let cno = self.0.lock().unwrap().take();
            drop(cno);
            plant();
        }
    }
    let cno = Cno::new(2).unwrap();
    let (poster, mut consumer) = enabled::<u8>(&cno, 7);
    let fd = consumer.notify_fd().unwrap();
    let holder = Arc::new(DropsTheCnoThenPanics(Mutex::new(None)));
    let waker = Waker::from(holder.clone());
    let mut cno = cno;
    let mut keys = Vec::new();
    {
        let mut ready = cno.ready_set(&mut keys);
        assert!(poll_once(&mut ready, &waker).is_pending());
    }
    *holder.0.lock().unwrap() = Some(cno);
    must_panic("the post whose trigger woke the waker", || poster.post(1));
    assert!(
        holder.0.lock().unwrap().is_none(),
        "the waker dropped the CNO"
    );
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "the EVD's own eventfd was told of the trigger"
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
}
