//! The device feeds a driver adds itself: a completion feed registered
//! while nobody consumes its device's async events brings a feed of them
//! into its own EVD ([`Driver::register`](crate::Driver::register)). That
//! device feed lives as long as the feed that brought it (its parent): the
//! parent's removal stops it at once (no post into the removed feed's EVD
//! after the removal begins), drops it once its poll has ended (which
//! gives the device's events back to the device), and then offers them to
//! the feeds left, as a registration would: the first whose device's
//! events nobody consumes takes them into its EVD.

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
        if self.shared.stop_requested() {
            return;
        }
        // A device feed is removed as `Drop`, which a refused cancellation
        // does not fail: it is then served on, as before the removal.
        let _ = self.begin_remove(child, Removal::Drop);
    }

    /// A device feed's poll has ended after its parent's removal: drop it
    /// (its code's panic kept, as a turn's), then offer its device's events
    /// to the feeds left.
    pub(super) fn drop_device_feed(&mut self, _id: FeedId, feed: Box<dyn std::any::Any + Send>) {
        trace::event!(DEBUG, feed = ?_id, "device feed dropped with its parent");
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(feed))) {
            self.stats.handler_panics += 1;
            self.caught.get_or_insert(Panic::new(payload));
        }
        self.offer_device_events();
    }

    /// Offer the device events nobody consumes to every registered feed that
    /// brought no device feed, as its registration did: each that takes
    /// them gets a device feed into its EVD.
    fn offer_device_events(&mut self) {
        for index in 0..self.slots.len() {
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            if slot.removing.is_some() || slot.device_feed.is_some() {
                continue;
            }
            // The feed's own code (its CQ's `device_events`).
            let offered = catch_unwind(AssertUnwindSafe(|| slot.source.device_feed()));
            let device_feed = match offered {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(payload) => {
                    self.stats.handler_panics += 1;
                    self.caught.get_or_insert(Panic::new(payload));
                    continue;
                }
            };
            // A device feed has an fd: its insert cannot fail.
            if let Ok(child) = self.insert(device_feed, FeedMode::Event) {
                if let Some(slot) = self.slots[index].as_mut() {
                    slot.device_feed = Some(child);
                }
            }
        }
    }
}
