//! Small pure utilities every layer may use: time formatting, jitter, Kubernetes name syntax,
//! reboot windows and time zones, output for the locale.

pub mod bounded;
pub mod labels;
pub mod locale;

/// A crash point (the crash campaign; `nodectl/failpoints` turns on `nodectl-units/failpoints`).
pub(crate) use nodectl_units::crash_point;
pub mod names;
pub mod settled;
pub mod time;
pub mod timers;
pub mod window;

/// A uniformly drawn fraction in [0, 1) for jitter, from the OS's randomness.
pub fn jitter() -> f64 {
    let mut b = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .expect("OS randomness");
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}
