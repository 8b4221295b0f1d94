//! Feed keys: [`FeedKey`] names a registered feed and its type, so that
//! removing it hands the feed back typed; [`FeedId`] is the untyped name
//! the ring's requests carry.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// A feed's untyped name in a driver: its slot and the slot's generation
/// (64 bits, one more per registration in that slot). Names of removed
/// feeds are never reused.
///
/// ```
/// # use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
/// # let (poster, _c) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let mut driver = Driver::new(Default::default()).unwrap();
/// let a = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster.clone()), FeedMode::Event).unwrap();
/// let b = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(1), poster), FeedMode::Event).unwrap();
/// assert_ne!(a.id(), b.id());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FeedId {
    pub(crate) index: u32,
    pub(crate) generation: u64,
}

/// A registered feed's key, typed by the feed (`Feed<C, T>` or
/// `AsyncFeed<S, T>`, `T` the EVD's event type): [`Driver::remove`](crate::Driver::remove),
/// [`DriverHandle::remove`](crate::DriverHandle::remove) and
/// [`Shutdown::take`](crate::Shutdown::take) hand that feed back.
///
/// ```
/// # use evd_verbs::{Driver, Feed, FeedMode, CqId, soft::SoftCq};
/// # let (poster, _c) = evd::bounded(4).unwrap();
/// let mut driver = Driver::new(Default::default()).unwrap();
/// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(3), poster), FeedMode::Event).unwrap();
/// let feed: Feed<SoftCq> = driver.remove(key).unwrap();
/// assert_eq!(feed.id(), CqId(3));
/// ```
///
/// A key names its feed in the driver that made it only: another driver's
/// `remove` answers [`DriverError::NoSuchFeed`](crate::DriverError::NoSuchFeed)
/// (and its [`Shutdown::take`](crate::Shutdown::take) `None`), although the
/// two drivers' slots are named alike.
///
/// ```
/// # use evd_verbs::{Driver, DriverError, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
/// # let (poster, _c) = evd::bounded::<VerbsEvent>(4).unwrap();
/// let mut a = Driver::new(Default::default()).unwrap();
/// let mut b = Driver::new(Default::default()).unwrap();
/// let key = a.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster.clone()), FeedMode::Event).unwrap();
/// b.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(1), poster), FeedMode::Event).unwrap();
/// assert!(matches!(b.remove(key), Err(DriverError::NoSuchFeed)));
/// assert_eq!(a.remove(key).unwrap().id(), CqId(0));
/// ```
pub struct FeedKey<F> {
    id: FeedId,
    /// The driver that made it ([`driver_serial`]).
    driver: u64,
    feed: PhantomData<fn() -> F>,
}

/// A serial number for a new driver: a key carries its driver's, so that
/// no driver takes another's key for one of its own feeds.
pub(crate) fn driver_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only uniqueness is asked of it, which the RMW gives.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl<F> FeedKey<F> {
    pub(crate) fn new(id: FeedId, driver: u64) -> Self {
        FeedKey {
            id,
            driver,
            feed: PhantomData,
        }
    }

    /// Whether the driver numbered `serial` made this key.
    pub(crate) fn is_of(&self, serial: u64) -> bool {
        self.driver == serial
    }

    /// The untyped name.
    ///
    /// ```
    /// # use evd_verbs::{Driver, Feed, FeedMode, CqId, VerbsEvent, soft::SoftCq};
    /// # let (poster, _c) = evd::bounded::<VerbsEvent>(4).unwrap();
    /// # let mut driver = Driver::new(Default::default()).unwrap();
    /// let key = driver.register(Feed::new(SoftCq::new(4).unwrap().0, CqId(0), poster), FeedMode::Event).unwrap();
    /// let id = key.id();
    /// # let _ = id;
    /// ```
    pub fn id(&self) -> FeedId {
        self.id
    }
}

impl<F> Clone for FeedKey<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F> Copy for FeedKey<F> {}
impl<F> PartialEq for FeedKey<F> {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.driver) == (other.id, other.driver)
    }
}
impl<F> Eq for FeedKey<F> {}
impl<F> Hash for FeedKey<F> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.id, self.driver).hash(state)
    }
}
impl<F> fmt::Debug for FeedKey<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedKey")
            .field("index", &self.id.index)
            .field("generation", &self.id.generation)
            .field("driver", &self.driver)
            .finish()
    }
}
