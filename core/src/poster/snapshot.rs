//! What a poster sees of the EVD: snapshots of its state, each as of one
//! load of the state word (and the head), stale as soon as another handle
//! runs, except that a closed EVD stays closed.

use super::Poster;
use crate::query::Query;

impl<T> Poster<T> {
    /// A snapshot of the EVD's state and counters.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(3).unwrap();
    /// poster.post(1).unwrap();
    /// let q = poster.query();
    /// assert_eq!((q.capacity, q.len, q.posted), (4, 1, 1));
    /// ```
    pub fn query(&self) -> Query {
        self.shared.query()
    }

    /// True once the EVD is closed (posts are refused from then on).
    ///
    /// A snapshot: with other handles running it may be stale by the time
    /// it is read, except that once `true` it stays `true`.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u8>(1).unwrap();
    /// assert!(!poster.is_closed());
    /// drop(consumer);
    /// assert!(poster.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Events accepted and not yet dequeued (including reserved slots whose
    /// posters are still writing them), as [`Query::len`].
    ///
    /// A snapshot (head and state word read as one instant, `len <=
    /// capacity`): other posters and the consumer may have changed it by the
    /// time it is returned.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded(4).unwrap();
    /// poster.post(1u8).unwrap();
    /// poster.post(2).unwrap();
    /// assert_eq!(poster.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.occupancy().len
    }

    /// Free slots now, or `None` if the EVD is closed: one snapshot of the
    /// state word and the head (two loads of the head, one of the word), for
    /// a poster that must know there is room before it produces what it
    /// posts. Other posters may take the room before this caller posts (a
    /// [`Permit`](crate::Permit) holds it); slots promised to permits are not free.
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.post(1).unwrap();
    /// assert_eq!(poster.free_slots(), Some(3));
    /// drop(consumer);
    /// assert_eq!(poster.free_slots(), None);
    /// ```
    pub fn free_slots(&self) -> Option<usize> {
        let o = self.shared.occupancy();
        (!o.closed).then(|| o.free())
    }

    /// How many events the ring holds (a power of two; changes only by
    /// [`Consumer::resize`](crate::Consumer::resize)). A snapshot.
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded::<u8>(3).unwrap();
    /// assert_eq!(poster.capacity(), 4);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.occupancy().capacity
    }

    /// `len() == 0`, from one snapshot.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// assert!(poster.is_empty());
    /// poster.post(1u8).unwrap();
    /// assert!(!poster.is_empty());
    /// consumer.try_dequeue().unwrap();
    /// assert!(poster.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.occupancy().len == 0
    }

    /// Every slot is queued or promised to a [`Permit`](crate::Permit) (`len() +
    /// Query::permits == capacity()`), from one snapshot: a [`Poster::post`]
    /// now would likely be refused as full (a snapshot, not a promise).
    ///
    /// ```
    /// let (poster, _consumer) = evd::bounded(2).unwrap();
    /// poster.post(1u8).unwrap();
    /// assert!(!poster.is_full());
    /// poster.post(2).unwrap();
    /// assert!(poster.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        let o = self.shared.occupancy();
        o.len + o.permits == o.capacity
    }
}
