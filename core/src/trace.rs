//! Events at the control-plane points, behind the `tracing` cargo feature.
//!
//! `event!(LEVEL, fields.., "message")` is `tracing::event!` at
//! `tracing::Level::LEVEL` (target: the calling module's path) with the
//! feature, and expands to `()` without it: its arguments are not even
//! evaluated, so an event costs nothing in a build without the feature.
//! Only control-plane code calls it, never a post's or a dequeue's path.

#[cfg(feature = "tracing")]
macro_rules! event {
    ($level:ident, $($rest:tt)+) => {
        ::tracing::event!(::tracing::Level::$level, $($rest)+)
    };
}

#[cfg(not(feature = "tracing"))]
macro_rules! event {
    ($level:ident, $($rest:tt)+) => {
        ()
    };
}

pub(crate) use event;
