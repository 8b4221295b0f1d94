//! The thread-local chain of handler frames: which EVDs' handler calls are
//! running on this thread's stack.
//!
//! A frame is pushed for every upcall handler call and for the closure of
//! [`Consumer::dequeue_with`](crate::Consumer::dequeue_with): while it is on
//! the stack the thread is that EVD's consumer side. A frame is also pushed
//! while a counted instance runs wakers it owes before or between its
//! handler calls (an instance giving the token back for a call under
//! `ManyInstances`, a permit send that started one): waiting for room there
//! would wait for that instance, stopped under the waker. And one is pushed
//! while the upcalls' owner drops a handler with upcalls disabled (a
//! teardown, a `set_handler` then): only that thread could free a slot for
//! a post from its `Drop`. The hand-back's
//! frame is marked as one where the token is free ([`as_token_hand_back_of`]):
//! a room waiter there may start the draining instance itself (see
//! [`in_token_hand_back`]). Nested calls (a handler
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
//! by [`as_handler_of`] or [`as_token_hand_back_of`], on the stack of the call that owns it, and unlinked
//! by its guard's drop (also on unwind) before that call returns, innermost
//! first. Only this thread reads or writes its chain, so no ordering is
//! involved.

/// One running handler call on this thread's stack.
struct Frame {
    evd: usize,
    /// An instance's hand-back of the token ([`as_token_hand_back_of`]).
    hand_back: bool,
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

/// True if the innermost frame of `evd` on this thread's stack is an
/// instance's hand-back of the token: the token is free, so a room waiter
/// may start the draining instance, which it does not from a handler call
/// (documented there: `Full` at once).
pub(crate) fn in_token_hand_back(evd: usize) -> bool {
    let mut innermost = None;
    for_each_frame(|frame| {
        if frame.evd == evd && innermost.is_none() {
            innermost = Some(frame.hand_back);
        }
    });
    innermost == Some(true)
}

/// Run `f` with a frame of `evd` linked, as a handler call is.
pub(crate) fn as_handler_of<R>(evd: usize, f: impl FnOnce() -> R) -> R {
    linked(evd, false, f)
}

/// Run `f` with a frame of `evd` linked, marked as an instance's hand-back
/// of the token ([`in_token_hand_back`]).
pub(crate) fn as_token_hand_back_of<R>(evd: usize, f: impl FnOnce() -> R) -> R {
    linked(evd, true, f)
}

fn linked<R>(evd: usize, hand_back: bool, f: impl FnOnce() -> R) -> R {
    let frame = Frame {
        evd,
        hand_back,
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
