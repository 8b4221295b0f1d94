//! Arm-then-check: an arm reports what it finds queued, one notification per
//! arm, `notified` sticky until an arm finds the ring empty, and the classic
//! race (an event between the last dequeue and the arm) reported as pending.

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
