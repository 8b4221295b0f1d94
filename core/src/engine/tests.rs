//! The engine's unit tests: paths a test through the handles cannot reach
//! exactly (a head near a wrap, a reservation left unpublished, a closer
//! stopped between its two steps).

use super::*;
use crate::state::{Arm, Notify};
use crate::{PostError, bounded};

/// Put an empty EVD at `head` (as if 64-bit `head` events had passed).
fn fast_forward<T>(c: &crate::Consumer<T>, head: u64) {
    let s = c.shared();
    set_tail(c, head);
    s.consumer.head.store(head, Ordering::Relaxed);
    // The seen tail is a ticket count: it moves with the head, or an arm
    // would trust a tail from before the jump.
    s.consumer.seen_tail.store(head, Ordering::Relaxed);
    s.read_mostly
        .head_epoch
        .store(head >> HEAD_EPOCH_SHIFT, Ordering::Relaxed);
}

/// Move the word's tail as a reservation would, without a slot written:
/// a poster stopped between its CAS and its publish. (Tests set it back
/// before the EVD drops: teardown waits for reserved slots.)
fn set_tail<T>(c: &crate::Consumer<T>, tail: u64) {
    let s = c.shared();
    let w = s.state.load(Ordering::Relaxed);
    s.state.store(
        state::with_tail(w, tail & state::TICKET_MASK),
        Ordering::Relaxed,
    );
}

#[test]
fn an_arm_that_finds_the_head_published_leaves_the_word_alone() {
    let (poster, consumer) = bounded::<u64>(4).unwrap();
    poster.post(1).unwrap();
    let s = consumer.shared();
    let before = s.state.load(Ordering::Relaxed);
    assert_eq!(s.arm(1), Arm::Pending);
    assert_eq!(s.state.load(Ordering::Relaxed), before);
    assert_eq!(
        s.consumer.seen_tail.load(Ordering::Relaxed),
        0,
        "the word was not read"
    );
}

#[test]
fn an_arm_trusts_a_seen_tail_only_while_the_head_is_below_it() {
    let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
    fast_forward(&consumer, u64::MAX - 1); // the head wraps 2^64 below
    let h = consumer.shared().head();
    set_tail(&consumer, h.wrapping_add(2)); // two posters mid-post
    assert_eq!(consumer.shared().arm(1), Arm::Pending, "from the word");
    assert_eq!(
        consumer.shared().consumer.seen_tail.load(Ordering::Relaxed),
        h.wrapping_add(2)
    );
    // A word that no longer shows the tickets (no real word does that:
    // tails only grow) tells the shortcut from the word's own answer.
    set_tail(&consumer, h);
    assert_eq!(consumer.shared().arm(2), Arm::Pending, "from the seen tail");
    assert!(
        matches!(consumer.shared().arm(3), Arm::Armed(_)),
        "only 2 known"
    );
    consumer.disarm();
    // The head reaches and passes the seen tail (across 2^64): nothing is
    // known any more, so the arm reads the word, and the empty ring arms.
    for k in 1..=3u64 {
        fast_forward(&consumer, h.wrapping_add(k));
        consumer
            .shared()
            .consumer
            .seen_tail
            .store(h.wrapping_add(2), Ordering::Relaxed);
        assert_eq!(consumer.shared().head(), h.wrapping_add(k));
        let r = consumer.shared().arm(1);
        if k < 2 {
            assert_eq!(r, Arm::Pending, "head +{k}: one ticket still known");
        } else {
            assert!(matches!(r, Arm::Armed(_)), "head +{k}");
            consumer.disarm();
        }
    }
}

#[test]
fn a_timed_wait_ends_at_its_deadline_while_a_poster_is_mid_post() {
    let (poster, mut consumer) = bounded::<u64>(4).unwrap();
    set_tail(&consumer, 1); // reserved, never published
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let r = consumer.wait(1, Some(std::time::Duration::from_millis(20)));
        tx.send(r).unwrap();
        consumer
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the wait must end at its deadline, not wait for the publish");
    assert_eq!(r, Err(crate::WaitError::Timeout { available: 0 }));
    let consumer = waiter.join().unwrap();
    set_tail(&consumer, 0);
    drop(poster);
}

/// A timed wait on an EVD enabled on its CNO arms (preempting the CNO);
/// a post takes that arm and stops before its publish; the wait's
/// deadline passes while its arm finds the slot still being written.
/// Giving up, the wait hands the event to the CNO, as a wait that gives
/// up armed does: no later post is needed for the CNO to hear of it.
#[test]
fn a_timed_wait_that_gives_up_on_a_slot_being_written_hands_it_to_the_cno() {
    let cno = crate::Cno::new(2).unwrap();
    let (poster, mut consumer) = bounded::<u64>(4).unwrap();
    consumer.bind_cno(&cno, 5).unwrap();
    assert_eq!(consumer.enable_cno(), Ok(crate::ArmStatus::Armed));
    assert_eq!(consumer.arm(), crate::ArmStatus::Armed, "the direct wait");
    let s = consumer.shared().clone();
    let hint = AtomicU64::new(0);
    let (ticket, count, notify) = s.reserve::<false>(&hint, 1).unwrap();
    assert_eq!((count, notify), (1, Notify::Wake), "the post took ARMED");
    let r = consumer.wait(1, Some(std::time::Duration::from_millis(20)));
    assert_eq!(r, Err(crate::WaitError::Timeout { available: 0 }));
    // SAFETY: the ticket is ours and its slot free (the ring was empty);
    // the buffer is the EVD's only one (no resize).
    unsafe { crate::ring::Buffer::publish(s.buffer_ptr(), ticket, 7) };
    let mut cno = cno;
    assert_eq!(cno.try_next(), Some(5), "the CNO hears of the event");
    assert_eq!(consumer.try_dequeue(), Ok(7));
    drop(poster);
}

#[test]
fn an_idle_posters_stale_head_cannot_wrap_the_full_check() {
    // A poster idle while 2^36 tickets pass must not keep a head hint
    // that, compared modulo 2^36, makes a full ring look nearly empty.
    let (idle, mut consumer) = bounded::<u64>(4).unwrap(); // hint 0
    fast_forward(&consumer, 3 * (1 << state::TAIL_BITS) - 2);
    let busy = consumer.poster(); // fresh hint
    for i in 0..4 {
        busy.post(i).unwrap();
    }
    assert_eq!(busy.post(9), Err(PostError::Full(9)));
    assert_eq!(
        idle.post(99),
        Err(PostError::Full(99)),
        "stale hint reloaded"
    );
    for i in 0..4 {
        assert_eq!(consumer.try_dequeue(), Ok(i));
    }
    assert_eq!(consumer.query().len, 0);
}

#[test]
fn head_epoch_follows_the_head_across_a_boundary() {
    let (poster, mut consumer) = bounded::<u64>(4).unwrap();
    fast_forward(&consumer, (1 << HEAD_EPOCH_SHIFT) - 1);
    let p = consumer.poster();
    p.post(1).unwrap();
    p.post(2).unwrap();
    let mut out = Vec::new();
    consumer.dequeue_batch(&mut out, 2).unwrap();
    assert_eq!(
        consumer
            .shared()
            .read_mostly
            .head_epoch
            .load(Ordering::Relaxed),
        1
    );
    drop(poster);
}

/// Close's first step only, as a closer stopped before its second would
/// leave it.
fn begin_close_only<T>(c: &crate::Consumer<T>) {
    c.shared().losses.close();
    assert!(!state::has(
        c.shared().state.load(Ordering::Relaxed),
        state::CLOSED
    ));
}

#[test]
fn an_arm_behind_a_closer_stopped_between_its_steps_finishes_the_close() {
    let (_poster, consumer) = bounded::<u64>(4).unwrap();
    begin_close_only(&consumer);
    let s = consumer.shared();
    assert!(matches!(s.arm(1), Arm::Armed(_)));
    let w = s.state.load(Ordering::Relaxed);
    assert!(state::has(w, state::CLOSED), "the arm finished the close");
    assert!(
        !state::has(w, state::ARMED) && state::has(w, state::NOTIFIED),
        "which took the arm and notified it"
    );
    assert_eq!(s.arm(1), Arm::Closed);
}

#[test]
fn a_wait_behind_a_closer_stopped_between_its_steps_ends_closed() {
    // Without the arm's finish, the wait would park until the closer ran
    // again: here never, so until its (generous) timeout.
    let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
    begin_close_only(&consumer);
    let r = consumer.wait(1, Some(std::time::Duration::from_secs(60)));
    assert_eq!(r, Err(crate::WaitError::Closed { available: 0 }));
}

#[test]
fn a_cno_enable_behind_a_closer_stopped_between_its_steps_delivers_its_key() {
    let mut cno = crate::Cno::new(1).unwrap();
    let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
    consumer.bind_cno(&cno, 5).unwrap();
    begin_close_only(&consumer);
    assert_eq!(consumer.enable_cno(), Ok(crate::ArmStatus::Armed));
    assert_eq!(cno.try_next(), Some(5), "the close's trigger, owed to it");
    assert_eq!(consumer.enable_cno(), Ok(crate::ArmStatus::Closed));
    assert_eq!(
        consumer.unbind_cno(),
        Some(5),
        "the barrier found it landed"
    );
}

#[test]
fn an_enable_again_behind_a_closer_stopped_between_its_steps_delivers_the_key() {
    let mut cno = crate::Cno::new(1).unwrap();
    let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
    consumer.bind_cno(&cno, 5).unwrap();
    assert_eq!(consumer.enable_cno(), Ok(crate::ArmStatus::Armed));
    begin_close_only(&consumer);
    assert_eq!(
        consumer.enable_cno(),
        Ok(crate::ArmStatus::Armed),
        "already"
    );
    assert_eq!(
        cno.try_next(),
        Some(5),
        "the close's trigger, owed since the first"
    );
    assert_eq!(
        consumer.unbind_cno(),
        Some(5),
        "the barrier found it landed"
    );
}

/// A waker whose wake panics.
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a CNO waker that panics");
    }
}

#[test]
fn a_cno_enable_that_finishes_a_close_counts_its_trigger_before_a_waker_s_panic() {
    use futures_core::Stream;
    let mut cno = crate::Cno::new(1).unwrap();
    let (_poster, mut consumer) = bounded::<u64>(4).unwrap();
    consumer.bind_cno(&cno, 5).unwrap();
    let waker = std::task::Waker::from(Arc::new(PanickingWaker));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut cno).poll_next(&mut cx).is_pending());
    begin_close_only(&consumer);
    let enable = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| consumer.enable_cno()));
    assert!(
        enable.is_err(),
        "the CNO waker's panic comes out of the enable"
    );
    // The unbind's barrier waits for the triggers the consumer counted: one
    // short, it would spin for ever (on a thread of its own here, so that
    // the test fails instead of hanging).
    let (done, unbound) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(consumer.unbind_cno()).unwrap());
    let limit = std::time::Duration::from_secs(60);
    assert_eq!(
        unbound.recv_timeout(limit),
        Ok(Some(5)),
        "the barrier ended"
    );
    assert_eq!(cno.try_next(), None, "unbound: the key was removed");
}

/// An event whose `Drop` panics, counting its drops.
struct PanicsOnDrop(Arc<AtomicU64>);
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("the event's Drop panics");
    }
}

#[test]
fn a_lossy_post_that_finishes_a_close_whose_waker_panics_drops_its_event_once() {
    // A lossy post on a full ring behind a closer stopped between its steps
    // finishes the close, which wakes the armed consumer: its waker panics
    // out of the post. The event, refused as closed, is dropped once on
    // that unwind, its own `Drop` panic swallowed: dropped by the unwind
    // itself, it would be a second panic, which aborts the process.
    let (poster, mut consumer) = bounded::<PanicsOnDrop>(1).unwrap();
    let waker = std::task::Waker::from(Arc::new(PanickingWaker));
    let mut recv = consumer.recv();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(&mut recv).poll(&mut cx).is_pending());
    drop(recv);
    let permit = poster.try_reserve().unwrap(); // full; the arm stays
    begin_close_only(&consumer);
    let drops = Arc::new(AtomicU64::new(0));
    let event = PanicsOnDrop(drops.clone());
    let post = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poster.post_lossy(event)));
    assert!(post.is_err(), "the waker's panic comes out of the post");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the event dropped once");
    assert!(consumer.is_closed(), "the post finished the close");
    drop(permit);
}

/// A batch asked for more than the ring holds, taking a full ring, stops
/// at the lap's end, not at a slot being written: it did not drain the
/// ring, and the next batch must not linger before it looks (with posters
/// refused as full meanwhile).
#[test]
fn a_batch_that_takes_a_full_ring_leaves_no_linger_for_the_next() {
    let (poster, mut consumer) = bounded::<u64>(4).unwrap();
    for i in 0..4 {
        poster.post(i).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(consumer.dequeue_batch(&mut out, 16), Ok(4));
    let s = consumer.shared();
    assert!(
        !s.consumer.pacer.take_drained(s.head()),
        "the full ring's batch marked the ring drained"
    );
}

/// Batches on a ring of two slots kept full: each scan that takes both
/// stops at the lap's end, not at a slot being written, so however few
/// events that is, it is no short scan after a run and must not linger
/// (posters are refused as full meanwhile).
#[test]
fn batches_that_take_a_full_two_slot_ring_do_not_linger() {
    let (poster, mut consumer) = bounded::<u64>(2).unwrap();
    let mut out = Vec::new();
    for _ in 0..3 {
        poster.post(0).unwrap();
        poster.post(1).unwrap();
        assert_eq!(consumer.dequeue_batch(&mut out, 16), Ok(2));
    }
    assert!(
        !consumer.shared().consumer.pacer.has_lingered(),
        "a batch that took the full ring lingered"
    );
}

/// The live poster count's transitions: a drop takes one off, and the
/// last live one ends the count (never through 0, where a handle made at
/// that moment could not tell a count ended from one about to be); an
/// increment tells whether it came after the end; handles made after it
/// count on above the mark, and their drops keep it.
#[test]
fn the_poster_count_ends_at_its_last_drop_and_stays_ended() {
    assert_eq!(poster_released(3), 2);
    assert_eq!(poster_released(2), 1);
    assert_eq!(poster_released(1), POSTERS_ENDED);
    assert!(!poster_count_ended(1));
    assert!(!poster_count_ended(2));
    assert!(poster_count_ended(POSTERS_ENDED));
    assert!(poster_count_ended(POSTERS_ENDED + 2));
    assert_eq!(poster_released(POSTERS_ENDED + 1), POSTERS_ENDED);
    assert_eq!(poster_released(POSTERS_ENDED + 2), POSTERS_ENDED + 1);
}

/// Handles the consumer makes after the last poster dropped find the EVD
/// closed, each of them, and their drops leave it so.
#[test]
fn posters_made_after_the_last_drop_find_the_evd_closed() {
    let (poster, consumer) = bounded::<u8>(2).unwrap();
    drop(poster);
    let (a, b) = (consumer.poster(), consumer.poster());
    assert_eq!(a.post(1), Err(PostError::Closed(1)));
    drop(a);
    assert_eq!(b.post(2), Err(PostError::Closed(2)));
    drop(b);
    assert!(consumer.is_closed());
    let c = consumer.poster();
    assert_eq!(c.post(3), Err(PostError::Closed(3)));
}
