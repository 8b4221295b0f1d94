//! The events a feed posts into an EVD.
//!
//! [`VerbsEvent`] is what the completion and async feeds post: a work
//! completion ([`completion`]) or a device async event ([`async_event`]);
//! connection-manager events ([`cm`]) are posted as they are. A new kind of
//! event gets its own module here, and a variant of [`VerbsEvent`] if it
//! shares the completions' EVD type.

mod async_event;
mod cm;
mod completion;

pub use async_event::{AsyncElement, AsyncEvent, AsyncEventKind};
pub use cm::{CmEvent, CmEventKind, CmToken, PRIVATE_DATA_MAX, PrivateData};
pub use completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// The caller's name for a completion queue: carried by every completion
/// and CQ async event, so one EVD can be fed by many CQs.
///
/// ```
/// assert!(evd_verbs::CqId(1) < evd_verbs::CqId(2));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);

/// An EVD event produced by this crate. New kinds of event may get
/// variants of their own: a `match` needs a `_` arm.
///
/// ```
/// use evd_verbs::{VerbsEvent, CqId, WorkCompletion};
/// let ev = VerbsEvent::Completion { cq: CqId(1), wc: WorkCompletion::new(9) };
/// assert!(matches!(ev, VerbsEvent::Completion { cq: CqId(1), .. }));
/// ```
///
/// ```compile_fail,E0004
/// # let ev = evd_verbs::VerbsEvent::Completion { cq: evd_verbs::CqId(1), wc: Default::default() };
/// match ev { // refused: the enum may grow
///     evd_verbs::VerbsEvent::Completion { .. } => {}
///     evd_verbs::VerbsEvent::Async(_) => {}
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsEvent {
    /// A work completion (DAT's DTO event), successful or not.
    Completion {
        /// The CQ it was polled from.
        cq: CqId,
        /// The completion itself.
        wc: WorkCompletion,
    },
    /// An asynchronous error or state change (DAT's async-error stream).
    Async(AsyncEvent),
}
