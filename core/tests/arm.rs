//! Arm-then-check: an arm reports what it finds queued, one notification per
//! arm, `notified` sticky until an arm finds the ring empty, the classic
//! race (an event between the last dequeue and the arm) reported as pending,
//! and an eventfd made after an answered arm carrying that notification.

mod common;
use common::{armed_empty, assert_report, lose_twice_around_a_report};
use evd::{ArmStatus, TryDequeueError};

#[test]
fn an_arm_with_only_a_report_pending_says_pending_clears_notified_and_arms_nothing() {
    let (poster, mut consumer) = armed_empty(1);
    poster.post(1).unwrap(); // disarms and notifies
    assert!(consumer.query().notified);
    lose_twice_around_a_report(&poster, &mut consumer, [2, 3], 1, "");
    // The ring is empty; one report is pending.
    assert_eq!(consumer.arm(), ArmStatus::Pending, "a report is work");
    let q = consumer.query();
    assert!(!q.notified && !q.armed, "notified cleared, nothing armed");
    assert_report(&mut consumer, 1);
    assert_eq!(consumer.arm(), ArmStatus::Armed);
}

#[test]
fn classic_race_event_between_last_dequeue_and_arm_is_reported_pending() {
    let (poster, mut consumer) = evd::bounded::<u32>(8).unwrap();
    assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty)); // last dequeue
    poster.post(1).unwrap(); // lands in the window
    assert_eq!(
        consumer.arm(),
        ArmStatus::Pending,
        "the arm itself reports it"
    );
    assert!(!consumer.query().armed);
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.arm(), ArmStatus::Armed);
}

#[test]
fn one_notification_per_arm() {
    let (poster, consumer) = armed_empty(8);
    for i in 0..5 {
        poster.post(i).unwrap();
    }
    assert_eq!(consumer.query().notifications, 1);
}

#[test]
fn notified_is_sticky_until_an_arm_finds_the_ring_empty() {
    let (poster, mut consumer) = armed_empty(8);
    poster.post(1).unwrap();
    poster.post(2).unwrap();
    assert!(consumer.query().notified);
    consumer.try_dequeue().unwrap();
    assert!(
        consumer.query().notified,
        "draining alone does not clear it"
    );
    assert_eq!(consumer.arm(), ArmStatus::Pending);
    assert!(
        consumer.query().notified,
        "an arm that finds events keeps it"
    );
    consumer.try_dequeue().unwrap();
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    assert!(
        !consumer.query().notified,
        "drained after re-arming: cleared"
    );
}

#[test]
fn an_eventfd_made_after_an_answered_arm_is_readable_for_that_post() {
    let (poster, mut consumer) = armed_empty(4);
    poster.post(1).unwrap(); // takes ARMED; no eventfd yet
    let fd = consumer.notify_fd().unwrap();
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "the answered arm is on the fd"
    );
    assert_eq!(
        consumer.notify_fd().unwrap().acknowledge().unwrap(),
        0,
        "only the call that makes the fd writes it"
    );
    assert_eq!(consumer.try_dequeue(), Ok(1));
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    poster.post(2).unwrap();
    assert_eq!(
        fd.acknowledge().unwrap(),
        1,
        "later posts write it as usual"
    );
}

#[test]
fn an_eventfd_made_after_a_close_of_an_armed_evd_is_readable() {
    let (poster, mut consumer) = armed_empty(4);
    poster.close();
    let fd = consumer.notify_fd().unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 1);
    assert_eq!(consumer.arm(), ArmStatus::Closed);
}

#[test]
fn an_eventfd_made_while_armed_and_unanswered_starts_unreadable() {
    let (poster, mut consumer) = armed_empty(4);
    let fd = consumer.notify_fd().unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 0, "no notification fired yet");
    poster.post(1).unwrap();
    assert_eq!(fd.acknowledge().unwrap(), 1);
}

/// The post and the fd's making race: whichever comes first, once both are
/// done the fd holds the notification (a post that saw no fd left
/// `notified` for the fd's maker).
#[test]
fn an_eventfd_made_while_a_post_answers_the_arm_never_misses_it() {
    for _ in 0..2_000 {
        let (poster, mut consumer) = armed_empty(4);
        let post = std::thread::spawn(move || {
            poster.post(1).unwrap();
            poster
        });
        let fd = consumer.notify_fd().unwrap();
        let _poster = post.join().unwrap();
        assert!(
            fd.acknowledge().unwrap() >= 1,
            "the notification reached the fd"
        );
    }
}
