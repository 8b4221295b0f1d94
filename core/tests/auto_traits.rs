//! The auto-trait and `Clone` promises of the public docs, one test per
//! promise, checked at compile time: each test's `const _` block fails to
//! type-check, and the file to build, if its promise stops holding. (The
//! negative promises are `compile_fail` doctests on the types themselves.)
//!
//! The event type is [`Event`], `Send` but not `Sync`: the handles' promises
//! hold for every event type [`evd::bounded`] accepts (`T: Send`), not only
//! for `Sync` ones.

use evd::{Cno, CnoHandle, Consumer, Handler, OwnedPermit, Permit, Poster};

/// `Send` and not `Sync`, like any event type that owns a `Cell`.
type Event = std::cell::Cell<u64>;

const fn assert_send<T: ?Sized + Send>() {}
const fn assert_sync<T: ?Sized + Sync>() {}
const fn assert_clone<T: Clone>() {}

/// `Poster`'s doc ("cloneable, `Send + Sync`, usable from any thread"), the
/// crate docs' "Handles" ("clone it; `Send + Sync`") and the README's quick
/// start ("Poster: Clone + Send + Sync").
#[test]
fn a_poster_is_clone_send_and_sync() {
    const _: () = {
        assert_clone::<Poster<Event>>();
        assert_send::<Poster<Event>>();
        assert_sync::<Poster<Event>>();
    };
}

/// `Consumer`'s doc and the crate docs' "Handles": "`Send`, not `Clone`"
/// (not `Clone`: a `compile_fail` doctest on `Consumer`).
#[test]
fn a_consumer_is_send() {
    const _: () = assert_send::<Consumer<Event>>();
}

/// `Cno`'s doc: "`Send` and `Sync`" (waiting takes `&mut self`; binding
/// through `&Cno` is what sharing allows).
#[test]
fn a_cno_is_send_and_sync() {
    const _: () = {
        assert_send::<Cno>();
        assert_sync::<Cno>();
    };
}

/// `CnoHandle`'s doc: "`Clone + Send + Sync`", to bind EVDs from any thread.
#[test]
fn a_cno_handle_is_clone_send_and_sync() {
    const _: () = {
        assert_clone::<CnoHandle>();
        assert_send::<CnoHandle>();
        assert_sync::<CnoHandle>();
    };
}

/// The crate docs' "Upcalls": the handler (`Fn(Result<T, Overflow>, bool)`)
/// is `Send + Sync`.
#[test]
fn an_upcall_handler_is_send_and_sync() {
    const _: () = {
        assert_send::<Handler<Event>>();
        assert_sync::<Handler<Event>>();
    };
}

/// `Permit`'s and `OwnedPermit`'s docs: "`Send` and `Sync` as `Poster` is"
/// (a permit moves into the task that sends with it).
#[test]
fn permits_are_send_and_sync() {
    const _: () = {
        assert_send::<Permit<'static, Event>>();
        assert_sync::<Permit<'static, Event>>();
        assert_send::<OwnedPermit<Event>>();
        assert_sync::<OwnedPermit<Event>>();
    };
}
