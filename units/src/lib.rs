//! systemd for nodectl: unit files, drop-ins and `.link` files rendered from settings (pure:
//! [`render`], [`kubelet`]), and the typed systemd client over D-Bus ([`systemd`]).

/// A crash point: with the `failpoints` feature and FAILPOINTS naming it (action `return`), the
/// process aborts here, as if killed at this instant (the crash campaign); nothing otherwise.
/// The one definition: this crate's systemd calls and the agent's writes use it.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {{
        $crate::__tally($name);
        $crate::__fail::fail_point!($name, |_| { std::process::abort() })
    }};
}
#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {};
}
#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub use fail as __fail;

/// With the `failpoints` feature and NODECTL_CRASH_TALLY naming a file: each crash point
/// reached appends its name there (the crash campaign counts a pass's hits per point from it,
/// to choose which hits to kill at). A file that cannot be opened counts nothing.
#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub fn __tally(name: &str) {
    use std::io::Write;
    use std::sync::{Mutex, OnceLock};
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os("NODECTL_CRASH_TALLY")?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Mutex::new(f))
    });
    if let Some(f) = file {
        if let Ok(mut f) = f.lock() {
            let _ = writeln!(f, "{name}");
        }
    }
}

pub mod jobs;
pub mod kubelet;
pub mod memo;
pub mod render;
pub mod state;
pub mod systemd;
