//! The panics the tests provoke, kept quiet.

use std::sync::Once;

/// Every panic a test provokes says this; the hook keeps them quiet.
pub const PROVOKED: &str = "provoked by a test";

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
            if message != Some(PROVOKED) {
                default(info);
            }
        }));
    });
}
