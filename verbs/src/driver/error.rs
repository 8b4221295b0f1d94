//! [`DriverError`]: why a driver operation failed.

use std::fmt;
use std::io;

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
    /// A [`DriverHandle`](crate::DriverHandle) call that waits for the driver
    /// was made on the thread that runs the driver (from an upcall of an EVD
    /// its feeds post into): it would wait for itself. Use the [`Driver`](crate::Driver)
    /// directly there, or make the call from another thread.
    OnDriverThread,
    /// The ring, or a verbs call of a feed (`req_notify`, `get_cq_event`),
    /// failed.
    Io(io::Error),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::NoSuchFeed => f.write_str("no such feed"),
            DriverError::Stopped => f.write_str("the driver has stopped"),
            DriverError::NoChannel => {
                f.write_str("the driver needs a CQ with a completion channel")
            }
            DriverError::OnDriverThread => {
                f.write_str("called on the driver's own thread, where it would wait for itself")
            }
            DriverError::Io(e) => write!(f, "driver I/O failed: {e}"),
        }
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DriverError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for DriverError {
    fn from(e: io::Error) -> Self {
        DriverError::Io(e)
    }
}
