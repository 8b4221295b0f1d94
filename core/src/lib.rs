//! # evd — a lock-free event dispatcher
//!
//! An EVD collects events (RDMA completions, connection events, async errors,
//! software events) from any number of posting threads and hands them to one
//! consumer: by dequeue, blocking wait, async await, an eventfd, or an upcall
//! run on the posting thread.
//!
//! Its core is a bounded MPSC ring whose tail lives in the same atomic word as
//! the notification flags ([`state`]). Re-enabling notification is one CAS
//! that either arms or reports that events are pending, so the consumer never
//! needs the "arm, then poll once more" of verbs, UCX or libfabric:
//!
//! ```
//! use evd::ArmStatus;
//! let (poster, mut consumer) = evd::bounded::<u64>(1024).unwrap();
//! let producer = std::thread::spawn(move || {
//!     for i in 0..10_000 { while poster.post(i).is_err() { std::hint::spin_loop(); } }
//! });
//! let mut next = 0;
//! while next < 10_000 {
//!     while let Ok(v) = consumer.try_dequeue() {
//!         assert_eq!(v, next);
//!         next += 1;
//!     }
//!     match consumer.arm() {
//!         // Nothing was posted since the last dequeue: safe to sleep.
//!         ArmStatus::Armed => { let _ = consumer.wait(1, None); }
//!         // An event slipped in between the dequeue and the arm: drain again.
//!         ArmStatus::Pending => {}
//!         ArmStatus::Closed => break,
//!     }
//! }
//! producer.join().unwrap();
//! ```
//!
//! Handles: [`Poster`] (clone it; `Send + Sync`; lock-free, allocation-free
//! posts) and one [`Consumer`] (`Send`, not `Clone`: the single-consumer rule
//! is in the types). [`Consumer::into_upcalls`] turns the consumer into an
//! [`Upcalls`] dispatcher under DAT's upcall policies.
//!
//! # Where things live
//!
//! The modules form a chain, each using only those before it:
//!
//! | module | concept | a change goes here when… |
//! |---|---|---|
//! | [`state`] | the state word and the loss word: bit layout, transition table, pure `const fn` transitions | a new bit or transition (and the fuzz crate's reference model, `fuzz/src/spec.rs`) |
//! | `ring` | slot storage and stamps | the slot layout changes |
//! | `shared` | the engine: every atomic operation, each ordering argued once, a one-page protocol summary | an ordering question, or a new atomic step |
//! | `poster` | [`Poster`], [`Lossy`] | a new way to post |
//! | `consumer/` | [`Consumer`], [`ArmStatus`]; `wait` (blocking waits and dequeues), `iter` ([`TryIter`], [`Iter`], [`IntoIter`]), `future` ([`Recv`], `Stream`), `eventfd` ([`NotifyFd`]) | a new consumer behaviour |
//! | `upcall/` | [`Upcalls`] and its policies; `instance` (one upcall run); `handler` (the replaceable handler) | upcall policy or handler changes |
//! | `error`, `query`, `notify`, `sync` | typed errors, [`Query`], notification targets, std/loom switch | — |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod consumer;
mod error;
mod notify;
mod poster;
mod query;
mod ring;
mod room;
mod shared;
// Not part of the semver API: exposed for the fuzz crate's reference model
// (`fuzz/src/spec.rs`), and may change in any release.
#[doc(hidden)]
pub mod state;
mod sync;
mod upcall;

#[cfg(all(target_os = "linux", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub use consumer::NotifyFd;
pub use consumer::{ArmStatus, Consumer, IntoIter, Iter, Recv, TryIter, DEFAULT_SPIN_BUDGET};
pub use error::{
    BatchPostError, CreateError, DequeueError, Overflow, PolicyError, PostError, RecvError,
    ResizeError, TryDequeueError, WaitError,
};
pub use poster::{Lossy, PostAsync, PostSink, Poster};
pub use query::{Query, UpcallPolicy};
pub use shared::MAX_CAPACITY;
pub use state::Invoke;
pub use upcall::{Handler, Upcalls};

/// Create an EVD holding at least `capacity` events, split into its posting
/// handle and its consumer.
///
/// The capacity is rounded up to a power of two (as DAT's `evd_min_qlen` is a
/// minimum); [`Consumer::query`] reports the real one.
///
/// ```
/// let (poster, mut consumer) = evd::bounded::<&str>(8).unwrap();
/// poster.post("hello").unwrap();
/// assert_eq!(consumer.try_dequeue(), Ok("hello"));
///
/// assert_eq!(evd::bounded::<u8>(0).unwrap_err(), evd::CreateError::ZeroCapacity);
/// ```
pub fn bounded<T: Send>(capacity: usize) -> Result<(Poster<T>, Consumer<T>), CreateError> {
    if capacity == 0 {
        return Err(CreateError::ZeroCapacity);
    }
    let log2 = shared::cap_log2_for(capacity).ok_or(CreateError::CapacityTooLarge {
        requested: capacity,
    })?;
    let buffer = ring::Buffer::try_new(log2).ok_or(CreateError::AllocFailed {
        capacity: 1 << log2,
    })?;
    let shared = sync::Arc::new(shared::Shared::new(log2, buffer));
    Ok((Poster::new(shared.clone(), 0), Consumer::new(shared)))
}

/// Under `--cfg shuttle` only: the fuzz crate's hook on the state word (see
/// `sync.rs`). Not part of the API.
#[cfg(shuttle)]
#[doc(hidden)]
pub use sync::set_cas_observer;
