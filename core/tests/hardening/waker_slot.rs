//! The promise for the consumer's waker slot: a waker whose `clone` or
//! `drop` panics (user code the slot runs while a poll registers) never
//! wedges the slot. The panic reaches the poll that registered; the next
//! registration takes, the next notification wakes it, and a wake that came
//! while the panicking registration held the slot still reaches a waker of
//! the registering task.
//!
//! A wake "during the registration" is made deterministic here: the waker's
//! `clone`, which the slot runs while it holds its registering lock, posts
//! to the armed EVD itself.

use crate::common::{counting, poll as poll_once};
use crate::panics::{must_panic, plant, quiet_planted_panics};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};

/// A waker on its own vtable, whose `clone` and `drop` panic on demand and
/// whose `clone` may first run a hook. Leaked: it lives as long as the test
/// binary, so no count of its clones is needed.
struct Fragile {
    clone_panics: AtomicBool,
    drop_panics: AtomicBool,
    wakes: AtomicU64,
    during_clone: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop_raw);

fn fragile(p: *const ()) -> &'static Fragile {
    // SAFETY: every RawWaker of this vtable points to a leaked `Fragile`.
    unsafe { &*p.cast::<Fragile>() }
}

fn clone(p: *const ()) -> RawWaker {
    let f = fragile(p);
    let hook = f.during_clone.lock().unwrap().take();
    if let Some(hook) = hook {
        hook();
    }
    if f.clone_panics.load(SeqCst) {
        plant();
    }
    RawWaker::new(p, &VTABLE)
}

fn wake(p: *const ()) {
    fragile(p).wakes.fetch_add(1, SeqCst);
}

fn drop_raw(p: *const ()) {
    if fragile(p).drop_panics.load(SeqCst) {
        plant();
    }
}

impl Fragile {
    fn leak() -> &'static Fragile {
        Box::leak(Box::new(Fragile {
            clone_panics: AtomicBool::new(false),
            drop_panics: AtomicBool::new(false),
            wakes: AtomicU64::new(0),
            during_clone: Mutex::new(None),
        }))
    }

    fn waker(&'static self) -> Waker {
        let raw = RawWaker::new((self as *const Fragile).cast(), &VTABLE);
        // SAFETY: the vtable's functions keep RawWaker's contract: the data
        // pointer is a leaked `Fragile`, valid for ever and `Sync`.
        unsafe { Waker::from_raw(raw) }
    }

    fn wakes(&self) -> u64 {
        self.wakes.load(SeqCst)
    }

    /// Make the next clone post to `poster` first: a wake that comes while
    /// the slot is being registered (the EVD is armed).
    fn post_on_clone(&self, poster: &evd::Poster<u32>) {
        let p = poster.clone();
        *self.during_clone.lock().unwrap() = Some(Box::new(move || p.post(1).unwrap()));
    }
}

/// The slot is free: a `Recv` polled with a fresh waker is woken by the next
/// post and then takes the event.
fn next_registration_is_woken(poster: &evd::Poster<u32>, consumer: &mut evd::Consumer<u32>) {
    let (count, waker) = counting();
    let mut recv = consumer.recv();
    assert!(
        poll_once(&mut recv, &waker).is_pending(),
        "the ring is empty"
    );
    poster.post(7).unwrap();
    assert_eq!(count.wakes(), 1, "the next post woke the new registration");
    assert_eq!(poll_once(&mut recv, &waker), Poll::Ready(Ok(7)));
}

#[test]
fn a_waker_whose_clone_panics_leaves_the_slot_free() {
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let f = Fragile::leak();
    f.clone_panics.store(true, SeqCst);
    let mut recv = consumer.recv();
    must_panic("the clone's panic reaches the poll", || {
        poll_once(&mut recv, &f.waker())
    });
    drop(recv);
    next_registration_is_woken(&poster, &mut consumer);
}

#[test]
fn a_replaced_waker_whose_drop_panics_leaves_the_slot_free() {
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let f = Fragile::leak();
    let mut recv = consumer.recv();
    assert!(poll_once(&mut recv, &f.waker()).is_pending());
    // The slot holds a clone of `f`'s waker; replacing it drops that clone.
    f.drop_panics.store(true, SeqCst);
    let (count, waker) = counting();
    must_panic("the replaced waker's drop reaches the poll", || {
        poll_once(&mut recv, &waker)
    });
    f.drop_panics.store(false, SeqCst);
    // The new waker took the slot before the old one was dropped, and the
    // EVD is still armed from the first poll: the next post wakes it.
    poster.post(1).unwrap();
    assert_eq!(
        count.wakes(),
        1,
        "the post woke the waker that replaced f's"
    );
    assert_eq!(f.wakes(), 0);
    assert_eq!(poll_once(&mut recv, &waker), Poll::Ready(Ok(1)));
    drop(recv);
    next_registration_is_woken(&poster, &mut consumer);
}

#[test]
fn a_wake_during_a_registration_whose_clone_panics_reaches_the_registering_waker() {
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let (old, old_waker) = counting();
    let mut recv = consumer.recv();
    assert!(poll_once(&mut recv, &old_waker).is_pending());
    assert!(poster.query().armed);
    // Polled again with `f`, whose clone posts (the post takes the arm and
    // wakes the slot, which is being registered), then panics.
    let f = Fragile::leak();
    f.post_on_clone(&poster);
    f.clone_panics.store(true, SeqCst);
    must_panic("the clone's panic reaches the poll", || {
        poll_once(&mut recv, &f.waker())
    });
    assert_eq!(f.wakes(), 1, "the wake reached the registering waker");
    assert_eq!(old.wakes(), 0, "and only it");
    assert_eq!(poll_once(&mut recv, &old_waker), Poll::Ready(Ok(1)));
    drop(recv);
    next_registration_is_woken(&poster, &mut consumer);
}

#[test]
fn a_wake_during_a_registration_is_delivered_before_the_replaced_waker_panics_on_drop() {
    quiet_planted_panics();
    let (poster, mut consumer) = evd::bounded::<u32>(4).unwrap();
    let first = Fragile::leak();
    let mut recv = consumer.recv();
    assert!(poll_once(&mut recv, &first.waker()).is_pending());
    // Polled again with `second`, whose clone posts while the slot is being
    // registered; the replaced `first` panics when dropped.
    let second = Fragile::leak();
    second.post_on_clone(&poster);
    first.drop_panics.store(true, SeqCst);
    must_panic("the replaced waker's drop reaches the poll", || {
        poll_once(&mut recv, &second.waker())
    });
    first.drop_panics.store(false, SeqCst);
    assert_eq!(second.wakes(), 1, "the wake reached the new waker");
    assert_eq!(first.wakes(), 0);
    assert_eq!(poll_once(&mut recv, &second.waker()), Poll::Ready(Ok(1)));
    drop(recv);
    next_registration_is_woken(&poster, &mut consumer);
}
