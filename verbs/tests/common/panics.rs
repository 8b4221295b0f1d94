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
