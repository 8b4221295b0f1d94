//! Running user code that may panic (a handler, a waker, an event's `Drop`)
//! where a panic must not skip the steps after it: each step runs under
//! [`Panics::run`], which keeps the first panic, and [`Panics::resume`]
//! raises it once every step has run.
//!
//! A second panic while one is already unwinding aborts the process, so a
//! step never runs user code outside `run`, and `resume` does nothing on a
//! thread that is already unwinding (the first panic is on its way up).
//!
//! A caught panic's payload is user code too: its `Drop` may panic
//! (`panic_any` of a value whose destructor panics, rust-lang/rust#86027).
//! A payload the EVD does not hand on is given to [`discard`], never simply
//! dropped, so a swallowed panic stays swallowed and a step after it still
//! runs; [`caught`] is `catch_unwind` for a panic that is not re-raised.

use std::any::Any;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// The first panic caught by a sequence of steps.
#[derive(Default)]
pub(crate) struct Panics(Option<Box<dyn Any + Send>>);

impl Panics {
    /// Run `f`; if it panics, keep the panic (the first one only) and go on.
    pub(crate) fn run(&mut self, f: impl FnOnce()) {
        // AssertUnwindSafe: every caller runs user code on values it owns or
        // on state whose invariants hold before the call (the step is the
        // last thing done with them), so nothing half-updated is observed.
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            match self.0 {
                None => self.0 = Some(p),
                Some(_) => discard(p),
            }
        }
    }

    /// Drop `v`, keeping a panic of its destructor.
    pub(crate) fn drop<T>(&mut self, v: T) {
        self.run(move || drop(v));
    }

    /// Raise the first panic kept, unless this thread is already unwinding.
    /// Inline, with the raise out of line: a step sequence that kept no
    /// panic (every call on a hot path, such as a CNO trigger) pays a test.
    #[inline]
    pub(crate) fn resume(self) {
        if let Some(p) = self.0 {
            raise(p);
        }
    }
}

/// [`Panics::resume`]'s raise of a kept panic.
#[cold]
#[inline(never)]
fn raise(p: Box<dyn Any + Send>) {
    if std::thread::panicking() {
        discard(p);
    } else {
        resume_unwind(p);
    }
}

/// A value held across user code that may unwind past it (a post's event
/// while its reservation runs the upcall that drains a full ring, or while
/// a waiting post joins the room queue with a clone of its waker): dropped
/// under [`Panics`] if that happens, since its `Drop` (user code too)
/// panicking then would be a second panic during an unwind, which aborts.
/// Every path that does not unwind takes the value back whole with
/// [`Held::into_inner`], so this `Drop` runs only for an unwind (where
/// [`Panics::resume`] swallows the value's panic).
pub(crate) struct Held<T>(ManuallyDrop<T>);

impl<T> Held<T> {
    #[inline(always)]
    pub(crate) fn new(v: T) -> Self {
        Held(ManuallyDrop::new(v))
    }

    #[inline(always)]
    pub(crate) fn into_inner(self) -> T {
        let mut held = ManuallyDrop::new(self);
        // SAFETY: `held` is never dropped, so its `Drop` does not take the
        // value again: it is taken once, here.
        unsafe { ManuallyDrop::take(&mut held.0) }
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs at most once, and only when `into_inner` did
        // not run (it forgets the `Held`): the value is still there, and is
        // taken once.
        let v = unsafe { ManuallyDrop::take(&mut self.0) };
        let mut panics = Panics::default();
        panics.drop(v);
        panics.resume();
    }
}

/// Run `f`, swallowing its panic: false if it panicked. For user code whose
/// panic is not re-raised (a room or close waiter's `wake`).
pub(crate) fn caught(f: impl FnOnce()) -> bool {
    // AssertUnwindSafe: as in `Panics::run`.
    catch_unwind(AssertUnwindSafe(f)).map_err(discard).is_ok()
}

/// How many payloads in a chain [`discard`] drops (each the panic of the
/// previous one's `Drop`) before it leaks the next one instead.
const PAYLOADS_DROPPED: usize = 3;

/// Drop a caught panic's payload that is not handed on. Should its `Drop`
/// panic, that second panic's payload is dropped the same way (an ordinary
/// message, usually); a chain of payloads that each panic on drop is
/// leaked after [`PAYLOADS_DROPPED`], so the chain cannot keep this thread
/// for ever: a leak of a value built to panic costs less than an unwind out
/// of the EVD (or an abort, during one).
pub(crate) fn discard(payload: Box<dyn Any + Send>) {
    let mut payload = payload;
    for _ in 0..PAYLOADS_DROPPED {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(again) => payload = again,
        }
    }
    std::mem::forget(payload);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Held, Panics};
    use std::cell::Cell;

    #[test]
    fn every_step_runs_and_the_first_panic_is_raised_after_them() {
        let mut steps = Vec::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut panics = Panics::default();
            panics.run(|| panic!("first"));
            panics.run(|| steps.push(2));
            panics.run(|| panic!("second"));
            panics.run(|| steps.push(4));
            panics.resume();
        }));
        assert_eq!(steps, [2, 4]);
        let payload = r.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"first"));
    }

    /// A panic payload whose `Drop` panics (with a plain payload).
    struct Trapped;

    impl Drop for Trapped {
        fn drop(&mut self) {
            panic!("the payload's drop");
        }
    }

    fn plant_trapped() {
        std::panic::panic_any(Trapped);
    }

    #[test]
    fn a_second_panic_whose_payload_panics_on_drop_stops_no_step() {
        let mut steps = Vec::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut panics = Panics::default();
            panics.run(|| panic!("first"));
            panics.run(plant_trapped);
            panics.run(|| steps.push(3));
            panics.resume();
        }));
        assert_eq!(steps, [3]);
        let payload = r.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"first"));
    }

    #[test]
    fn a_swallowed_panic_whose_payload_panics_on_drop_stays_swallowed() {
        let r = std::panic::catch_unwind(|| super::caught(plant_trapped));
        assert_eq!(r.ok(), Some(false), "no panic escapes `caught`");
        assert!(super::caught(|| {}));
    }

    #[test]
    fn a_panic_kept_during_an_unwinding_is_discarded_even_if_its_payload_panics_on_drop() {
        /// Runs steps from its `Drop`, while the thread unwinds.
        struct InCleanup<'a>(&'a mut Vec<u32>);
        impl Drop for InCleanup<'_> {
            fn drop(&mut self) {
                assert!(std::thread::panicking());
                let mut panics = Panics::default();
                panics.run(plant_trapped);
                panics.run(|| self.0.push(2));
                panics.resume(); // would abort if the payload's drop unwound
                self.0.push(3);
            }
        }
        let mut steps = Vec::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _cleanup = InCleanup(&mut steps);
            panic!("the unwinding");
        }));
        assert_eq!(
            r.unwrap_err().downcast_ref::<&str>(),
            Some(&"the unwinding")
        );
        assert_eq!(steps, [2, 3]);
    }

    #[test]
    fn no_panic_resumes_nothing() {
        let mut panics = Panics::default();
        panics.drop(vec![1u8]);
        panics.resume();
    }

    /// Counts its drops; its drop panics if the flag is set.
    struct Counted<'a>(&'a Cell<usize>, bool);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
            if self.1 {
                panic!("a panicking destructor");
            }
        }
    }

    #[test]
    fn a_held_value_taken_back_is_not_dropped_by_the_guard() {
        let drops = Cell::new(0);
        let v = Held::new(Counted(&drops, false)).into_inner();
        assert_eq!(drops.get(), 0);
        drop(v);
        assert_eq!(drops.get(), 1);
    }

    #[test]
    fn a_held_value_an_unwind_passes_is_dropped_once_and_its_panic_swallowed() {
        let drops = Cell::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = Held::new(Counted(&drops, true));
            panic!("the user code it was held across");
        }));
        let message = r.err().and_then(|p| p.downcast_ref::<&str>().copied());
        assert_eq!(message, Some("the user code it was held across"));
        assert_eq!(drops.get(), 1);
    }
}
