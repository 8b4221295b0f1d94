//! Running user code that may panic (a handler, a waker, an event's `Drop`)
//! where a panic must not skip the steps after it: each step runs under
//! [`Panics::run`], which keeps the first panic, and [`Panics::resume`]
//! raises it once every step has run.
//!
//! A second panic while one is already unwinding aborts the process, so a
//! step never runs user code outside `run`, and `resume` does nothing on a
//! thread that is already unwinding (the first panic is on its way up).

use std::any::Any;
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
            self.0.get_or_insert(p);
        }
    }

    /// Drop `v`, keeping a panic of its destructor.
    pub(crate) fn drop<T>(&mut self, v: T) {
        self.run(move || drop(v));
    }

    /// Raise the first panic kept, unless this thread is already unwinding.
    pub(crate) fn resume(self) {
        if let Some(p) = self.0 {
            if !std::thread::panicking() {
                resume_unwind(p);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Panics;

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

    #[test]
    fn no_panic_resumes_nothing() {
        let mut panics = Panics::default();
        panics.drop(vec![1u8]);
        panics.resume();
    }
}
