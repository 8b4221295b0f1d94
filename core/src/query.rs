//! What [`Consumer::query`](crate::Consumer::query) reports.

use crate::state::PolicyBits;
use crate::sync::AtomicU64;

/// An EVD's upcall policy (DAT's `DAT_UPCALL_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpcallPolicy {
    /// No upcalls start; events queue (`DAT_UPCALL_DISABLE`).
    Disabled,
    /// At most one upcall runs at any moment (`DAT_UPCALL_SINGLE_INSTANCE`).
    /// Events posted during an upcall are delivered by that same upcall
    /// (`more_events` tells it) or, if upcalls are disabled meanwhile, stay
    /// queued for the next one.
    SingleInstance,
    /// Upcall handlers may run on several posting threads at once
    /// (`DAT_UPCALL_MANY`). The ring has one consumer, so *dequeues* stay
    /// serialized: an instance takes one event out while it holds the
    /// consumer token, hands the token back, then runs the handler. Events
    /// leave the ring in FIFO order; handlers overlap and may finish in any
    /// order. At most 63 instances are in flight.
    ManyInstances,
    /// Disable upcalls and return only after every in-flight upcall has
    /// returned (`DAT_UPCALL_TEARDOWN`); no upcall runs after that.
    Teardown,
}

impl UpcallPolicy {
    pub(crate) fn from_bits(p: PolicyBits) -> Self {
        match p {
            PolicyBits::Disabled => UpcallPolicy::Disabled,
            PolicyBits::Single => UpcallPolicy::SingleInstance,
            PolicyBits::Many => UpcallPolicy::ManyInstances,
        }
    }

    pub(crate) fn bits(self) -> PolicyBits {
        match self {
            UpcallPolicy::Disabled | UpcallPolicy::Teardown => PolicyBits::Disabled,
            UpcallPolicy::SingleInstance => PolicyBits::Single,
            UpcallPolicy::ManyInstances => PolicyBits::Many,
        }
    }
}

/// A snapshot of an EVD (DAT's `evd_query`). The state fields, `len`,
/// `permits`, `posted` and `dequeued` belong to one instant (`len + permits <=
/// capacity` always), unless the consumer moved the head between every one of
/// many tries to read them together: then `len` is clamped so that `len +
/// permits <= capacity` and `dequeued` is the head read just before the state
/// word; the counters are read just after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Query {
    /// Events the ring holds (a power of two).
    pub capacity: usize,
    /// Events accepted and not yet dequeued (nor dropped with the consumer).
    pub len: usize,
    /// The upcall policy (`Disabled` outside upcall mode).
    pub policy: UpcallPolicy,
    /// The next post will notify the consumer.
    pub armed: bool,
    /// Sticky "you have been notified", cleared when the consumer finds the
    /// ring empty on re-enabling: an arm, or a CNO enable that arms it
    /// (not one that finds it armed already), on an empty ring, or the end
    /// of an upcall instance that finds it empty.
    pub notified: bool,
    /// An upcall is running.
    pub in_upcall: bool,
    /// How many upcall instances are running.
    pub upcalls_in_flight: usize,
    /// Posts are refused.
    pub closed: bool,
    /// Waits fail with `Unwaitable`.
    pub unwaitable: bool,
    /// Posts accepted since creation.
    pub posted: u64,
    /// Events dequeued since creation (by any mode, upcalls included); once
    /// the consumer is dropped, the events its drop dropped count here too.
    pub dequeued: u64,
    /// Events given up by lossy posts on a full ring (reported or not).
    pub lost: u64,
    /// Notifications fired: wakes of an armed consumer and upcall starts
    /// (not the triggers of a [`Cno`](crate::Cno), which its waiter counts
    /// in the keys it takes).
    pub notifications: u64,
    /// Upcall handler invocations.
    pub upcalls: u64,
    /// A poster is waiting for room ([`Poster::post_blocking`](crate::Poster::post_blocking)
    /// and the other waiting posts).
    pub room_wanted: bool,
    /// How many posters are in the room queue now: each `post_blocking`,
    /// `post_timeout` or `post_deadline` past its back-off, each pending
    /// `post_async`, [`Poster::reserve`](crate::Poster::reserve) or
    /// [`RoomWaiter`](crate::RoomWaiter), and a `Sink` whose flush waits.
    /// A waiter that was woken (for a freed slot, by a close or the end of
    /// a resize, or by a wake passed on) is out of the queue until it finds
    /// the ring full again and rejoins, so it is not counted meanwhile.
    /// Read apart from `room_wanted`: while a poster joins or leaves, one
    /// snapshot may show the two disagree.
    pub room_waiters: usize,
    /// Wakes sent to posters waiting for room: one per slot freed while they
    /// wait, one per waiter at close, at the end of a resize and when a full
    /// ring is left to an upcall nobody started, one passed on by a woken
    /// waiter that left, and one passed on after a waker whose `wake`
    /// panicked.
    pub room_wakes: u64,
    /// Slots promised to [`Permit`](crate::Permit)s not yet sent or dropped:
    /// not in `len`, but not free for posts either.
    pub permits: usize,
}

/// Counters touched off the post/dequeue fast path only.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) lost: AtomicU64,
    pub(crate) notifications: AtomicU64,
    pub(crate) upcalls: AtomicU64,
    pub(crate) room_wakes: AtomicU64,
}
