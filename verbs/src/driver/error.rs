//! [`DriverError`]: why a driver operation failed.

use super::FeedId;
use std::any::Any;
use std::fmt;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why a driver operation failed.
///
/// ```
/// use evd_verbs::{Driver, DriverError, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
/// let (poster, _consumer) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let mut driver = Driver::new(Default::default()).unwrap();
/// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster), FeedMode::Event).unwrap();
/// driver.remove(key).unwrap();
/// assert!(matches!(driver.remove(key), Err(DriverError::NoSuchFeed)));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverError {
    /// The key names no feed of this driver (removed already).
    NoSuchFeed,
    /// The driver's thread has stopped (shut down, or failed).
    Stopped,
    /// A feed whose CQ has no completion channel cannot be driven (busy-poll
    /// it with [`Feed::progress`](crate::Feed::progress) or a
    /// [`Poller`](crate::Poller)).
    NoChannel,
    /// Another feed of this driver waits on the same fd: a second feed of
    /// one completion channel (a second [`ChannelFeed`](crate::ChannelFeed)
    /// on a clone of the channel, or a CQ's own [`Feed`](crate::Feed) on a
    /// channel a channel feed serves), or of one event source. Each would
    /// take events the other's CQs or readers wait for; the feed is dropped.
    FdInUse {
        /// The feed registered on that fd.
        feed: FeedId,
    },
    /// A [`DriverHandle`](crate::DriverHandle) call that waits for the driver
    /// was made on the thread that runs the driver (from an upcall of an EVD
    /// its feeds post into, or other user code the driver runs: a feed's
    /// code or drop, in a driver's call or on a spawned driver's thread):
    /// it would wait for itself. Use the [`Driver`](crate::Driver)
    /// directly there, or make the call from another thread.
    OnDriverThread,
    /// The ring failed (or, from [`Driver::spawn`](crate::Driver::spawn),
    /// the operating system refused a thread).
    Io(io::Error),
    /// A verbs call of one feed failed: arming its CQ (`req_notify`),
    /// getting its channel's event (`get_cq_event`), or the ring's poll of
    /// its channel fd. The driver is intact and serves its other feeds on.
    /// The first failure is retried: the feed's next turn arms and drains
    /// it. A failure within [`FEED_RETRY_WINDOW`](crate::FEED_RETRY_WINDOW)
    /// of the feed's last one gives it up (`given_up`): it is armed and
    /// polled no more once its CQs are drained, each of them then delivers
    /// a `CqError` async event into its EVD (its
    /// [`Feed::failure`](crate::Feed::failure) says why:
    /// [`PollError::ArmFailed`](crate::PollError::ArmFailed) or
    /// [`PollError::ChannelFailed`](crate::PollError::ChannelFailed)), and
    /// it stays registered until removed. A feed of async or CM events
    /// delivers the events its source still has, then a `SourceFailed`
    /// event ([`AsyncEventKind`](crate::AsyncEventKind) or
    /// [`CmEventKind`](crate::CmEventKind)), and is served no more.
    ///
    /// From [`Driver::process`](crate::Driver::process): call it again
    /// (the retry is that feed's next turn); the driver's fd is readable
    /// meanwhile, so a loop that waits on it does not sleep through the
    /// retry. The failure is counted
    /// ([`DriverStats::feed_failures`](crate::DriverStats::feed_failures)),
    /// also on a spawned driver, which serves on.
    FeedFailed {
        /// The feed.
        feed: FeedId,
        /// What its verbs call (or the ring's poll of its fd) returned.
        error: io::Error,
        /// This failure gave the feed up.
        given_up: bool,
    },
    /// User code the driver ran panicked (an EVD's upcall handler, an event
    /// type's `From` or `Drop`, a completion queue's own code); this is its
    /// payload.
    ///
    /// From [`Driver::process`](crate::Driver::process): the panic was
    /// caught in one feed's turn and counted; the call completed and the
    /// driver is intact, so call it again to serve on (every feed, the one
    /// whose turn panicked included; the driver's fd is readable meanwhile). From
    /// [`RunningDriver::shutdown`](crate::RunningDriver::shutdown): a panic
    /// its thread caught that nobody took with
    /// [`RunningDriver::take_panic`](crate::RunningDriver::take_panic), or a
    /// panic that ended the thread; it is returned, never raised again.
    Panicked(Panic),
}

/// The first caught panic nobody has taken yet (a spawned driver's, a
/// poller's): later ones are dropped, the first being the likelier cause.
/// Locked only when a call panicked and when the panic is taken: never on
/// the data path.
#[derive(Default)]
pub(crate) struct KeptPanic(std::sync::Mutex<Option<Panic>>);

impl KeptPanic {
    /// Keep `p` unless an earlier panic waits to be taken; a `p` not kept
    /// is dropped once the lock is free (its drop is guarded).
    pub(crate) fn keep(&self, p: Panic) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let spare = match *kept {
            None => {
                *kept = Some(p);
                None
            }
            Some(_) => Some(p),
        };
        drop(kept);
        drop(spare);
    }

    /// Take the kept panic, if any.
    pub(crate) fn take(&self) -> Option<Panic> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The payload of a panic of user code run by a driver or a
/// [`Poller`](crate::Poller) (caught where it ran, or where its thread was
/// joined), with its message when it has one.
///
/// ```
/// let p = evd_verbs::Panic::new(Box::new("a handler failed"));
/// assert_eq!(p.message(), Some("a handler failed"));
/// assert_eq!(p.to_string(), "panicked: a handler failed");
/// ```
///
/// Dropping a `Panic` drops its payload under a catch: a payload whose own
/// `Drop` panics (`panic_any` of such a value, rust-lang/rust#86027) cannot
/// raise a second panic from a driver's turn, a poller's loop or the
/// caller's drop of the error; that second panic is swallowed and its
/// payload dropped too (a chain of such payloads is leaked after the
/// third). [`Panic::into_payload`] hands the payload back unguarded.
pub struct Panic(Option<Box<dyn Any + Send>>);

impl Panic {
    /// Wrap a panic payload, as `std::panic::catch_unwind` or
    /// `JoinHandle::join` give it.
    ///
    /// ```
    /// let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
    /// let p = evd_verbs::Panic::new(payload);
    /// assert_eq!(p.message(), Some("boom 7"));
    /// ```
    pub fn new(payload: Box<dyn Any + Send>) -> Self {
        Panic(Some(payload))
    }

    fn payload(&self) -> &(dyn Any + Send) {
        self.0
            .as_deref()
            .expect("a payload until `into_payload` or drop")
    }

    /// The panic's message, if it was a `&str` or a `String` (as `panic!`
    /// makes them).
    ///
    /// ```
    /// use evd_verbs::Panic;
    /// assert_eq!(Panic::new(Box::new("static")).message(), Some("static"));
    /// assert_eq!(Panic::new(Box::new(String::from("formatted"))).message(), Some("formatted"));
    /// assert_eq!(Panic::new(Box::new(42u32)).message(), None);
    /// ```
    pub fn message(&self) -> Option<&str> {
        let payload = self.payload();
        payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
    }

    /// The payload, to resume the panic with `std::panic::resume_unwind` if
    /// the caller wants that.
    ///
    /// ```
    /// let p = evd_verbs::Panic::new(Box::new(42u32));
    /// let payload = p.into_payload();
    /// assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
    /// // std::panic::resume_unwind(payload) would raise it again here.
    /// ```
    pub fn into_payload(mut self) -> Box<dyn Any + Send> {
        self.0
            .take()
            .expect("a payload until `into_payload` or drop")
    }
}

impl Drop for Panic {
    fn drop(&mut self) {
        let Some(mut payload) = self.0.take() else {
            return;
        };
        // A panic of the payload's own `Drop` is swallowed and its payload
        // dropped the same way; a chain of payloads that each panic on drop
        // is leaked after the third (dropping it could panic again, for
        // ever). AssertUnwindSafe: each payload is owned here and gone
        // either way.
        for _ in 0..3 {
            match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                Ok(()) => return,
                Err(again) => payload = again,
            }
        }
        std::mem::forget(payload);
    }
}

impl fmt::Debug for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Panic").field(&self.message()).finish()
    }
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message() {
            Some(m) => write!(f, "panicked: {m}"),
            None => f.write_str("panicked (a payload that is not a message)"),
        }
    }
}

impl std::error::Error for Panic {}

/// A value a thread that runs user code hands to the one that joins it
/// (its feeds), dropped feed by feed under a catch wherever it is dropped:
/// by the joiner after an error, or at the thread's own end when nobody
/// joins it (stopped from its own thread), where a panic of the feeds' code
/// (a CQ's destroy, a held event's `Drop`) would abort the process: std
/// aborts when a thread's result panics on drop. Each such panic is
/// swallowed ([`Panic`]'s guarded drop); one catch per feed, since a second
/// panic while the first unwinds would abort too.
/// [`DropCaught::into_inner`] hands the value over.
pub(crate) struct DropCaught<T: DropEach>(Option<T>);

impl<T: DropEach> DropCaught<T> {
    pub(crate) fn new(v: T) -> Self {
        DropCaught(Some(v))
    }

    pub(crate) fn into_inner(mut self) -> T {
        self.0.take().expect("a value until `into_inner` or drop")
    }
}

impl<T: DropEach> Drop for DropCaught<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            v.drop_each();
        }
    }
}

/// A value made of feeds, dropped one feed at a time, each under its own
/// catch (see [`DropCaught`]).
pub(crate) trait DropEach {
    /// Drop every part, each under a catch; swallow their panics.
    fn drop_each(self);
}

impl<T: DropEach, E> DropEach for Result<T, E> {
    fn drop_each(self) {
        match self {
            Ok(v) => v.drop_each(),
            // An error's payload (a `Panic`) guards its own drop.
            Err(e) => drop(e),
        }
    }
}

/// Drop each of `parts` under its own catch, swallowing their panics.
pub(crate) fn drop_each_caught<P>(parts: impl IntoIterator<Item = P>) {
    Caught::default().drop_each(parts);
}

/// Drop each of `parts` under its own catch (a second panic while the
/// first unwinds would abort), then raise the first panic, if any, to the
/// caller who dropped them (the others are swallowed).
pub(crate) fn drop_each_then_raise<P>(parts: impl IntoIterator<Item = P>) {
    let mut caught = Caught::default();
    caught.drop_each(parts);
    caught.raise();
}

/// The panics of user code run one call at a time, each under its own
/// catch: how many there were, and the first (the others are swallowed by
/// [`Panic`]'s guarded drop).
#[derive(Debug, Default)]
pub(crate) struct Caught {
    pub(crate) count: u64,
    pub(crate) first: Option<Panic>,
}

impl Caught {
    /// Run `f`, catching its panic.
    pub(crate) fn run(&mut self, f: impl FnOnce()) {
        // AssertUnwindSafe: what `f` touches is owned by it, or is gone or
        // left as it was when it unwinds (callers pass drops and refusals).
        if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
            self.count += 1;
            let p = Panic::new(payload);
            if self.first.is_none() {
                self.first = Some(p);
            }
        }
    }

    /// Drop each of `parts`, each under its own catch.
    pub(crate) fn drop_each<P>(&mut self, parts: impl IntoIterator<Item = P>) {
        for part in parts {
            self.run(move || drop(part));
        }
    }

    /// Raise the first panic to the caller, if there was one.
    pub(crate) fn raise(self) {
        if let Some(first) = self.first {
            std::panic::resume_unwind(first.into_payload());
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::NoSuchFeed => f.write_str("no such feed"),
            DriverError::Stopped => f.write_str("the driver has stopped"),
            DriverError::FdInUse { feed } => {
                write!(f, "feed {feed:?} of the driver waits on that fd already")
            }
            DriverError::NoChannel => {
                f.write_str("the driver needs a CQ with a completion channel")
            }
            DriverError::OnDriverThread => {
                f.write_str("called on the driver's own thread, where it would wait for itself")
            }
            DriverError::Io(e) => write!(f, "driver I/O failed: {e}"),
            DriverError::FeedFailed {
                feed,
                error,
                given_up,
            } => {
                let then = if *given_up { "given up" } else { "retried" };
                write!(f, "a verbs call of feed {feed:?} failed ({then}): {error}")
            }
            DriverError::Panicked(p) => write!(f, "user code run by the driver {p}"),
        }
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DriverError::Io(e) | DriverError::FeedFailed { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for DriverError {
    fn from(e: io::Error) -> Self {
        DriverError::Io(e)
    }
}
