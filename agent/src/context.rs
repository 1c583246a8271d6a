//! What every step sees: the root, the host, the settings, the labeler and systemd.

use nodectl_selinux::Labeler;
use nodectl_units::systemd::Systemd;

use crate::config::Settings;
use crate::fsio::Writer;
use crate::host::Host;
use crate::root::Root;

pub struct Cx {
    pub root: Root,
    pub host: Host,
    pub settings: Settings,
    pub labeler: Labeler,
    pub systemd: Systemd,
}

impl Cx {
    pub fn new(root: Root, host: Host, settings: Settings, systemd: Systemd) -> Self {
        let labeler = Labeler::new(root.dir(), &host.selinux);
        Cx {
            root,
            host,
            settings,
            labeler,
            systemd,
        }
    }

    pub fn writer(&self) -> Writer<'_> {
        Writer::new(&self.root, &self.labeler)
    }
}
