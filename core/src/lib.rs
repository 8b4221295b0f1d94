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
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod error;
mod evd;
#[cfg(all(target_os = "linux", not(loom)))]
mod eventfd;
mod future;
mod notify;
mod query;
mod ring;
pub mod state;
mod sync;
mod upcall;
mod wait;

pub use error::{
    BatchPostError, CreateError, Overflow, PolicyError, PostError, RecvError, ResizeError,
    TryDequeueError, WaitError,
};
pub use evd::{bounded, ArmStatus, Consumer, Lossy, Poster, DEFAULT_SPIN_BUDGET, MAX_CAPACITY};
#[cfg(all(target_os = "linux", not(loom)))]
pub use eventfd::NotifyFd;
pub use future::Recv;
pub use query::{Query, UpcallPolicy};
pub use state::Invoke;
pub use upcall::{Handler, Upcalls};
