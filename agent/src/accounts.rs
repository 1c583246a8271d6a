//! Users and groups by name, read from the root's files, never from the host running the tests:
//! `/etc/passwd`, then `/usr/lib/passwd` (Fedora CoreOS keeps system users there, nss-altfiles),
//! then `/usr/share/baselayout/passwd` (Flatcar's system users, nss `usrfiles`; `etcd` is 232
//! there), and the same for groups.

use crate::root::Root;

fn lookup(root: &Root, files: &[&str], name: &str) -> Option<u32> {
    files.iter().find_map(|f| {
        let text = crate::util::bounded::read_to_string(
            &root.path(f),
            crate::util::bounded::MAX_INPUT_BYTES,
        )
        .ok()?;
        text.lines().find_map(|l| {
            let mut parts = l.split(':');
            (parts.next()? == name).then_some(())?;
            parts.nth(1)?.parse().ok()
        })
    })
}

/// Where users are looked up, in order.
const PASSWD: [&str; 3] = [
    "/etc/passwd",
    "/usr/lib/passwd",
    "/usr/share/baselayout/passwd",
];
/// Where groups are looked up, in order.
const GROUP: [&str; 3] = [
    "/etc/group",
    "/usr/lib/group",
    "/usr/share/baselayout/group",
];

/// A user or group a bundle names that the node does not have.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AccountError {
    /// No such user.
    #[error(
        "user {0:?} not found in /etc/passwd, /usr/lib/passwd or /usr/share/baselayout/passwd"
    )]
    User(String),
    /// No such group.
    #[error("group {0:?} not found in /etc/group, /usr/lib/group or /usr/share/baselayout/group")]
    Group(String),
}

/// uid and gid (the group of the same name) of `name`. `root` is always 0:0; a number is taken
/// as uid and gid as is (the control plane's uid 65534 has a different name, or none, on each OS).
pub(crate) fn resolve(root: &Root, name: &str) -> Result<(u32, u32), AccountError> {
    if name == "root" {
        return Ok((0, 0));
    }
    if let Ok(n) = name.parse::<u32>() {
        return Ok((n, n));
    }
    let uid = lookup(root, &PASSWD, name).ok_or_else(|| AccountError::User(name.into()))?;
    let gid = lookup(root, &GROUP, name).ok_or_else(|| AccountError::Group(name.into()))?;
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_etc_then_usr_lib() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        std::fs::create_dir_all(root.path("/usr/lib")).unwrap();
        std::fs::create_dir_all(root.path("/etc")).unwrap();
        std::fs::write(root.path("/etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(
            root.path("/usr/lib/passwd"),
            "etcd:x:232:232::/var/lib/etcd:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(root.path("/usr/lib/group"), "etcd:x:232:\n").unwrap();
        assert_eq!(resolve(&root, "etcd"), Ok((232, 232)));
        assert_eq!(resolve(&root, "root"), Ok((0, 0)));
        let e = resolve(&root, "nobody2").unwrap_err().to_string();
        assert!(
            e.contains("nobody2") && e.contains("/usr/lib/passwd"),
            "{e}"
        );
    }

    #[test]
    fn flatcar_system_users_come_from_baselayout() {
        // flatcar/baselayout: baselayout/passwd `etcd:x:232:232::/dev/null:/sbin/nologin`,
        // baselayout/group `etcd:x:232:`, installed to /usr/share/baselayout (nss `usrfiles`).
        let d = tempfile::tempdir().unwrap();
        let root = Root::new(d.path());
        std::fs::create_dir_all(root.path("/usr/share/baselayout")).unwrap();
        std::fs::create_dir_all(root.path("/etc")).unwrap();
        std::fs::write(
            root.path("/etc/passwd"),
            "core:x:500:500::/home/core:/bin/bash\n",
        )
        .unwrap();
        std::fs::write(
            root.path("/usr/share/baselayout/passwd"),
            "etcd:x:232:232::/dev/null:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(root.path("/usr/share/baselayout/group"), "etcd:x:232:\n").unwrap();
        assert_eq!(resolve(&root, "etcd"), Ok((232, 232)));
    }
}
