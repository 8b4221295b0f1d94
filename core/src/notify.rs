//! Where a notification goes: the consumer's registered waker (async tasks,
//! and blocking waits through an unpark-this-thread waker) and, if the
//! consumer asked for one, an eventfd for epoll and io_uring loops.
//!
//! The third target is the CNO an enabled EVD is bound to, reached through
//! [`CnoTarget`] so that the engine never names the CNO's types.
//!
//! Posting into an armed EVD costs one `WakerSlot::wake` (two
//! read-modify-writes on the slot's lock word, and the waker's own wake),
//! plus a `write(2)` on the eventfd only when one was made.

use crate::sync::{Arc, UnsafeCell};
use crate::unwind::Panics;
use crate::waker_slot::WakerSlot;
use std::task::Waker;

#[cfg(any(target_os = "linux", loom))]
use crate::sync::eventfd::{self, Eventfd, EventfdCell};

/// The notification targets of one EVD.
pub(crate) struct NotifyTargets {
    waker: WakerSlot,
    #[cfg(any(target_os = "linux", loom))]
    eventfd: EventfdCell,
}

impl NotifyTargets {
    pub(crate) fn new() -> Self {
        NotifyTargets {
            waker: WakerSlot::default(),
            #[cfg(any(target_os = "linux", loom))]
            eventfd: EventfdCell::new(),
        }
    }

    /// Register the waker the next notification wakes. Must come before the
    /// arm CAS that makes the notification possible.
    #[inline]
    pub(crate) fn register(&self, w: &Waker) {
        self.waker.register(w);
    }

    /// Wake only the waker (unwaitable, teardown).
    pub(crate) fn wake_waker(&self) {
        self.waker.wake();
    }

    /// Take the waker out unwoken (the consumer gone: [`WakerSlot::take_unwoken`]).
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        self.waker.take_unwoken()
    }

    /// Deliver a notification to every target.
    #[inline]
    pub(crate) fn notify(&self) {
        // The eventfd first: a waker that panics must not swallow it.
        #[cfg(any(target_os = "linux", loom))]
        if let Some(fd) = self.eventfd.get() {
            eventfd::signal(fd);
        }
        self.waker.wake();
    }

    /// The eventfd, made on first use, and whether this call made it.
    #[cfg(any(target_os = "linux", loom))]
    pub(crate) fn eventfd(&self) -> std::io::Result<(&Eventfd, bool)> {
        if let Some(fd) = self.eventfd.get() {
            return Ok((fd, false));
        }
        let fd = eventfd::make()?;
        // If two threads race here the loser's fd is closed; only the consumer
        // calls this, so it does not happen in practice.
        let mut made = false;
        let fd = self.eventfd.get_or_init(|| {
            made = true;
            fd
        });
        Ok((fd, made))
    }
}

/// What a CNO trigger found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reached {
    /// The key is in the ready set (or already was).
    Ready,
    /// The CNO was dropped: nobody waits on its ready set. The caller
    /// notifies the EVD's own targets instead.
    CnoGone,
}

/// The CNO end of a binding as the engine sees it: a trigger puts the
/// binding's key (its `slot`) in the CNO's ready set. The engine names no
/// CNO type; the CNO's shared state implements this ([`crate::cno`]).
pub(crate) trait CnoTarget: Send + Sync {
    /// A post, close or loss took `CNO_ARMED`: make `slot`'s key ready. A
    /// panic of the CNO waiter's waker is kept in `panics` (the answer
    /// still holds: the caller acts on it, then raises the panic).
    fn trigger(&self, slot: u32, panics: &mut Panics) -> Reached;
}

/// The EVD's link to the CNO it is bound to: the target a trigger reaches,
/// in the EVD's shared state.
///
/// Written only by the EVD's consumer, and only while no trigger can read it:
/// `CNO_ARMED` is clear and every trigger that took it has reached its slot
/// (the disable barrier). Read by the thread that took `CNO_ARMED`, after its
/// `Acquire` CAS on the state word, which the enable's `Release` CAS (after
/// the write) precedes.
///
/// `kept` holds every CNO this EVD was ever bound to, so that a trigger still
/// pushing into a CNO's ring after the barrier (its count is reached before
/// the push) never outlives that CNO.
pub(crate) struct CnoLink {
    cell: UnsafeCell<LinkState>,
}

struct LinkState {
    /// The bound CNO and the binding's slot in it; the CNO is kept alive by
    /// an entry of `kept`.
    bound: Option<(*const dyn CnoTarget, u32)>,
    /// Every CNO this EVD was bound to, once each (by address), each kept by
    /// an owning handle (an `Arc` of the CNO's shared state).
    kept: Vec<(usize, Box<dyn Send + Sync>)>,
}

impl CnoLink {
    pub(crate) fn new() -> Self {
        CnoLink {
            cell: UnsafeCell::new(LinkState {
                bound: None,
                kept: Vec::new(),
            }),
        }
    }

    /// The bound target and slot, copied out.
    ///
    /// # Safety
    /// The caller is the EVD's consumer, or the thread that took `CNO_ARMED`
    /// with an `Acquire` CAS and has not yet reached its slot. The target
    /// stays allocated as long as this link.
    #[inline]
    pub(crate) unsafe fn current(&self) -> Option<(*const dyn CnoTarget, u32)> {
        // SAFETY: no writer runs now (the caller's contract and the type doc).
        self.cell.with(|p| unsafe { (*p).bound })
    }

    /// Bind to `slot` of the CNO `target` (kept alive by this link from now
    /// on), or unbind (`None`).
    ///
    /// # Safety
    /// Only the EVD's consumer, while `CNO_ARMED` is clear and every trigger
    /// that took it has reached its slot.
    pub(crate) unsafe fn set<C: CnoTarget + 'static>(&self, new: Option<(Arc<C>, u32)>) {
        // SAFETY: by the contract no reader runs.
        self.cell.with_mut(|p| unsafe {
            let st = &mut *p;
            st.bound = new.map(|(target, slot)| {
                let ptr: *const dyn CnoTarget = Arc::<C>::as_ptr(&target);
                let id = ptr as *const () as usize;
                if !st.kept.iter().any(|(k, _)| *k == id) {
                    st.kept.push((id, Box::new(target)));
                }
                (ptr, slot)
            });
        })
    }
}
