//! One upcall instance: the consumer side run on a posting thread while it
//! holds the token, through [`Shared`]'s token operations.

use crate::error::{Overflow, TryDequeueError};
use crate::shared::Shared;
use crate::state::{self, PolicyBits};
use crate::sync::Backoff;

/// One running handler call on this thread's stack. Nested upcalls (a
/// handler that posts to another EVD whose upcall runs inline) form a chain,
/// innermost first, so "am I inside an upcall of this EVD?" is answered for
/// every EVD on the stack, not only the innermost one.
struct Frame {
    evd: usize,
    outer: *const Frame,
}

#[cfg(loom)]
loom::thread_local! {
    static INNERMOST: std::cell::Cell<*const Frame> = std::cell::Cell::new(std::ptr::null());
}
#[cfg(shuttle)]
shuttle::thread_local! {
    static INNERMOST: std::cell::Cell<*const Frame> = const { std::cell::Cell::new(std::ptr::null()) };
}
#[cfg(not(any(loom, shuttle)))]
std::thread_local! {
    static INNERMOST: std::cell::Cell<*const Frame> = const { std::cell::Cell::new(std::ptr::null()) };
}

fn evd_id<T>(s: &Shared<T>) -> usize {
    s as *const Shared<T> as usize
}

/// True if this thread is inside one of `s`'s upcalls, at any depth.
pub(crate) fn in_own_upcall<T>(s: &Shared<T>) -> bool {
    let id = evd_id(s);
    INNERMOST.with(|innermost| {
        let mut f = innermost.get();
        while !f.is_null() {
            // SAFETY: a frame is linked only while the `deliver` call that owns
            // it (on this thread's stack, borrowed by its `Link`) runs, and
            // unlinked when that `Link` drops, innermost first; so every
            // pointer in the chain points to a live frame.
            let frame = unsafe { &*f };
            if frame.evd == id {
                return true;
            }
            f = frame.outer;
        }
        false
    })
}

/// Links a frame as this thread's innermost handler call; unlinks it on
/// drop (including on unwind).
struct Link<'a> {
    frame: &'a Frame,
}

impl<'a> Link<'a> {
    fn push(frame: &'a Frame) -> Self {
        INNERMOST.with(|innermost| innermost.set(frame));
        Link { frame }
    }
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        INNERMOST.with(|innermost| innermost.set(self.frame.outer));
    }
}

/// Gives an instance's share of the word back if its handler unwinds.
struct InstanceGuard<'a, T> {
    shared: &'a Shared<T>,
    holds_token: bool,
}

impl<T> Drop for InstanceGuard<'_, T> {
    fn drop(&mut self) {
        let new = self.shared.abandon_instance(self.holds_token);
        wake_tearer(self.shared, new);
    }
}

/// After an instance ended: if upcalls are disabled and none is left, a
/// teardown may be waiting for exactly this.
fn wake_tearer<T>(s: &Shared<T>, new: u64) {
    if state::policy(new) == PolicyBits::Disabled && state::instances(new) == 0 {
        s.wake_waker();
    }
}

fn deliver<T>(s: &Shared<T>, item: Result<T, Overflow>) {
    // Another event is ready behind this one (its stamp says so; the state
    // word is not consulted).
    let more = s.ready(1) > 0;
    let frame = Frame {
        evd: evd_id(s),
        outer: INNERMOST.with(|innermost| innermost.get()),
    };
    let _link = Link::push(&frame);
    s.call_handler(item, more);
}

/// Run one upcall instance. The caller's CAS took the token and counted the
/// instance in the word.
pub(crate) fn run<T>(s: &Shared<T>) {
    s.count_instance_start();
    let mut guard = InstanceGuard {
        shared: s,
        holds_token: true,
    };
    loop {
        // Holding the token: we are the consumer now.
        let policy = s.policy();
        let item = match policy {
            PolicyBits::Disabled => None,
            _ => match s.dequeue_one() {
                Ok(ev) => Some(Ok(ev)),
                Err(TryDequeueError::Overflow(o)) => Some(Err(o)),
                Err(TryDequeueError::Empty | TryDequeueError::Closed) => None,
            },
        };
        match (item, policy) {
            (Some(item), PolicyBits::Many) => {
                s.release_token();
                guard.holds_token = false;
                deliver(s, item);
                if let Err(new) = s.reacquire_token() {
                    std::mem::forget(guard);
                    wake_tearer(s, new);
                    return;
                }
                guard.holds_token = true;
            }
            (Some(item), _) => deliver(s, item),
            (None, _) => {
                if try_exit(s) {
                    std::mem::forget(guard);
                    return;
                }
            }
        }
    }
}

/// The exit CAS; false if work arrived (or a reserved slot is still being
/// written) and this instance must go on.
fn try_exit<T>(s: &Shared<T>) -> bool {
    match s.exit_instance() {
        Some(new) => {
            if s.loss_pending() && s.restart_for_loss() {
                return false;
            }
            wake_tearer(s, new);
            true
        }
        None => {
            // A poster holds a reserved slot at the head and is writing it.
            Backoff::new().snooze();
            false
        }
    }
}
