//! The peer channels behind one interface, so that the throughput and room
//! runs drive every peer through the same loops: per event, the same one
//! call of the peer's own API as a hand-written loop would make.

use crate::payload::Payload;

/// The receiving side of a bounded peer channel of `P`.
pub trait Channel<P: Payload>: Sized + Send {
    /// The sending handle, one clone per poster.
    type Tx: Clone + Send;
    /// A bounded channel of `capacity` slots.
    fn bounded(capacity: usize) -> (Self::Tx, Self);
    /// The non-blocking bounded send: a value refused as full comes back.
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P>;
    /// The blocking send: the value comes back only once the channel is
    /// closed.
    fn send(tx: &Self::Tx, p: P) -> Result<(), P>;
    /// The blocking receive; `None` once the channel is closed.
    fn recv(&mut self) -> Option<P>;
}

impl<P: Payload> Channel<P> for crossbeam_channel::Receiver<P> {
    type Tx = crossbeam_channel::Sender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        crossbeam_channel::bounded(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        match tx.try_send(p) {
            Ok(()) => Ok(()),
            Err(crossbeam_channel::TrySendError::Full(back)) => Err(back),
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.send(p).map_err(|e| e.into_inner())
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        crossbeam_channel::Receiver::recv(self).ok()
    }
}

impl<P: Payload> Channel<P> for std::sync::mpsc::Receiver<P> {
    type Tx = std::sync::mpsc::SyncSender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        std::sync::mpsc::sync_channel(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        match tx.try_send(p) {
            Ok(()) => Ok(()),
            Err(std::sync::mpsc::TrySendError::Full(back)) => Err(back),
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.send(p).map_err(|e| e.0)
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        std::sync::mpsc::Receiver::recv(self).ok()
    }
}

impl<P: Payload> Channel<P> for tokio::sync::mpsc::Receiver<P> {
    type Tx = tokio::sync::mpsc::Sender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        tokio::sync::mpsc::channel(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        use tokio::sync::mpsc::error::TrySendError;
        match tx.try_send(p) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(back)) => Err(back),
            Err(TrySendError::Closed(_)) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.blocking_send(p).map_err(|e| e.0)
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        self.blocking_recv()
    }
}

impl<P: Payload> Channel<P> for flume::Receiver<P> {
    type Tx = flume::Sender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        flume::bounded(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        match tx.try_send(p) {
            Ok(()) => Ok(()),
            Err(flume::TrySendError::Full(back)) => Err(back),
            Err(flume::TrySendError::Disconnected(_)) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.send(p).map_err(|e| e.into_inner())
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        flume::Receiver::recv(self).ok()
    }
}

/// kanal's sends drop a refused value; the payload is `Copy`, so the same
/// copy is handed back (and a refused `try_send` retries it).
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

impl<P: Payload> Channel<P> for thingbuf::mpsc::blocking::Receiver<P> {
    type Tx = thingbuf::mpsc::blocking::Sender<P>;
    fn bounded(capacity: usize) -> (Self::Tx, Self) {
        thingbuf::mpsc::blocking::channel(capacity)
    }
    #[inline]
    fn try_send(tx: &Self::Tx, p: P) -> Result<(), P> {
        match tx.try_send(p) {
            Ok(()) => Ok(()),
            Err(thingbuf::mpsc::errors::TrySendError::Full(back)) => Err(back),
            Err(_) => panic!("receiver alive"),
        }
    }
    #[inline]
    fn send(tx: &Self::Tx, p: P) -> Result<(), P> {
        tx.send(p).map_err(|_| p)
    }
    #[inline]
    fn recv(&mut self) -> Option<P> {
        thingbuf::mpsc::blocking::Receiver::recv(self)
    }
}
