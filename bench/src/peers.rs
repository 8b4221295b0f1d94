//! The peer channels behind one interface, so that the throughput, room and wake-latency runs drive
//! every peer through the same loops, each call the one a hand-written loop would make.

use crate::payload::Payload;

/// The receiving side of a bounded peer channel of `P`.
pub trait Channel<P: Payload>: Sized + Send {
    /// The sending handle, one clone per poster.
    type Tx: Clone + Send;
    /// A bounded channel of `capacity` slots.
    fn bounded(capacity: usize) -> (Self::Tx, Self);
    /// The non-blocking bounded send: a value refused as full comes back.
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P>;
    /// The blocking send: the value comes back only once the channel is closed.
    fn send(tx: &Self::Tx, p: P) -> Result<(), P>;
    /// The blocking receive; `None` once the channel is closed.
    fn recv(&mut self) -> Option<P>;
}

/// A [`Channel`] that also drains what is there without blocking (`try_iter`): the batch consumer
/// a peer's user writes, beside evd's `dequeue_batch`.
pub trait TryIter<P: Payload>: Channel<P> {
    /// Hand at most `max` events that are there to `take`, without blocking; how many.
    fn take_ready(&mut self, max: usize, take: impl FnMut(P)) -> usize;
}

macro_rules! try_iter {
    ($rx:ty) => {
        impl<P: Payload> TryIter<P> for $rx {
            #[inline]
            fn take_ready(&mut self, max: usize, mut take: impl FnMut(P)) -> usize {
                let mut n = 0;
                for p in self.try_iter().take(max) {
                    take(p);
                    n += 1;
                }
                n
            }
        }
    };
}
try_iter!(crossbeam_channel::Receiver<P>);
try_iter!(std::sync::mpsc::Receiver<P>);

/// A [`Channel`] whose `try_send` refuses a full channel with `$full(value)`; `$recv` names the
/// receive by its path (`rx.recv()` would be this trait's).
macro_rules! channel {
    ($rx:ty, $tx:ty, $bounded:path, $full:path, |$t:ident, $p:ident| $send:expr, |$r:ident| $recv:expr) => {
        impl<P: Payload> Channel<P> for $rx {
            type Tx = $tx;
            fn bounded(capacity: usize) -> (Self::Tx, Self) {
                $bounded(capacity)
            }
            #[inline]
            fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
                match tx.try_send(p) {
                    Ok(()) => Ok(()),
                    Err($full(back)) => Err(back),
                    Err(_) => panic!("receiver alive"),
                }
            }
            #[inline]
            fn send($t: &Self::Tx, $p: P) -> Result<(), P> {
                $send
            }
            #[inline]
            fn recv(&mut self) -> Option<P> {
                let $r = self;
                $recv
            }
        }
    };
}

channel!(
    crossbeam_channel::Receiver<P>,
    crossbeam_channel::Sender<P>,
    crossbeam_channel::bounded,
    crossbeam_channel::TrySendError::Full,
    |tx, p| tx.send(p).map_err(|e| e.into_inner()),
    |rx| crossbeam_channel::Receiver::recv(rx).ok()
);
channel!(
    std::sync::mpsc::Receiver<P>,
    std::sync::mpsc::SyncSender<P>,
    std::sync::mpsc::sync_channel,
    std::sync::mpsc::TrySendError::Full,
    |tx, p| tx.send(p).map_err(|e| e.0),
    |rx| std::sync::mpsc::Receiver::recv(rx).ok()
);
channel!(
    tokio::sync::mpsc::Receiver<P>,
    tokio::sync::mpsc::Sender<P>,
    tokio::sync::mpsc::channel,
    tokio::sync::mpsc::error::TrySendError::Full,
    |tx, p| tx.blocking_send(p).map_err(|e| e.0),
    |rx| rx.blocking_recv()
);
channel!(
    flume::Receiver<P>,
    flume::Sender<P>,
    flume::bounded,
    flume::TrySendError::Full,
    |tx, p| tx.send(p).map_err(|e| e.into_inner()),
    |rx| flume::Receiver::recv(rx).ok()
);
channel!(
    thingbuf::mpsc::blocking::Receiver<P>,
    thingbuf::mpsc::blocking::Sender<P>,
    thingbuf::mpsc::blocking::channel,
    thingbuf::mpsc::errors::TrySendError::Full,
    |tx, p| tx.send(p).map_err(|_| p),
    |rx| thingbuf::mpsc::blocking::Receiver::recv(rx)
);

/// kanal's sends drop a refused value; the payload is `Copy`, so the same copy is handed back.
impl<P: Payload> Channel<P> for kanal::Receiver<P> {
    type Tx = kanal::Sender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        kanal::bounded(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        match tx.try_send(p) {
            Ok(true) => Ok(()),
            Ok(false) => Err(p),
            Err(_) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.send(p).map_err(|_| p)
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        kanal::Receiver::recv(self).ok()
    }
}
