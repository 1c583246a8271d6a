//! Zincati, as nodectld sees it: its FleetLock client id (from the machine id), and its
//! configuration merged as Zincati merges it, to say whether Zincati asks this nodectld before
//! it reboots (issue 65, 1: Typhoon's fleetlock addon has users add
//! `/etc/zincati/config.d/55-update-strategy.toml`, which sorts after nodectl's
//! `55-nodectl-fleetlock.toml` and wins).
//!
//! How Zincati reads its configuration (zincati `src/config/mod.rs`, `Settings::assemble`;
//! `src/config/inputs.rs`, `ConfigInput::read_configs` and `UpdateInput::from_fragments`;
//! liboverdrop's `FragmentScanner::scan`): `*.toml` files of `/usr/lib`, `/run` and
//! `/etc/zincati/config.d/`, dotfiles left out; a name in a later directory replaces the same
//! name in an earlier one, a symlink to `/dev/null` drops it, and any other entry that is not a
//! regular file (a symlink to a file included: liboverdrop looks at the entry, not its target)
//! is skipped; the fragments are then read in file-name order, a key set in a later one
//! replacing the earlier value. `updates.enabled` defaults to true and `updates.strategy` to
//! `immediate` (an empty strategy is `immediate`: `UpdateStrategy::with_config`). With
//! `fleet_lock`, Zincati asks `<base_url>` joined with `v1/pre-reboot` and
//! `v1/steady-state` (a URL join: a last path segment without a slash is replaced).
//! Zincati reads its configuration when it starts: a fragment changed since is read at its next
//! start.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::root::Root;

/// Zincati's configuration directories, in the order it reads them.
pub const CONFIG_DIRS: [&str; 3] = [
    "/usr/lib/zincati/config.d",
    "/run/zincati/config.d",
    "/etc/zincati/config.d",
];

/// One value of Zincati's merged configuration, and the fragment that set it (`None`: Zincati's
/// default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The value, as text.
    pub value: String,
    /// The fragment that set it.
    pub from: Option<String>,
}

/// Whether Zincati asks this nodectld before it reboots, from its configuration files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZincatiCheck {
    /// `coordinated`: Zincati asks nodectld's FleetLock before each reboot; `absent`: no Zincati
    /// here (nothing reboots the node for updates); `updates-off`:
    /// `updates.enabled = false` (Zincati does not update; nothing to coordinate);
    /// `uncoordinated`: Zincati reboots without asking nodectld; `unreadable`: a fragment Zincati
    /// cannot read (it does not start: no updates).
    pub state: String,
    /// `updates.enabled` as Zincati merges it.
    pub enabled: Setting,
    /// `updates.strategy` (`immediate` when unset or empty).
    pub strategy: Setting,
    /// `updates.fleet_lock.base_url`.
    pub base_url: Setting,
    /// What is wrong and what to do (none when coordinated or updates are off).
    pub problem: Option<String>,
}

impl ZincatiCheck {
    /// Zincati reboots without nodectld (or cannot start): what an operator must be told.
    pub fn is_problem(&self) -> bool {
        self.problem.is_some()
    }
}

/// A fragment in effect: its path, and its text or why it could not be read.
pub type Fragment = (PathBuf, Result<String, String>);

/// The fragments Zincati reads under `root`, in its merge order (see the module's note). A
/// directory that cannot be listed is an error; more than [`MAX_FRAGMENTS`] names too. Files are
/// opened without following a symlink (`fsio::open_regular`) and read within
/// [`crate::util::bounded::MAX_INPUT_BYTES`].
///
/// [`MAX_FRAGMENTS`]: crate::util::bounded::MAX_FRAGMENTS
pub fn fragments(root: &Root) -> Result<Vec<Fragment>, String> {
    use std::collections::BTreeMap;
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in CONFIG_DIRS {
        let real = root.path(dir);
        let entries = match std::fs::read_dir(&real) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{dir}: cannot list: {e}")),
        };
        for entry in entries {
            let entry = entry.map_err(|e| format!("{dir}: cannot list: {e}"))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || Path::new(&name).extension().is_none_or(|x| x != "toml") {
                continue;
            }
            // the entry itself, as liboverdrop looks at it (`DirEntry::file_type`: no follow)
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                if std::fs::read_link(entry.path()).is_ok_and(|t| t == Path::new("/dev/null")) {
                    by_name.remove(&name);
                }
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            by_name.insert(name, Path::new(dir).join(entry.file_name()));
            if by_name.len() > crate::util::bounded::MAX_FRAGMENTS {
                return Err(format!(
                    "more than {} Zincati config fragments",
                    crate::util::bounded::MAX_FRAGMENTS
                ));
            }
        }
    }
    Ok(by_name
        .into_values()
        .map(|path| {
            let text = read_fragment(root, &path);
            (path, text)
        })
        .collect())
}

/// One fragment's text: opened by descriptor without following a symlink, bounded, UTF-8.
fn read_fragment(root: &Root, path: &Path) -> Result<String, String> {
    let max = crate::util::bounded::MAX_INPUT_BYTES;
    let f = crate::fsio::open_regular(root, path)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "removed while read".to_string())?;
    let bytes = crate::util::bounded::read_from(f, max).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// Where FCOS installs Zincati's binary (zincati.service's `ExecStart=`), and where a build
/// from the crate puts it.
const BINARIES: [&str; 2] = ["/usr/libexec/zincati", "/usr/bin/zincati"];

/// Zincati's configuration under `root`, judged against nodectld's FleetLock on `listen`; state
/// `absent` (no problem) where neither Zincati nor a fragment of its is there: nothing reboots
/// the node for updates.
pub fn check(root: &Root, listen: SocketAddr) -> ZincatiCheck {
    match fragments(root) {
        Ok(f) if f.is_empty() && !BINARIES.iter().any(|b| root.path(b).exists()) => ZincatiCheck {
            state: "absent".into(),
            ..ZincatiCheck::default()
        },
        Ok(f) => judge(&f, listen),
        Err(e) => ZincatiCheck {
            state: "unreadable".into(),
            problem: Some(format!("Zincati's configuration cannot be read: {e}")),
            ..ZincatiCheck::default()
        },
    }
}

/// What Zincati would do with `fragments` (in merge order), against nodectld's FleetLock on
/// `listen` (`reboot.listen`).
pub fn judge(fragments: &[Fragment], listen: SocketAddr) -> ZincatiCheck {
    let mut c = ZincatiCheck {
        enabled: Setting {
            value: "true".into(),
            from: None,
        },
        strategy: Setting {
            value: "immediate".into(),
            from: None,
        },
        ..ZincatiCheck::default()
    };
    for (path, text) in fragments {
        if let Err(why) = merge(&mut c, path, text.as_deref()) {
            c.state = "unreadable".into();
            c.problem = Some(format!(
                "Zincati cannot read its configuration: {}: {why}; it does not start, and the node takes no updates",
                path.display()
            ));
            return c;
        }
    }
    let ours = format!("http://{listen}/");
    let from = |s: &Setting| {
        s.from
            .as_deref()
            .map_or("Zincati's default".to_string(), str::to_string)
    };
    let (state, problem) = if c.enabled.value == "false" {
        ("updates-off", None)
    } else if c.strategy.value != "fleet_lock" {
        (
            "uncoordinated",
            Some(format!(
                "Zincati's update strategy is {} (from {}): it reboots without asking nodectld's FleetLock at {ours}; remove that fragment or set strategy = \"fleet_lock\"",
                c.strategy.value,
                from(&c.strategy)
            )),
        )
    } else if !asks(&c.base_url.value, listen) {
        (
            "uncoordinated",
            Some(format!(
                "Zincati asks the FleetLock server at {} (from {}), not nodectld's at {ours}: reboot windows, gates, slots and drains do not apply; remove that fragment (Typhoon's fleetlock addon: 55-update-strategy.toml) and restart zincati",
                if c.base_url.value.is_empty() { "(none)" } else { &c.base_url.value },
                from(&c.base_url)
            )),
        )
    } else {
        ("coordinated", None)
    };
    c.state = state.into();
    c.problem = problem;
    c
}

/// Merges one fragment's `updates` table into `c` (Zincati's keys only; a type Zincati would
/// refuse is an error naming the key).
fn merge(c: &mut ZincatiCheck, path: &Path, text: Result<&str, &String>) -> Result<(), String> {
    let text = text.map_err(|e| format!("cannot read: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not TOML: {}", e.message()))?;
    let Some(updates) = table.get("updates") else {
        return Ok(());
    };
    let updates = updates.as_table().ok_or("updates: a table expected")?;
    let from = Some(path.display().to_string());
    if let Some(v) = updates.get("enabled") {
        let v = v
            .as_bool()
            .ok_or("updates.enabled: true or false expected")?;
        c.enabled = Setting {
            value: v.to_string(),
            from: from.clone(),
        };
    }
    if let Some(v) = updates.get("strategy") {
        let v = v.as_str().ok_or("updates.strategy: a string expected")?;
        c.strategy = Setting {
            value: if v.is_empty() { "immediate" } else { v }.to_string(),
            from: from.clone(),
        };
    }
    if let Some(fl) = updates.get("fleet_lock") {
        let fl = fl
            .as_table()
            .ok_or("updates.fleet_lock: a table expected")?;
        if let Some(v) = fl.get("base_url") {
            let v = v
                .as_str()
                .ok_or("updates.fleet_lock.base_url: a string expected")?;
            c.base_url = Setting {
                value: v.to_string(),
                from,
            };
        }
    }
    Ok(())
}

/// Whether Zincati's requests to `base_url` reach nodectld on `listen`: plain http, the host
/// `listen`'s address or `localhost`, its port, and `v1/...` joined onto the root path.
fn asks(base_url: &str, listen: SocketAddr) -> bool {
    let Ok(uri) = base_url.parse::<hyper::Uri>() else {
        return false;
    };
    if uri.scheme_str() != Some("http") || uri.query().is_some() {
        return false;
    }
    let Some(host) = uri.host() else { return false };
    let port = uri.port_u16().unwrap_or(80);
    if port != listen.port() {
        return false;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    // (`reboot.listen` is a loopback address: config/reboot.rs refuses any other)
    let same_host = match host.parse::<IpAddr>() {
        Ok(ip) => ip == listen.ip(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    // `v1/pre-reboot` joined onto the path: what is left of it is its part up to the last `/`
    let path = uri.path();
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    same_host && dir == "/"
}

/// Zincati's client id: systemd's app-specific machine id for Zincati's app id
/// (`sd_id128_get_machine_app_specific`): HMAC-SHA256 keyed with the machine id's 16 bytes over
/// the app id's 16 bytes, first 16 bytes, as a version-4 UUID, in hex.
pub(crate) fn zincati_id(machine_id_hex: &str) -> Option<String> {
    const APP: &str = "de35106b6ec24688b63afddaa156679b";
    let unhex = |s: &str| -> Option<Vec<u8>> {
        let s = s.trim();
        // 32 hex digits, checked before slicing (a 32-byte string with a multi-byte character
        // would otherwise split it and panic).
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        (0..16)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
            .collect()
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &unhex(machine_id_hex)?);
    let tag = ring::hmac::sign(&key, &unhex(APP)?);
    let mut b = [0u8; 16];
    b.copy_from_slice(&tag.as_ref()[..16]);
    b[6] = (b[6] & 0x0F) | 0x40;
    b[8] = (b[8] & 0x3F) | 0x80;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTEN: &str = "127.0.0.1:9455";
    /// FCOS's own fragments (zincati `dist/config.d/`).
    const DIST: &[(&str, &str)] = &[
        (
            "/usr/lib/zincati/config.d/10-auto-updates.toml",
            "[updates]\nenabled = true\nallow_downgrade = false\n",
        ),
        (
            "/usr/lib/zincati/config.d/30-updates-strategy.toml",
            "[updates]\nstrategy = \"immediate\"\n",
        ),
    ];
    const NODECTL: (&str, &str) = (
        "/etc/zincati/config.d/55-nodectl-fleetlock.toml",
        include_str!("../../../packaging/zincati/55-nodectl-fleetlock.toml"),
    );
    /// Typhoon's fleetlock addon (docs/addons/fleetlock.md).
    const TYPHOON: (&str, &str) = (
        "/etc/zincati/config.d/55-update-strategy.toml",
        "[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"http://10.3.0.15/\"\n",
    );

    fn judged(files: &[(&str, &str)]) -> ZincatiCheck {
        let frags: Vec<Fragment> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), Ok(t.to_string())))
            .collect();
        judge(&frags, LISTEN.parse().unwrap())
    }

    #[test]
    fn the_shipped_fragment_over_fcos_defaults_is_coordinated() {
        let c = judged(&[DIST[0], DIST[1], NODECTL]);
        assert_eq!(c.state, "coordinated", "{c:?}");
        assert_eq!(c.problem, None);
        assert_eq!(c.base_url.from.as_deref(), Some(NODECTL.0));
        // FCOS's defaults alone: immediate, Zincati's default file named
        let c = judged(DIST);
        assert_eq!(c.state, "uncoordinated");
        let p = c.problem.unwrap();
        assert!(
            p.contains(
                "strategy is immediate (from /usr/lib/zincati/config.d/30-updates-strategy.toml)"
            ),
            "{p}"
        );
    }

    /// Typhoon's fleetlock addon sorts after nodectl's fragment and wins: said, naming its file.
    #[test]
    fn typhoons_fleetlock_fragment_beside_nodectls_is_uncoordinated_and_named() {
        let c = judged(&[DIST[0], DIST[1], NODECTL, TYPHOON]);
        assert_eq!(c.state, "uncoordinated");
        assert_eq!(c.base_url.value, "http://10.3.0.15/");
        let p = c.problem.unwrap();
        assert!(
            p.contains("asks the FleetLock server at http://10.3.0.15/ (from /etc/zincati/config.d/55-update-strategy.toml), not nodectld's at http://127.0.0.1:9455/"),
            "{p}"
        );
    }

    #[test]
    fn base_urls_that_reach_nodectld_and_those_that_do_not() {
        let at = |url: &str| {
            let frag = format!("[updates]\nstrategy = \"fleet_lock\"\n[updates.fleet_lock]\nbase_url = \"{url}\"\n");
            judged(&[("/etc/zincati/config.d/60.toml", &frag)]).state
        };
        for ok in [
            "http://127.0.0.1:9455/",
            "http://127.0.0.1:9455",
            "http://localhost:9455/",
            "http://127.0.0.1:9455/fleetlock",
        ] {
            assert_eq!(at(ok), "coordinated", "{ok}");
        }
        for not in [
            "https://127.0.0.1:9455/",
            "http://127.0.0.1:9456/",
            "http://127.0.0.1/",
            "http://127.0.0.2:9455/",
            "http://[::1]:9455/",
            "http://127.0.0.1:9455/fleetlock/",
            "http://127.0.0.1:9455/?x=1",
            "not a url",
            "",
        ] {
            assert_eq!(at(not), "uncoordinated", "{not}");
        }
    }

    #[test]
    fn updates_off_is_no_problem_and_a_bad_fragment_is_unreadable() {
        let off = (
            "/etc/zincati/config.d/90-off.toml",
            "[updates]\nenabled = false\n",
        );
        let c = judged(&[DIST[0], DIST[1], off]);
        assert_eq!(
            (c.state.as_str(), c.problem.is_none()),
            ("updates-off", true)
        );
        let bad = ("/etc/zincati/config.d/60-bad.toml", "[updates\n");
        let c = judged(&[NODECTL, bad]);
        assert_eq!(c.state, "unreadable");
        assert!(c
            .problem
            .unwrap()
            .contains("/etc/zincati/config.d/60-bad.toml: not TOML"));
        let typed = (
            "/etc/zincati/config.d/60-bad.toml",
            "[updates]\nstrategy = 1\n",
        );
        let p = judged(&[NODECTL, typed]).problem.unwrap();
        assert!(
            p.contains("60-bad.toml: updates.strategy: a string expected"),
            "{p}"
        );
        let frags = vec![(
            PathBuf::from(NODECTL.0),
            Err("permission denied".to_string()),
        )];
        let c = judge(&frags, LISTEN.parse().unwrap());
        assert!(c
            .problem
            .unwrap()
            .contains("cannot read: permission denied"));
    }

    #[test]
    fn no_zincati_is_absent_and_no_problem() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        let c = check(&root, LISTEN.parse().unwrap());
        assert_eq!((c.state.as_str(), c.problem), ("absent", None));
        // the binary without fragments: Zincati's defaults (immediate)
        std::fs::create_dir_all(root.path("/usr/libexec")).unwrap();
        std::fs::write(root.path("/usr/libexec/zincati"), "").unwrap();
        assert_eq!(check(&root, LISTEN.parse().unwrap()).state, "uncoordinated");
    }

    /// The directories as Zincati scans them: a later directory's file replaces an earlier one
    /// of the same name, a /dev/null symlink drops it, a symlink to a file and dotfiles are
    /// skipped, and the merge is in file-name order across directories.
    #[test]
    fn fragments_are_found_as_liboverdrop_finds_them() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        for dir in CONFIG_DIRS {
            std::fs::create_dir_all(root.path(dir)).unwrap();
        }
        let put = |p: &str, t: &str| std::fs::write(root.path(p), t).unwrap();
        put(
            "/usr/lib/zincati/config.d/30-updates-strategy.toml",
            "[updates]\nstrategy = \"immediate\"\n",
        );
        put(
            "/usr/lib/zincati/config.d/55-update-strategy.toml",
            "[updates]\nstrategy = \"periodic\"\n",
        );
        put("/run/zincati/config.d/20-run.toml", "");
        put("/etc/zincati/config.d/55-nodectl-fleetlock.toml", NODECTL.1);
        put("/etc/zincati/config.d/55-update-strategy.toml", TYPHOON.1);
        put("/etc/zincati/config.d/.hidden.toml", "[updates\n");
        put("/etc/zincati/config.d/notes.txt", "[updates\n");
        put("/tmp-target.toml", "[updates\n");
        std::os::unix::fs::symlink(
            root.path("/tmp-target.toml"),
            root.path("/etc/zincati/config.d/70-link.toml"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "/dev/null",
            root.path("/run/zincati/config.d/30-updates-strategy.toml"),
        )
        .unwrap();
        let f = fragments(&root).unwrap();
        let names: Vec<String> = f.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/run/zincati/config.d/20-run.toml",
                "/etc/zincati/config.d/55-nodectl-fleetlock.toml",
                "/etc/zincati/config.d/55-update-strategy.toml",
            ]
        );
        assert_eq!(judge(&f, LISTEN.parse().unwrap()).state, "uncoordinated");
        // removed from /etc: /usr/lib's of the same name is read again; masked: gone
        std::fs::remove_file(root.path(TYPHOON.0)).unwrap();
        let c = judge(&fragments(&root).unwrap(), LISTEN.parse().unwrap());
        assert_eq!(c.strategy.value, "periodic", "{c:?}");
        std::os::unix::fs::symlink("/dev/null", root.path(TYPHOON.0)).unwrap();
        let c = judge(&fragments(&root).unwrap(), LISTEN.parse().unwrap());
        assert_eq!(c.state, "coordinated", "{c:?}");
    }

    #[test]
    fn zincati_ids_are_version_4_and_stable() {
        let a = zincati_id("0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(a.len(), 32);
        assert_eq!(&a[12..13], "4", "{a}");
        assert!(matches!(&a[16..17], "8" | "9" | "a" | "b"), "{a}");
        assert_eq!(a, zincati_id("0123456789abcdef0123456789abcdef\n").unwrap());
        assert_ne!(a, zincati_id("0123456789abcdef0123456789abcdee").unwrap());
        assert_eq!(zincati_id("short"), None);
        // 32 bytes, not 32 hex digits: refused, never a panic on a char boundary.
        assert_eq!(zincati_id("0123456789abcdef0123456789abcdé"), None);
        assert_eq!(zincati_id("0123456789abcdef0123456789abcdeg"), None);
    }
}
