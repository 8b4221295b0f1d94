//! The device feeds a driver adds itself: a completion feed registered
//! while nobody consumes its device's async events brings a feed of them
//! into its own EVD ([`Driver::register`](crate::Driver::register)). That
//! device feed lives as long as the feed that brought it (its parent): the
//! parent's removal stops it at once (no post into the removed feed's EVD
//! after the removal begins), drops it once its poll has ended (which
//! gives the device's events back to the device), and then offers them to
//! the feeds left, as a registration would: the first whose device's
//! events nobody consumes, and whose EVD is still served, takes them into
//! its EVD. A device feed whose poll the backend refuses to cancel is
//! stopped all the same, and the cancellation asked for again every turn.
//!
//! A device feed whose EVD closes (its consumer gone) while the feed that
//! brought it stays registered finds the close at its next turn (the
//! device's next event: no event is taken once the EVD is closed; one taken
//! before, held for room, goes with the feed) and is done: it is dropped
//! then, as on its parent's removal, and the device's events offered to
//! the feeds left. One that stopped because the device's events failed is
//! kept: it posted that failure into its EVD. (So is one the driver gave up
//! because the backend kept refusing its fd's poll: the device's events
//! stay with it until its parent is removed.)

use super::cycle::Phase;
use super::slot::Removal;
use super::{Driver, FeedId, FeedMode};
use crate::driver::error::Panic;
use crate::trace;
use std::panic::{AssertUnwindSafe, catch_unwind};

impl Driver {
    /// A feed is being removed: stop the device feed it brought (`child`),
    /// if any. Nothing during a shutdown, which hands every feed back.
    pub(super) fn remove_device_feed_of(&mut self, child: Option<FeedId>) {
        let Some(child) = child else { return };
        // Not `stop_requested`, which another thread sets at any time: the
        // shutdown's own removals begin after this flag.
        if self.shutting_down {
            return;
        }
        // A removal as `Drop` never fails: a refused cancellation is owed.
        let _ = self.begin_remove(child, Removal::Drop);
    }

    /// The device feeds among the feeds that became done this turn whose EVD
    /// is closed (see the module docs): dropped as on their parent's
    /// removal, which offers the device's events to the feeds left.
    pub(super) fn release_closed_device_feeds(&mut self) {
        let mut done = std::mem::take(&mut self.newly_done);
        for child in done.drain(..) {
            if self.shutting_down {
                break;
            }
            let parent = self
                .slots
                .iter_mut()
                .flatten()
                .find(|s| s.device_feed == Some(child) && s.removing.is_none());
            // The parent's EVD is the device feed's: closed, or the device
            // feed failed (and keeps that failure's place in the EVD).
            let Some(parent) = parent.filter(|p| !p.source.evd_open()) else {
                continue;
            };
            parent.device_feed = None;
            // A removal as `Drop` never fails: a refused cancellation is owed.
            let _ = self.begin_remove(child, Removal::Drop);
        }
        // Its capacity is kept: no allocation once a few feeds were done.
        self.newly_done = done;
    }

    /// Ask again for the cancellations the backend refused: a device feed
    /// stopped by its parent's removal is dropped once its poll ends.
    pub(super) fn cancel_owed_polls(&mut self) {
        let mut owed = std::mem::take(&mut self.cancels_owed);
        owed.retain(|&id| {
            let in_flight = self.slots.get(id.index as usize).is_some_and(|s| {
                s.as_ref()
                    .is_some_and(|s| s.generation == id.generation && s.poll_in_flight)
            });
            in_flight && self.cancel_poll(id).is_err()
        });
        self.cancels_owed = owed;
    }

    /// A device feed's poll has ended after its parent's removal: drop it
    /// (its code's panic kept, as a turn's; counted and swallowed during a
    /// shutdown, as for the device feeds the shutdown drops itself: kept, it
    /// would make the shutdown drop the keyed feeds with it), then offer its
    /// device's events to the feeds left.
    pub(super) fn drop_device_feed(&mut self, _id: FeedId, feed: Box<dyn std::any::Any + Send>) {
        trace::event!(DEBUG, feed = ?_id, "device feed dropped with its parent");
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(feed))) {
            self.stats.handler_panics += 1;
            let panic = Panic::new(payload);
            if self.shutting_down {
                trace::event!(
                    WARN,
                    payload = panic.message(),
                    "a device feed's drop panicked at the shutdown; swallowed"
                );
            } else {
                self.caught.get_or_insert(panic);
            }
        }
        self.offer_device_events();
    }

    /// Offer the device events nobody consumes to every registered feed that
    /// brought no device feed, as its registration did: each that takes
    /// them gets a device feed into its EVD.
    fn offer_device_events(&mut self) {
        // A shutdown adds no feed (every slot is being removed by then).
        if self.shutting_down {
            return;
        }
        for index in 0..self.slots.len() {
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            // Not to a feed that serves nobody any more (its EVD closed,
            // its CQ failed, given up): the events would stop there.
            let served = slot.phase != Phase::Done && !slot.given_up;
            if slot.removing.is_some() || slot.device_feed.is_some() || !served {
                continue;
            }
            // The feed's own code (its CQ's `device_events`, the source's
            // `fd` at the insert), whose panic is kept as a turn's; a
            // device feed not inserted is dropped under the same catch.
            let inserted = catch_unwind(AssertUnwindSafe(|| {
                let source = self.slots[index].as_mut()?.source.as_mut();
                if !source.evd_open() {
                    return None;
                }
                let device_feed = source.device_feed()?;
                self.insert(device_feed, FeedMode::Event).ok()
            }));
            match inserted {
                Ok(Some(child)) => {
                    if let Some(slot) = self.slots[index].as_mut() {
                        slot.device_feed = Some(child);
                    }
                }
                Ok(None) => {}
                Err(payload) => {
                    self.stats.handler_panics += 1;
                    self.caught.get_or_insert(Panic::new(payload));
                }
            }
        }
    }
}
