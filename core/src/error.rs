//! Typed errors. Every error that refuses an event hands the event back.

use std::fmt;

/// Why an EVD could not be created.
///
/// `#[non_exhaustive]`: ways of creating an EVD may gain failures of their
/// own; match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CreateError {
    /// A capacity of zero was asked for.
    ZeroCapacity,
    /// The capacity is above [`MAX_CAPACITY`](crate::MAX_CAPACITY).
    CapacityTooLarge {
        /// What was asked for.
        requested: usize,
    },
    /// The ring's memory could not be allocated; for a [`Cno`](crate::Cno),
    /// its ready ring's or its slot table's.
    AllocFailed {
        /// The capacity that could not be allocated: a ring's (a power of
        /// two), or a CNO's slot count (two per EVD).
        capacity: usize,
    },
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::ZeroCapacity => f.write_str("EVD capacity must be at least 1"),
            CreateError::CapacityTooLarge { requested } => write!(
                f,
                "EVD capacity {requested} is above the maximum {}",
                crate::MAX_CAPACITY
            ),
            CreateError::AllocFailed { capacity } => {
                write!(f, "could not allocate an EVD ring of {capacity} slots")
            }
        }
    }
}

impl std::error::Error for CreateError {}

/// A refused post. The event is handed back inside.
///
/// A refusal is never a loss: nothing is counted and the consumer is told
/// nothing. Only events given up by [`Poster::post_lossy`](crate::Poster::post_lossy)
/// are reported, as an [`Overflow`].
///
/// Exhaustive on purpose: the two refusals are the whole decision a poster
/// makes (retry later, or stop for good), each arm gets the event back, and
/// a refusal of a new kind would change what every retry loop must do, so
/// adding one is a breaking change rather than a case for a `_` arm.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PostError<T> {
    /// The ring is full (backpressure): retry later, or give the event up.
    Full(T),
    /// The EVD is closed.
    Closed(T),
}

impl<T> PostError<T> {
    /// The event that was not posted.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    /// poster.post(1).unwrap();
    /// assert_eq!(poster.post(2).unwrap_err().into_inner(), 2);
    /// # drop(consumer);
    /// ```
    pub fn into_inner(self) -> T {
        match self {
            PostError::Full(t) | PostError::Closed(t) => t,
        }
    }

    /// True for [`PostError::Full`] (backpressure: retry, or give it up).
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    /// poster.post(1).unwrap();
    /// let e = poster.post(2).unwrap_err();
    /// assert!(e.is_full() && !e.is_closed());
    /// # drop(consumer);
    /// ```
    pub fn is_full(&self) -> bool {
        matches!(self, PostError::Full(_))
    }

    /// True for [`PostError::Closed`] (no later post can succeed).
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
    /// drop(consumer);
    /// let e = poster.post(1).unwrap_err();
    /// assert!(e.is_closed() && !e.is_full());
    /// ```
    pub fn is_closed(&self) -> bool {
        matches!(self, PostError::Closed(_))
    }
}

impl<T> fmt::Debug for PostError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::Full(_) => f.write_str("Full(..)"),
            PostError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for PostError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::Full(_) => f.write_str("EVD is full"),
            PostError::Closed(_) => f.write_str("EVD is closed"),
        }
    }
}

impl<T> std::error::Error for PostError<T> {}

/// A refused [`Poster::post_batch`](crate::Poster::post_batch); the events
/// stay in the caller's vector.
///
/// Exhaustive on purpose, as [`PostError`]: the same two refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchPostError {
    /// Not one slot was free (backpressure; nothing is counted).
    Full,
    /// The EVD is closed.
    Closed,
}

impl fmt::Display for BatchPostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchPostError::Full => f.write_str("EVD is full"),
            BatchPostError::Closed => f.write_str("EVD is closed"),
        }
    }
}

impl std::error::Error for BatchPostError {}

/// Events were lost (DAT's `EVD_OVERFLOW`): given up by a lossy post
/// ([`Poster::post_lossy`](crate::Poster::post_lossy)) because the ring was
/// full. A refused post that handed its event back is not a loss and is never
/// reported.
///
/// Reported to the consumer on a dequeue, a wait or an upcall, coalesced (one
/// report for every loss since the last), never twice in a row from a
/// dequeue while events are ready (a wait whose threshold the ready events
/// do not meet ends with the next report rather than block), and always
/// before the end of stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Overflow {
    /// Events lost since the last report.
    pub lost: u64,
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EVD overflowed: {} events were lost", self.lost)
    }
}

impl std::error::Error for Overflow {}

/// Why a non-blocking dequeue returned no event.
///
/// Exhaustive on purpose: a consumer's loop must know which outcome is
/// transient (`Empty`: arm or wait), which is news (`Overflow`) and which is
/// the end (`Closed`); a `_` arm could not know what a new one means, so
/// adding one is a breaking change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryDequeueError {
    /// Nothing is ready.
    Empty,
    /// Events were lost since the last report; the next dequeue goes on with
    /// the events.
    Overflow(Overflow),
    /// The EVD is closed and drained: end of stream.
    Closed,
}

impl fmt::Display for TryDequeueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryDequeueError::Empty => f.write_str("EVD is empty"),
            TryDequeueError::Overflow(o) => o.fmt(f),
            TryDequeueError::Closed => f.write_str("EVD is closed and drained"),
        }
    }
}

impl std::error::Error for TryDequeueError {}

/// Why an async receive or the stream ended without an event.
///
/// `#[non_exhaustive]`, as the blocking [`DequeueError`]: an await may gain
/// reasons to end (such as the EVD being unwaitable); match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// Events were lost since the last report.
    Overflow(Overflow),
    /// The EVD is closed and drained.
    Closed,
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Overflow(o) => o.fmt(f),
            RecvError::Closed => f.write_str("EVD is closed and drained"),
        }
    }
}

impl std::error::Error for RecvError {}

/// Why a blocking wait returned without its threshold met, or did not wait
/// at all ([`WaitError::Unwaitable`] whatever is ready, as DAT's waits on an
/// unwaitable EVD fail, but for a poll, which answers as any poll does;
/// [`WaitError::InvalidThreshold`]).
///
/// `#[non_exhaustive]`, as [`DequeueError`]: a wait may gain reasons to
/// return; match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// The threshold was 0 or above the capacity.
    InvalidThreshold {
        /// The threshold asked for.
        threshold: usize,
        /// The EVD's capacity.
        capacity: usize,
    },
    /// The timeout expired; nothing was dequeued.
    Timeout {
        /// Events ready to dequeue when the wait gave up.
        available: usize,
    },
    /// The EVD was made unwaitable (`set_unwaitable`).
    Unwaitable,
    /// Events were lost since the last report: the wait reports it (once)
    /// instead of sleeping past it. Nothing was dequeued.
    Overflow(Overflow),
    /// The EVD is closed, and fewer than `threshold` events remain.
    Closed {
        /// Events still ready to dequeue.
        available: usize,
    },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::InvalidThreshold {
                threshold,
                capacity,
            } => write!(f, "wait threshold {threshold} is not in 1..={capacity}"),
            WaitError::Timeout { available } => {
                write!(f, "wait timed out with {available} events ready")
            }
            WaitError::Unwaitable => f.write_str("EVD is unwaitable"),
            WaitError::Overflow(o) => o.fmt(f),
            WaitError::Closed { available } => {
                write!(f, "EVD is closed with {available} events left")
            }
        }
    }
}

impl std::error::Error for WaitError {}

/// Why a blocking dequeue ([`Consumer::dequeue`](crate::Consumer::dequeue)
/// and its timed forms) returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DequeueError {
    /// Events were lost since the last report (reported once); the next
    /// dequeue goes on with the events.
    Overflow(Overflow),
    /// The timeout or deadline passed with no event ready.
    Timeout,
    /// The EVD was made unwaitable (`set_unwaitable`) and no event was ready.
    Unwaitable,
    /// The EVD is closed and drained: end of stream.
    Closed,
}

impl fmt::Display for DequeueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DequeueError::Overflow(o) => o.fmt(f),
            DequeueError::Timeout => f.write_str("dequeue timed out with no event ready"),
            DequeueError::Unwaitable => f.write_str("EVD is unwaitable"),
            DequeueError::Closed => f.write_str("EVD is closed and drained"),
        }
    }
}

impl std::error::Error for DequeueError {}

/// Why a resize was refused. The EVD is unchanged.
///
/// `#[non_exhaustive]`: a resize may gain reasons to refuse; match with a
/// `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResizeError {
    /// A capacity of zero was asked for.
    ZeroCapacity,
    /// The capacity is above [`MAX_CAPACITY`](crate::MAX_CAPACITY).
    CapacityTooLarge {
        /// What was asked for.
        requested: usize,
    },
    /// The new capacity holds fewer slots than are taken: events queued
    /// (published or still being written) and slots promised to permits
    /// ([`Poster::try_reserve`](crate::Poster::try_reserve)) that are out.
    TooSmall {
        /// Slots taken when the resize was tried: events queued plus
        /// permits out.
        queued: usize,
        /// The new capacity.
        capacity: usize,
    },
    /// The new ring could not be allocated.
    AllocFailed {
        /// The capacity that could not be allocated.
        capacity: usize,
    },
}

impl fmt::Display for ResizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResizeError::ZeroCapacity => f.write_str("EVD capacity must be at least 1"),
            ResizeError::CapacityTooLarge { requested } => {
                write!(f, "EVD capacity {requested} is too large")
            }
            ResizeError::TooSmall { queued, capacity } => write!(
                f,
                "{queued} slots are taken (queued events and permits out), more than the new capacity {capacity}"
            ),
            ResizeError::AllocFailed { capacity } => {
                write!(f, "could not allocate an EVD ring of {capacity} slots")
            }
        }
    }
}

impl std::error::Error for ResizeError {}

/// Why an upcall policy or handler change was refused.
///
/// `#[non_exhaustive]`: upcalls may gain reasons to refuse a change (as
/// [`PolicyError::FnMutHandler`] was added); match with a `_` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// Called from inside one of this EVD's own upcalls: waiting for in-flight
    /// upcalls to return (a teardown, a switch to `SingleInstance` that must
    /// wait for others) would wait for itself.
    FromUpcall,
    /// ManyInstances with an `FnMut` handler
    /// ([`Consumer::into_upcalls_mut`](crate::Consumer::into_upcalls_mut),
    /// [`Upcalls::set_handler_mut`](crate::Upcalls::set_handler_mut)), which
    /// must not run on several threads at once: install an `Fn` handler
    /// ([`Upcalls::set_handler`](crate::Upcalls::set_handler)) first, or keep
    /// SingleInstance.
    FnMutHandler,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyError::FromUpcall => {
                "cannot wait for an EVD's upcalls from inside one of its upcalls"
            }
            PolicyError::FnMutHandler => "an FnMut upcall handler cannot run under ManyInstances",
        })
    }
}

impl std::error::Error for PolicyError {}

/// A refused CNO operation on a [`Consumer`](crate::Consumer) (binding,
/// enabling, moving).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CnoError {
    /// The EVD is bound to a CNO already: unbind it, or move it with
    /// [`Consumer::modify_cno`](crate::Consumer::modify_cno).
    AlreadyBound,
    /// The EVD is not bound to a CNO.
    NotBound,
    /// The CNO holds as many EVDs as it was made for.
    Full {
        /// The most EVDs the CNO holds.
        capacity: usize,
    },
    /// The CNO was dropped: nobody waits on it. The EVD stays bound until it
    /// is unbound (or moved); its notifications go to its own waiter.
    CnoDropped,
}

impl fmt::Display for CnoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CnoError::AlreadyBound => f.write_str("the EVD is bound to a CNO already"),
            CnoError::NotBound => f.write_str("the EVD is not bound to a CNO"),
            CnoError::Full { capacity } => {
                write!(f, "the CNO holds its most EVDs ({capacity})")
            }
            CnoError::CnoDropped => f.write_str("the CNO was dropped"),
        }
    }
}

impl std::error::Error for CnoError {}
