//! systemd for nodectl: unit files, drop-ins and `.link` files rendered from settings (pure:
//! [`render`], [`kubelet`]), and the typed systemd client over D-Bus ([`systemd`]).

pub mod kubelet;
pub mod render;
pub mod systemd;
