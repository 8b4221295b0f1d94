//! The panics the tests provoke, kept quiet.

use std::sync::Once;

/// Every panic a test provokes says this; the hook keeps them quiet.
pub const PROVOKED: &str = "provoked by a test";

/// A panic payload whose own `Drop` panics (with [`PROVOKED`]) unless it was
/// defused: what `catch_unwind` hands back cannot be dropped blindly
/// (rust-lang/rust#86027).
pub struct Trapped {
    armed: bool,
}

impl Trapped {
    /// Panic with an armed trap.
    pub fn provoke() -> ! {
        std::panic::panic_any(Trapped { armed: true })
    }

    /// Defuse a payload if it is a trap; true if it was one.
    pub fn defuse(payload: Box<dyn std::any::Any + Send>) -> bool {
        match payload.downcast::<Trapped>() {
            Ok(mut trap) => {
                trap.armed = false;
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Trapped {
    fn drop(&mut self) {
        if self.armed {
            panic!("{}", PROVOKED);
        }
    }
}

/// A device's async events whose drop panics (with [`PROVOKED`]): the
/// provider's code.
pub struct EventsThatPanicOnDrop(pub evd_verbs::soft::SoftAsyncEvents);

impl evd_verbs::AsyncEventSource for EventsThatPanicOnDrop {
    fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
    fn next_event(&mut self) -> std::io::Result<Option<evd_verbs::AsyncEvent>> {
        self.0.next_event()
    }
}

impl Drop for EventsThatPanicOnDrop {
    fn drop(&mut self) {
        panic!("{}", PROVOKED);
    }
}

/// Silence the provoked panics (hundreds of them) and only those.
pub fn quiet_provoked_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if message != Some(PROVOKED) && !payload.is::<Trapped>() {
                default(info);
            }
        }));
    });
}

/// An EVD of `capacity` holding `queued`, handed to a SingleInstance upcall
/// enabled with `Invoke::New` (the queued events wait for a post) whose
/// handler sends on each event it is handed and panics (provoked) on the
/// first: its poster, its dispatcher, and the events handled, in order.
pub fn evd_under_a_handler_that_panics_once(
    capacity: usize,
    queued: &[evd_verbs::VerbsEvent],
) -> (
    evd::Poster<evd_verbs::VerbsEvent>,
    evd::Upcalls<evd_verbs::VerbsEvent>,
    std::sync::mpsc::Receiver<evd_verbs::VerbsEvent>,
) {
    quiet_provoked_panics();
    let (poster, consumer) = evd::bounded(capacity).unwrap();
    for &ev in queued {
        poster.post(ev).unwrap();
    }
    let (seen, handled) = std::sync::mpsc::channel();
    let first = std::sync::atomic::AtomicBool::new(true);
    let up = consumer.into_upcalls(
        evd::UpcallPolicy::SingleInstance,
        evd::Invoke::New,
        move |ev, _| {
            seen.send(ev.expect("no lossy post here")).unwrap();
            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                panic!("{PROVOKED}");
            }
        },
    );
    (poster, up, handled)
}
