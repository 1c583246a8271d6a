//! What host this is: the OS from os-release and the SELinux state from selinuxfs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::root::Root;
use nodectl_selinux::{HostSelinux, Mode};

/// The operating system family, from os-release `ID` (and `VARIANT_ID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Os {
    /// Fedora CoreOS (`ID=fedora`, `VARIANT_ID=coreos`).
    FedoraCoreos,
    /// Flatcar Container Linux (`ID=flatcar`).
    Flatcar,
    /// CoreOS Container Linux: end of life since May 2020; refused.
    ContainerLinux,
    /// Any other systemd host (allowed; the test VM is one).
    Generic,
}

/// The host nodectl runs on: its OS and SELinux state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// The OS family.
    pub os: Os,
    /// `PRETTY_NAME` (or `NAME`) from os-release.
    pub name: String,
    /// `VERSION_ID` (or `VERSION`) from os-release; empty when unknown.
    pub version: String,
    /// Which os-release file was read.
    pub os_release: Option<String>,
    /// The SELinux state: mode, MLS, policy type.
    pub selinux: HostSelinux,
}

/// Why the host could not be detected or is refused.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The host is CoreOS Container Linux, which nodectl refuses.
    #[error("{file}: this is CoreOS Container Linux ({version}), end-of-life since May 2020 and no longer updated. Migrate the node to Flatcar Container Linux (its direct successor, in-place update path) or Fedora CoreOS.")]
    EndOfLife {
        /// The os-release file that says so.
        file: String,
        /// Its `VERSION_ID` (or `VERSION`).
        version: String,
    },
    /// os-release or selinuxfs could not be read.
    #[error("{0}")]
    Io(String),
}

/// Parses os-release (`KEY=value`, values optionally quoted).
pub(crate) fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.replace("\\\"", "\"")))
        })
        .collect()
}

pub(crate) fn classify(fields: &BTreeMap<String, String>) -> Os {
    let id = fields.get("ID").map(String::as_str).unwrap_or("");
    let variant = fields.get("VARIANT_ID").map(String::as_str).unwrap_or("");
    match (id, variant) {
        ("fedora", "coreos") => Os::FedoraCoreos,
        ("flatcar", _) => Os::Flatcar,
        ("coreos", _) => Os::ContainerLinux,
        _ => Os::Generic,
    }
}

impl Host {
    /// Reads `/etc/os-release`, then `/usr/lib/os-release`, and selinuxfs, under `root`.
    /// Container Linux is refused with what to migrate to.
    pub fn detect(root: &Root) -> Result<Host, HostError> {
        let mut found = None;
        for f in ["/etc/os-release", "/usr/lib/os-release"] {
            match crate::util::bounded::read_to_string(
                &root.path(f),
                crate::util::bounded::MAX_SMALL_BYTES,
            ) {
                Ok(t) => {
                    found = Some((f, t));
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(HostError::Io(format!("{}: {e}", root.path(f).display()))),
            }
        }
        let selinux = HostSelinux::detect(root.dir()).map_err(|e| HostError::Io(e.to_string()))?;
        let Some((file, text)) = found else {
            return Ok(Host {
                os: Os::Generic,
                name: "unknown (no os-release)".into(),
                version: String::new(),
                os_release: None,
                selinux,
            });
        };
        let fields = parse_os_release(&text);
        let os = classify(&fields);
        let version = fields
            .get("VERSION_ID")
            .or(fields.get("VERSION"))
            .cloned()
            .unwrap_or_default();
        if os == Os::ContainerLinux {
            return Err(HostError::EndOfLife {
                file: root.path(file).display().to_string(),
                version,
            });
        }
        let name = fields
            .get("PRETTY_NAME")
            .or(fields.get("NAME"))
            .cloned()
            .unwrap_or_else(|| "Linux".into());
        Ok(Host {
            os,
            name,
            version,
            os_release: Some(file.to_string()),
            selinux,
        })
    }

    /// A generic host without SELinux (tests).
    pub fn generic() -> Host {
        Host::with_os(Os::Generic)
    }

    /// A host of the given OS without SELinux (tests).
    pub fn with_os(os: Os) -> Host {
        Host {
            os,
            name: format!("{os:?}"),
            version: String::new(),
            os_release: None,
            selinux: HostSelinux {
                mode: Mode::Absent,
                mls: false,
                policy: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FCOS: &str = "NAME=\"Fedora Linux\"\nVERSION=\"42.20250803.3.0 (CoreOS)\"\nID=fedora\nVERSION_ID=42\nVARIANT=\"CoreOS\"\nVARIANT_ID=coreos\nPRETTY_NAME=\"Fedora CoreOS 42.20250803.3.0\"\n";
    const FLATCAR: &str = "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\nID_LIKE=coreos\nVERSION=4230.2.1\nVERSION_ID=4230.2.1\nPRETTY_NAME=\"Flatcar Container Linux by Kinvolk 4230.2.1 (Oklo)\"\n";
    const CL: &str = "NAME=\"Container Linux by CoreOS\"\nID=coreos\nVERSION=2512.3.0\nVERSION_ID=2512.3.0\nPRETTY_NAME=\"Container Linux by CoreOS 2512.3.0 (Oklo)\"\n";
    const DEBIAN: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";

    use crate::root::scratch_with as root_with;

    #[test]
    fn classifies_fcos_flatcar_and_generic() {
        let (_d, r) = root_with("/etc/os-release", FCOS);
        let h = Host::detect(&r).unwrap();
        assert_eq!((h.os, h.version.as_str()), (Os::FedoraCoreos, "42"));
        assert_eq!(h.name, "Fedora CoreOS 42.20250803.3.0");
        let (_d, r) = root_with("/usr/lib/os-release", FLATCAR);
        let h = Host::detect(&r).unwrap();
        assert_eq!(h.os, Os::Flatcar);
        assert_eq!(h.os_release.as_deref(), Some("/usr/lib/os-release"));
        let (_d, r) = root_with("/etc/os-release", DEBIAN);
        assert_eq!(Host::detect(&r).unwrap().os, Os::Generic);
    }

    #[test]
    fn refuses_container_linux_with_migration_advice() {
        let (_d, r) = root_with("/etc/os-release", CL);
        let e = Host::detect(&r).unwrap_err().to_string();
        assert!(
            e.contains("end-of-life") && e.contains("Flatcar") && e.contains("Fedora CoreOS"),
            "{e}"
        );
        assert!(e.contains("/etc/os-release"), "{e}");
    }

    #[test]
    fn etc_wins_over_usr_lib() {
        let (_d, r) = root_with("/usr/lib/os-release", FLATCAR);
        std::fs::create_dir_all(r.path("/etc")).unwrap();
        std::fs::write(r.path("/etc/os-release"), FCOS).unwrap();
        assert_eq!(Host::detect(&r).unwrap().os, Os::FedoraCoreos);
    }
}
