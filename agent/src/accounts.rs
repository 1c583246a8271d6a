//! Users and groups by name, read from the root's files (`/etc/passwd`, then `/usr/lib/passwd`
//! as Fedora CoreOS keeps system users there through nss-altfiles), never from the host running
//! the tests.

use crate::root::Root;

fn lookup(root: &Root, files: &[&str], name: &str) -> Option<u32> {
    files.iter().find_map(|f| {
        let text = std::fs::read_to_string(root.path(f)).ok()?;
        text.lines().find_map(|l| {
            let mut parts = l.split(':');
            (parts.next()? == name).then_some(())?;
            parts.nth(1)?.parse().ok()
        })
    })
}

/// A user or group a bundle names that the node does not have.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AccountError {
    /// No such user.
    #[error("user {0:?} not found in /etc/passwd or /usr/lib/passwd")]
    User(String),
    /// No such group.
    #[error("group {0:?} not found in /etc/group or /usr/lib/group")]
    Group(String),
}

/// uid and gid (the group of the same name) of `name`. `root` is always 0:0.
pub(crate) fn resolve(root: &Root, name: &str) -> Result<(u32, u32), AccountError> {
    if name == "root" {
        return Ok((0, 0));
    }
    let uid = lookup(root, &["/etc/passwd", "/usr/lib/passwd"], name)
        .ok_or_else(|| AccountError::User(name.into()))?;
    let gid = lookup(root, &["/etc/group", "/usr/lib/group"], name)
        .ok_or_else(|| AccountError::Group(name.into()))?;
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
}
