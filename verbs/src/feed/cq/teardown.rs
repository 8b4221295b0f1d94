//! A [`Feed`]'s end: handed back whole ([`Feed::into_parts`]) or dropped.
//! Either way every channel event got is acknowledged before the CQ is
//! destroyed (the `ibv_get_cq_event` rule), and the user code run on the
//! way (the event type's `From` and `Drop`, the provider's ack and destroy)
//! runs one piece at a time, so that no panic comes while another unwinds
//! (an abort), and nothing taken out of the CQ is lost to another's panic.

use super::Feed;
use crate::driver::Panic;
use crate::event::VerbsEvent;
use crate::source::CompletionQueue;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

impl<C: CompletionQueue, T: From<VerbsEvent> + Send> Feed<C, T> {
    /// Tear down: acknowledge every channel event got, and hand back the CQ
    /// (not destroyed yet) and the events polled but never posted (held while
    /// the EVD was full or closed), in order. Completions a panicking `From`
    /// left unconverted are converted first; one whose `From` panics again
    /// is lost, as in [`progress`](Self::progress), its panic swallowed.
    ///
    /// # Panics
    ///
    /// If the CQ's `ack_events` panics: the feed is then dropped on the way
    /// out (the CQ destroyed, the held events dropped, its poster gone) and
    /// the panic goes on to the caller.
    ///
    /// ```
    /// use evd_verbs::{Feed, CqId, VerbsEvent, WorkCompletion, soft::SoftCq};
    /// let (poster, consumer) = evd::bounded::<VerbsEvent>(1).unwrap();
    /// let (cq, producer) = SoftCq::new(16).unwrap();
    /// let mut feed = Feed::new(cq, CqId(0), poster);
    /// producer.push(WorkCompletion::default()).unwrap();
    /// feed.progress(16);
    /// let (cq, undelivered) = feed.into_parts();
    /// assert!(undelivered.is_empty());
    /// assert!(cq.destroy().is_ok());
    /// # drop(consumer);
    /// ```
    pub fn into_parts(mut self) -> (C, Vec<T>) {
        // The completions a panicking `From` left, and a failure's error
        // still owed, are handed back with the rest; a `From` that panics
        // again loses only the one it panicked on (its panic swallowed), as
        // in `progress`, never what was polled or converted before.
        while !self.unconverted.is_empty() || self.converting {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.convert_polled())) {
                drop(Panic::new(p));
            }
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.hold_owed_error())) {
            drop(Panic::new(p));
        }
        // Before the feed is made `ManuallyDrop`: an ack that panics (user
        // code) unwinds through the feed's `Drop`, which destroys the CQ and
        // drops the held events and the poster (the EVD sees its poster go),
        // instead of leaking them.
        self.ack_all();
        let mut me = ManuallyDrop::new(self);
        let undelivered = std::mem::take(&mut me.held);
        drop(me.arm_error.take());
        // SAFETY: `me` is never used or dropped after these reads, so the CQ
        // and the poster are each moved out exactly once; `held` and
        // `arm_error` were taken (an empty Vec and `None` own nothing); the
        // other fields are plain data with no destructor.
        let (cq, room) = unsafe { (std::ptr::read(&me.cq), std::ptr::read(&me.room)) };
        drop(room);
        (ManuallyDrop::into_inner(cq), undelivered)
    }
}

impl<C: CompletionQueue, T> Drop for Feed<C, T> {
    fn drop(&mut self) {
        // Every step runs user code that may panic (the provider's ack and
        // destroy, the held events' `Drop`): each under its own catch, so
        // that no panic comes while another unwinds (an abort); the first
        // goes on after the last step, to the caller who dropped the feed.
        let mut first = None;
        let mut step = |f: &mut dyn FnMut()| {
            // AssertUnwindSafe: each step is the last use of what it drops.
            if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
                match first {
                    None => first = Some(p),
                    Some(_) => drop(Panic::new(p)),
                }
            }
        };
        // The ibv_get_cq_event rule: every event got is acknowledged before
        // the CQ is destroyed.
        step(&mut || self.ack_all());
        // The events held (polled, then refused by a full EVD).
        for ev in self.held.drain(..) {
            let mut ev = Some(ev);
            step(&mut || drop(ev.take()));
        }
        // SAFETY: `drop` runs once, and the CQ is not used after this (the
        // fields left are dropped by the glue, the CQ not among them: it
        // is `ManuallyDrop`); `into_parts` forgets the feed instead.
        let mut cq = Some(unsafe { ManuallyDrop::take(&mut self.cq) });
        step(&mut || drop(cq.take()));
        if let Some(p) = first {
            if std::thread::panicking() {
                drop(Panic::new(p));
            } else {
                resume_unwind(p);
            }
        }
    }
}
