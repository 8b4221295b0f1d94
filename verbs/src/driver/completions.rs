//! The backend's completions, handled each turn: the wake poll's (a
//! command, room, or an error's retry made the wake fd readable), and each
//! feed's poll: its fd fired, its poll failed (the feed's failure if the fd
//! is to blame, [`readiness::refuses_the_fd`]), or a removal waiting for the
//! poll to end can hand the feed back.

use super::readiness::{self, Completion, Request};
use super::slot::{FailedCall, Removal};
use super::source::Source;
use super::{Driver, DriverError, FeedId};
use crate::eventfd;
use std::time::Instant;

impl Driver {
    /// Handle the ring's completions; returns whether there were any.
    pub(super) fn reap(&mut self) -> Result<bool, DriverError> {
        // (A removal that ends here is rare: `done` allocates only then.)
        let mut done = Vec::new();
        let mut failure = None;
        // Collected first: handling one needs `&mut self`, which the ring's
        // iterator borrows.
        let mut completions = std::mem::take(&mut self.reaped);
        self.backend.reap(|c| completions.push(c));
        let any = !completions.is_empty();
        for c in completions.drain(..) {
            match c.request {
                Request::WakePoll => {
                    if !c.more {
                        self.wake_poll_in_flight = false;
                    }
                    self.backend.refused_multishot(&c);
                    eventfd::clear(&self.shared.wake);
                    self.busy = true;
                }
                Request::FeedPoll(id) => {
                    if let Some(removed) = self.on_feed_poll(id, c, &mut failure) {
                        done.push(removed);
                    }
                }
                Request::Cancel(_) | Request::CancelWake => {}
            }
        }
        self.reaped = completions;
        for (id, source, who) in done {
            self.hand_back(id, source, who);
        }
        failure.map_or(Ok(any), Err)
    }

    /// A feed's poll completed (`reported`: its slot and generation tag);
    /// returns the feed if that ends its removal.
    fn on_feed_poll(
        &mut self,
        reported: FeedId,
        c: Completion,
        failure: &mut Option<DriverError>,
    ) -> Option<(FeedId, Box<dyn Source>, Removal)> {
        let entry = self.slots.get_mut(reported.index as usize)?;
        let slot = entry.as_mut()?;
        let id = FeedId {
            index: reported.index,
            generation: slot.generation,
        };
        if !readiness::same_feed(reported, id) {
            return None;
        }
        if !c.more {
            slot.poll_in_flight = false;
        }
        if slot.removing.is_some() {
            if slot.poll_in_flight {
                return None;
            }
            let slot = entry.take().expect("present");
            return Some((id, slot.source, slot.removing.expect("removing")));
        }
        if self.backend.refused_multishot(&c) {
            // Asked again, one-shot, at the end of the turn.
            return None;
        }
        if c.result < 0 && c.result != -libc::ECANCELED {
            let error = std::io::Error::from_raw_os_error(-c.result);
            if readiness::refuses_the_fd(&error) {
                // The feed's failure, not the driver's (its next turn
                // retries, or it is given up).
                let now = Instant::now();
                let failed = slot.fail(id, FailedCall::FdPoll, error, now, &mut self.stats);
                self.failed.get_or_insert(failed);
                self.busy = true;
            } else {
                failure.get_or_insert(DriverError::Io(error));
            }
            return None;
        }
        if c.result >= 0 {
            slot.fd_fired = true;
            self.stats.fd_wakes += 1;
            self.busy = true;
        }
        None
    }
}
