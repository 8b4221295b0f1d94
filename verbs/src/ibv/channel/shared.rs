//! The channel as a [`ChannelFeed`](crate::ChannelFeed) serves it: getting
//! its events, telling its CQs apart, acknowledging an unknown CQ's event.

use super::*;
use crate::ibv::IbvCq;
use crate::source::{ChannelEvent, CqKey, SharedChannel};

impl SharedChannel for Arc<CompletionChannel> {
    type Cq = IbvCq;

    fn fd(&self) -> RawFd {
        CompletionChannel::fd(self)
    }

    fn get_cq_event(&mut self) -> io::Result<Option<ChannelEvent>> {
        let mut cq = ptr::null_mut();
        let mut cq_context = ptr::null_mut();
        let mut counts = self.events();
        // SAFETY: a live, non-blocking channel; out-parameters are locals;
        // under `events`, with every arm of its CQs.
        let r = unsafe { ffi::ibv_get_cq_event(self.channel, &mut cq, &mut cq_context) };
        // Counted for a CQ made here and registered (tagged with its
        // registration); not (tag 0) for one made elsewhere on the
        // channel, or one whose destroy took its registration already.
        let mut tag = 0;
        if r == 0 {
            if let Some(c) = counts.cqs.get_mut(&(cq as usize)) {
                c.unacked += 1;
                tag = c.tag;
            }
        }
        drop(counts);
        if r != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        // SAFETY: one event of the live CQ `cq` was just got (its destroy
        // waits for the ack, or makes it itself: `release_cq`), and is not
        // acknowledged.
        Ok(Some(unsafe {
            ChannelEvent::tagged(CqKey(cq as usize), tag)
        }))
    }

    fn key_of(&self, cq: &IbvCq) -> Option<CqKey> {
        match &cq.raw.shared {
            Some(ch) if Arc::ptr_eq(ch, self) => Some(CqKey(cq.raw.cq as usize)),
            _ => None,
        }
    }

    unsafe fn ack_unknown(&mut self, event: ChannelEvent) {
        let cq = event.cq().0 as *mut ffi::ibv_cq;
        // Under the lock, whatever the event: a registered CQ's count goes
        // down with its ack, and a destroy (which takes the registration,
        // then acknowledges, under the lock) cannot slip in between.
        let mut counts = self.events();
        match (counts.cqs.get_mut(&(cq as usize)), event.tag()) {
            // The registered CQ's own (or one rebuilt with
            // `ChannelEvent::new`, tag 0: the only live CQ at that address
            // is the registered one), unless none is left counted (then it
            // was acknowledged already).
            (Some(c), tag) if tag == 0 || tag == c.tag => {
                if c.unacked > 0 {
                    // SAFETY: this method's contract (got from this
                    // channel, so `ChannelEvent::new`'s: the key is the
                    // address of a live CQ of this provider with this one
                    // event got and not acknowledged); registered, so not
                    // destroyed (its destroy takes the registration first,
                    // under this lock).
                    unsafe { ffi::ibv_ack_cq_events(cq, 1) };
                    c.unacked -= 1;
                }
            }
            // Counted for a CQ whose destroy acknowledged it already (its
            // registration gone, or a later CQ's at the same address).
            (Some(_), _) => {}
            (None, tag) if tag != 0 => {}
            // A CQ made elsewhere on the channel, or one whose destroy
            // began before this event was got (not counted): nothing else
            // acknowledges it, and ibv_destroy_cq waits for this ack, so
            // the CQ is live during it.
            // SAFETY: as above.
            _ => unsafe { ffi::ibv_ack_cq_events(cq, 1) },
        }
    }
}
