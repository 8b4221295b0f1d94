//! The API contract the `schedule` target checks, where it is a choice of
//! the crate rather than a consequence of exactly-once delivery: the one
//! place to edit when that contract changes.
//!
//! Now: a post refused because the ring is full hands the event back and is
//! not counted or reported (backpressure); only `Poster::post_lossy` giving
//! an event up is a loss, counted in `Query::lost` and reported as
//! `Overflow { lost }`, every loss before the end of stream. (Until
//! 2026-12 a refusal was itself counted and reported: that was
//! [`FULL_REFUSAL_IS_OVERFLOW`] `= true`.)

/// Whether a post refused with `Full` counts as one overflow.
pub const FULL_REFUSAL_IS_OVERFLOW: bool = false;

/// What the harness saw happen to posts that did not land in the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// `post` or `post_batch` calls refused with `Full`.
    pub full: u64,
    /// Events given up by `post_lossy` (`Ok(Lossy::Lost)`).
    pub lost: u64,
}

/// The overflow count these refusals must produce: what `Query::lost`
/// reports at the end, and the sum of every `Overflow { lost }` the
/// consumer or the handlers received once the EVD is drained.
pub fn overflows_for(r: Refusals) -> u64 {
    let full = if FULL_REFUSAL_IS_OVERFLOW { r.full } else { 0 };
    full + r.lost
}
