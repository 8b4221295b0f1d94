//! The thread-local chain of handler frames: which EVDs' handler calls are
//! running on this thread's stack.
//!
//! A frame is pushed for every upcall handler call and for the closure of
//! [`Consumer::dequeue_with`](crate::Consumer::dequeue_with): while it is on
//! the stack the thread is that EVD's consumer side. Nested calls (a handler
//! that posts to another EVD whose upcall runs inline) form a chain,
//! innermost first, so "am I inside a handler call of this EVD?" is answered
//! for every EVD on the stack, not only the innermost one.
//!
//! An EVD is named by an id, the address of its shared state, which stays
//! the same while any handle (and so any frame naming it) lives. This module
//! names no other module of the crate: the engine and the handles call it.
//!
//! # Invariant
//!
//! Every pointer in the chain points to a live frame: a frame is linked only
//! by [`as_handler_of`], on the stack of the call that owns it, and unlinked
//! by its guard's drop (also on unwind) before that call returns, innermost
//! first. Only this thread reads or writes its chain, so no ordering is
//! involved.

/// One running handler call on this thread's stack.
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

/// Calls `f` on every frame of this thread's chain, innermost first.
fn for_each_frame(mut f: impl FnMut(&Frame)) {
    INNERMOST.with(|innermost| {
        let mut p = innermost.get();
        while !p.is_null() {
            // SAFETY: every pointer in the chain points to a live frame (the
            // module's invariant).
            let frame = unsafe { &*p };
            f(frame);
            p = frame.outer;
        }
    })
}

/// True if this thread is inside one of `evd`'s handler calls, at any depth:
/// an upcall, or the closure of
/// [`Consumer::dequeue_with`](crate::Consumer::dequeue_with). The thread is
/// then `evd`'s consumer side, and must not wait for room in it.
pub(crate) fn in_own_handler(evd: usize) -> bool {
    let mut found = false;
    for_each_frame(|frame| found |= frame.evd == evd);
    found
}

/// How many of `evd`'s handler calls are on this thread's stack (each one an
/// upcall instance of `evd` in flight, once it is in upcall mode: the
/// consumer, which `dequeue_with` needs, is then inside the dispatcher).
pub(crate) fn own_calls(evd: usize) -> u64 {
    let mut n = 0;
    for_each_frame(|frame| n += u64::from(frame.evd == evd));
    n
}

/// Run `f` with a frame of `evd` linked, as a handler call is.
pub(crate) fn as_handler_of<R>(evd: usize, f: impl FnOnce() -> R) -> R {
    let frame = Frame {
        evd,
        outer: INNERMOST.with(|innermost| innermost.get()),
    };
    let _linked = FrameGuard::push(&frame);
    f()
}

/// Links a frame as this thread's innermost handler call; unlinks it on
/// drop (including on unwind).
struct FrameGuard<'a> {
    frame: &'a Frame,
}

impl<'a> FrameGuard<'a> {
    fn push(frame: &'a Frame) -> Self {
        INNERMOST.with(|innermost| innermost.set(frame));
        FrameGuard { frame }
    }
}

impl Drop for FrameGuard<'_> {
    fn drop(&mut self) {
        INNERMOST.with(|innermost| innermost.set(self.frame.outer));
    }
}
