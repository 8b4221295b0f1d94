//! Iterators over a consumer's events: [`TryIter`] (non-blocking),
//! [`Iter`] and [`IntoIter`] (blocking). A loss report is an item,
//! `Err(Overflow)`, in its place in the sequence: never dropped.

use crate::consumer::Consumer;
use crate::error::{DequeueError, Overflow, TryDequeueError};

impl<T> Consumer<T> {
    /// A non-blocking iterator: the events ready now, as
    /// [`Consumer::try_dequeue`] returns them (a loss report is an
    /// `Err(Overflow)` item), ending when nothing is ready or the EVD is
    /// closed and drained. A slot a poster has reserved but not yet written
    /// ends it too; iterate again later.
    ///
    /// ```
    /// use evd::{Lossy, Overflow};
    /// let (poster, mut consumer) = evd::bounded(2).unwrap();
    /// poster.post(1u8).unwrap();
    /// poster.post(2).unwrap();
    /// assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost));
    /// let got: Vec<_> = consumer.try_iter().collect();
    /// assert_eq!(got, [Err(Overflow { lost: 1 }), Ok(1), Ok(2)]);
    /// assert_eq!(consumer.try_iter().next(), None); // empty for now
    /// ```
    pub fn try_iter(&mut self) -> TryIter<'_, T> {
        TryIter { consumer: self }
    }

    /// A blocking iterator: each item is a [`Consumer::dequeue`] (a loss
    /// report is an `Err(Overflow)` item); it ends at the end of stream
    /// (closed and drained).
    ///
    /// It also ends if a dequeue would block while the EVD is unwaitable
    /// ([`Poster::set_unwaitable`](crate::Poster::set_unwaitable)): the
    /// events ready before that are still yielded, and once
    /// unwaitability is cleared a new iterator goes on where it stopped. Use
    /// [`Consumer::dequeue`] to tell the two ends apart.
    ///
    /// ```
    /// let (poster, mut consumer) = evd::bounded(4).unwrap();
    /// let t = std::thread::spawn(move || for i in 0..10u32 {
    ///     let mut v = i;
    ///     while let Err(e) = poster.post(v) { v = e.into_inner(); std::thread::yield_now(); }
    /// });
    /// let sum: u32 = consumer.iter().map(Result::unwrap).sum();
    /// assert_eq!(sum, 45);
    /// t.join().unwrap();
    /// ```
    pub fn iter(&mut self) -> Iter<'_, T> {
        Iter { consumer: self }
    }
}

/// The next item of a blocking iterator: `None` at the end of stream or
/// when the EVD is unwaitable.
fn next_blocking<T>(c: &mut Consumer<T>) -> Option<Result<T, Overflow>> {
    match c.dequeue() {
        Ok(v) => Some(Ok(v)),
        Err(DequeueError::Overflow(o)) => Some(Err(o)),
        Err(DequeueError::Closed | DequeueError::Unwaitable | DequeueError::Timeout) => None,
    }
}

/// Non-blocking iterator returned by [`Consumer::try_iter`].
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct TryIter<'a, T> {
    consumer: &'a mut Consumer<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = Result<T, Overflow>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.consumer.try_dequeue() {
            Ok(v) => Some(Ok(v)),
            Err(TryDequeueError::Overflow(o)) => Some(Err(o)),
            Err(TryDequeueError::Empty | TryDequeueError::Closed) => None,
        }
    }
}

impl<T> std::fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TryIter").finish_non_exhaustive()
    }
}

/// Blocking iterator returned by [`Consumer::iter`] and by iterating over
/// `&mut Consumer`.
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct Iter<'a, T> {
    consumer: &'a mut Consumer<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = Result<T, Overflow>;

    fn next(&mut self) -> Option<Self::Item> {
        next_blocking(self.consumer)
    }
}

impl<T> std::fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

/// Owning blocking iterator: `for ev in consumer`, as [`Consumer::iter`].
///
/// ```
/// let (poster, consumer) = evd::bounded(4).unwrap();
/// poster.post("a").unwrap();
/// poster.post("b").unwrap();
/// drop(poster); // end of stream after the queued events
/// let all: Vec<_> = consumer.into_iter().collect();
/// assert_eq!(all, [Ok("a"), Ok("b")]);
/// ```
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct IntoIter<T> {
    consumer: Consumer<T>,
}

impl<T> IntoIter<T> {
    /// The consumer back, to go on after the iterator ended (for example
    /// once an unwaitable EVD is waitable again).
    ///
    /// ```
    /// let (poster, consumer) = evd::bounded::<u8>(4).unwrap();
    /// poster.set_unwaitable();
    /// let mut it = consumer.into_iter();
    /// assert_eq!(it.next(), None);
    /// let mut consumer = it.into_inner();
    /// poster.clear_unwaitable();
    /// poster.post(1).unwrap();
    /// assert_eq!(consumer.dequeue(), Ok(1));
    /// ```
    pub fn into_inner(self) -> Consumer<T> {
        self.consumer
    }
}

impl<T> Iterator for IntoIter<T> {
    type Item = Result<T, Overflow>;

    fn next(&mut self) -> Option<Self::Item> {
        next_blocking(&mut self.consumer)
    }
}

impl<T> std::fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntoIter")
            .field("consumer", &self.consumer)
            .finish()
    }
}

/// Blocking iteration that consumes the consumer; see [`Consumer::iter`].
impl<T> IntoIterator for Consumer<T> {
    type Item = Result<T, Overflow>;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter { consumer: self }
    }
}

/// Blocking iteration by `&mut`: `for ev in &mut consumer`, as
/// [`Consumer::iter`].
///
/// ```
/// let (poster, mut consumer) = evd::bounded(4).unwrap();
/// poster.post(1u8).unwrap();
/// poster.close();
/// for ev in &mut consumer {
///     assert_eq!(ev, Ok(1));
/// }
/// assert!(consumer.is_closed());
/// ```
impl<'a, T> IntoIterator for &'a mut Consumer<T> {
    type Item = Result<T, Overflow>;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}
