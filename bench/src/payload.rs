//! The two event sizes the throughput runs move, a bare `u64` and a 64-byte event (a cache line,
//! about the size of an RDMA work completion), and the count and checksum that catch an event lost or
//! delivered twice (not every such pair: a loss and a duplicate of equal sums cancel; nor the order).

/// An event built from a sequence number, which the consumer reads back for its checksum.
pub trait Payload: Copy + Clone + Default + Send + Sync + 'static {
    /// The event carrying sequence number `seq`.
    fn from_seq(seq: u64) -> Self;
    /// The sequence number this event carries.
    fn seq(&self) -> u64;
}

impl Payload for u64 {
    #[inline(always)]
    fn from_seq(seq: u64) -> Self {
        seq
    }
    #[inline(always)]
    fn seq(&self) -> u64 {
        *self
    }
}

/// A 64-byte event: the sequence number and seven words of body, so that a queue moving it pays
/// for a full cache line per event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Event64 {
    seq: u64,
    body: [u64; 7],
}

impl Payload for Event64 {
    #[inline(always)]
    fn from_seq(seq: u64) -> Self {
        let body = [seq; 7];
        Event64 { seq, body }
    }
    #[inline(always)]
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// The sum of `0..n`, wrapping like a loop's (closed form: callgrind counts every instruction).
pub fn sum_below(n: u64) -> u64 {
    if n.is_multiple_of(2) {
        (n / 2).wrapping_mul(n.wrapping_sub(1))
    } else {
        n.wrapping_mul((n - 1) / 2)
    }
}

/// What a consumer has received: the count and the sum of the sequence numbers, checked against
/// `0..expected`.
#[derive(Debug)]
pub struct Tally {
    expected: u64,
    pub(crate) count: u64,
    sum: u64,
}

impl Tally {
    /// Expect sequence numbers `0..expected`, each once.
    pub fn new(expected: u64) -> Self {
        let (count, sum) = (0, 0);
        Tally {
            expected,
            count,
            sum,
        }
    }

    /// Count one event; true once all expected events have arrived.
    #[inline(always)]
    pub fn take(&mut self, seq: u64) -> bool {
        self.count += 1;
        self.sum = self.sum.wrapping_add(seq);
        self.count == self.expected
    }

    /// True once all expected events have arrived.
    #[inline(always)]
    pub fn done(&self) -> bool {
        self.count >= self.expected
    }

    /// Check the count and the checksum.
    pub fn verify(&self) -> Result<(), String> {
        let (n, want) = (self.expected, sum_below(self.expected));
        if self.count != n || self.sum != want {
            let (count, sum) = (self.count, self.sum);
            return Err(format!(
                "received {count} events with checksum {sum}, expected {n} with checksum {want}"
            ));
        }
        Ok(())
    }
}
