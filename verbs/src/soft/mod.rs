//! The software providers: each source contract implemented without RDMA
//! hardware, one per file as `ibv` does with real verbs. Tests use them; so
//! can users without RDMA hardware.
//!
//! | Contract | Provider | File |
//! |---|---|---|
//! | [`CompletionQueue`] | [`SoftCq`] (consumer side) and [`SoftCqProducer`] ("the HCA"), over the state they share | `cq.rs`, `producer.rs`, `cq_state.rs` |
//! | [`SharedChannel`] | [`SoftChannel`] | `channel.rs` |
//! | [`AsyncEventSource`] | [`SoftDevice`], [`SoftAsyncEvents`] | `device.rs` |
//! | [`CmEventSource`] | [`SoftCm`], [`SoftCmEvents`] | `cm.rs` |
//!
//! The software CQ has an eventfd as its completion channel and knobs for
//! fault injection. It reproduces what makes real CQs hard to consume:
//! - `req_notify` is one shot and ignores completions already queued, so a
//!   completion that lands between the consumer's last poll and its re-arm
//!   raises no event (the [`SoftCqProducer::set_rearm_window`] and
//!   [`SoftCqProducer::complete_in_next_rearm_window`] knobs widen or hit
//!   that window);
//! - channel events can be spurious ([`SoftCqProducer::inject_spurious_event`],
//!   [`SoftCqProducer::set_spurious_every`]);
//! - completions can carry errors ([`SoftCqProducer::set_error_every`]);
//! - the CQ can overrun (push past its capacity) as rxe's does: the
//!   completion that does not fit is lost ([`PushError::Overrun`] to its
//!   producer) and raises `CqError` on the [`SoftDevice`] the CQ belongs to,
//!   one per completion lost, and that is all: the channel is not woken, the
//!   CQ's polls still deliver what it holds (they never fail with
//!   [`PollError::Overrun`]), and a later completion that fits is added. A
//!   consumer learns of an overrun only from the device's async events, and
//!   those a CQ raised and nobody took go with it when it is destroyed, as
//!   the kernel drops them;
//! - polls can fail ([`SoftCqProducer::fail_next_poll`]: the CQ then stays
//!   broken), and so can an arm ([`SoftCqProducer::fail_next_arm`]);
//! - destroying it with events got but not acknowledged, where libibverbs
//!   would block for ever (and where the `ibv` module's CQs acknowledge
//!   them first), is refused by [`SoftCq::destroy`] and panics in
//!   its `Drop` (only recorded, in [`SoftCqStats::unacked_at_destroy`], on
//!   a thread already unwinding).
//!
//! A [`SoftChannel`] is one channel shared by many such CQs, as one
//! `ibv_comp_channel` is: one eventfd, and each event names its CQ; its CQs
//! may belong to a device ([`SoftChannel::create_cq_on`]). Every event, on
//! a channel, a device's async fd or a CM's fd, writes the fd, as the
//! kernel wakes that fd's pollers on every event.
//!
//! The CQ is guarded by one mutex, as software providers (rxe, siw) guard
//! theirs with a spinlock; it is a development and test double, not a fast
//! path.

mod channel;
mod cm;
mod cq;
mod cq_state;
mod device;
mod event_queue;
mod producer;

pub use channel::{SoftChannel, SoftChannelStats};
pub use cm::{SoftCm, SoftCmEvents};
pub use cq::SoftCq;
pub use cq_state::PushError;
pub use device::{SoftAsyncEvents, SoftDevice};
pub use producer::{SoftCqProducer, SoftCqStats};

#[cfg(doc)]
use crate::source::{AsyncEventSource, CmEventSource, CompletionQueue, PollError, SharedChannel};
