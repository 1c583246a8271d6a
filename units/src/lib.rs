//! systemd for nodectl: unit files, drop-ins and `.link` files rendered from settings (pure:
//! [`render`], [`kubelet`]), and the typed systemd client over D-Bus ([`systemd`]).

/// A crash point: with the `failpoints` feature and FAILPOINTS naming it (action `return`), the
/// process aborts here, as if killed at this instant (the crash campaign); nothing otherwise.
/// The one definition: this crate's systemd calls and the agent's writes use it.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        $crate::__fail::fail_point!($name, |_| { std::process::abort() })
    };
}
#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {};
}
#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub use fail as __fail;

pub mod jobs;
pub mod kubelet;
pub mod memo;
pub mod render;
pub mod systemd;
