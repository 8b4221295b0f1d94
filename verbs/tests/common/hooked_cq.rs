//! A software CQ whose calls a test takes over, one hook per call: the
//! provider failures and the user code the feeds and the driver must
//! survive (a failing poll, arm or `get_event`, code run at registration, a
//! destroy that panics), planted at known points without a wrapper type per
//! test.

use evd_verbs::soft::SoftCq;
use evd_verbs::{AsyncEventSource, CompletionQueue, PollError, WorkCompletion};
use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;

type Hook<A, R> = Box<dyn FnMut(&mut SoftCq, A) -> R + Send>;

/// A hook that answers `device_events`.
pub type DeviceEvents = Box<dyn FnMut() -> Option<Box<dyn AsyncEventSource>> + Send>;

/// A [`SoftCq`] whose calls run the hook set for them, if any, in place of
/// the soft CQ's own (a hook gets the soft CQ, to call it too);
/// `at_registration` runs once, from `device_events` (which a driver calls on
/// its own thread when it registers the feed), and `at_drop` when the CQ is
/// dropped.
pub struct HookedCq {
    pub cq: SoftCq,
    pub poll: Option<Hook<usize, Result<usize, PollError>>>,
    pub req_notify: Option<Hook<bool, io::Result<()>>>,
    pub get_event: Option<Hook<(), io::Result<bool>>>,
    /// Runs in place of `ack_events` (with the count to acknowledge); the
    /// hook answers for the count it passes on to the soft CQ.
    pub ack_events: Option<Hook<u32, ()>>,
    pub at_registration: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// What `device_events` returns after `at_registration` ran (`None`
    /// when unset): the events of a device of the test's making.
    pub device_events: Mutex<Option<DeviceEvents>>,
    pub at_drop: Option<Box<dyn FnOnce() + Send>>,
    /// The channel fd it reports instead of the soft CQ's own.
    pub channel_fd: Option<RawFd>,
    /// It reports no channel at all (a CQ made without one).
    pub channel_less: bool,
}

impl HookedCq {
    /// No hook set: the soft CQ itself.
    pub fn new(cq: SoftCq) -> Self {
        HookedCq {
            cq,
            poll: None,
            req_notify: None,
            get_event: None,
            ack_events: None,
            at_registration: Mutex::new(None),
            device_events: Mutex::new(None),
            at_drop: None,
            channel_fd: None,
            channel_less: false,
        }
    }
}

impl CompletionQueue for HookedCq {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, PollError> {
        match &mut self.poll {
            // The hook says how many of `out` to fill (or fails): the soft
            // CQ fills them.
            Some(hook) => {
                let n = hook(&mut self.cq, out.len())?;
                self.cq.poll(&mut out[..n])
            }
            None => self.cq.poll(out),
        }
    }
    fn req_notify(&mut self, solicited_only: bool) -> io::Result<()> {
        match &mut self.req_notify {
            Some(hook) => hook(&mut self.cq, solicited_only),
            None => self.cq.req_notify(solicited_only),
        }
    }
    fn channel_fd(&self) -> Option<RawFd> {
        if self.channel_less {
            return None;
        }
        self.channel_fd.or_else(|| self.cq.channel_fd())
    }
    fn get_event(&mut self) -> io::Result<bool> {
        match &mut self.get_event {
            Some(hook) => hook(&mut self.cq, ()),
            None => self.cq.get_event(),
        }
    }
    unsafe fn ack_events(&mut self, count: u32) {
        match &mut self.ack_events {
            Some(hook) => hook(&mut self.cq, count),
            // SAFETY: this method's contract, passed on to the soft CQ.
            None => unsafe { self.cq.ack_events(count) },
        }
    }
    fn device_events(&self) -> Option<Box<dyn AsyncEventSource>> {
        let hook = self.at_registration.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.device_events
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|f| f())
    }
}

impl Drop for HookedCq {
    fn drop(&mut self) {
        if let Some(hook) = self.at_drop.take() {
            hook();
        }
    }
}
