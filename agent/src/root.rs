//! The configurable root every path goes through: `/` on a node, a scratch directory in tests.

use std::path::{Path, PathBuf};

/// The directory that stands for `/`; every node path is resolved under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Root {
    /// A root at `p`.
    pub fn new(p: impl Into<PathBuf>) -> Self {
        Root(p.into())
    }

    /// The node's own `/`.
    pub fn host() -> Self {
        Root(PathBuf::from("/"))
    }

    /// True when the root is `/`, i.e. nodectl works on the real node.
    pub fn is_host(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// The root directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// Where the node path `p` (absolute, as on the node) lives under this root.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let p = p.as_ref();
        let rel = p.strip_prefix("/").unwrap_or(p);
        self.0.join(rel)
    }
}

impl Root {
    /// Reads a file, following symlinks as the node would: an absolute target is a node path
    /// (under this root), a relative one is relative to the link's directory.
    pub fn read(&self, node_path: impl AsRef<Path>) -> std::io::Result<Vec<u8>> {
        let mut p = node_path.as_ref().to_path_buf();
        for _ in 0..8 {
            match std::fs::read_link(self.path(&p)) {
                Ok(t) if t.is_absolute() => p = t,
                Ok(t) => p = p.parent().unwrap_or(Path::new("/")).join(t),
                Err(_) => {
                    return crate::util::bounded::read(
                        &self.path(&p),
                        crate::util::bounded::MAX_INPUT_BYTES,
                    )
                }
            }
        }
        Err(std::io::Error::other(format!(
            "{}: too many levels of symbolic links",
            node_path.as_ref().display()
        )))
    }
}

/// A scratch root holding one file (tests).
#[cfg(test)]
pub(crate) fn scratch_with(node_path: &str, text: &str) -> (tempfile::TempDir, Root) {
    let d = tempfile::tempdir().unwrap();
    let r = Root::new(d.path());
    std::fs::create_dir_all(r.path(node_path).parent().unwrap()).unwrap();
    std::fs::write(r.path(node_path), text).unwrap();
    (d, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_node_paths_under_root() {
        assert_eq!(
            Root::host().path("/etc/kubernetes"),
            PathBuf::from("/etc/kubernetes")
        );
        assert_eq!(
            Root::new("/tmp/x").path("/etc/kubernetes"),
            PathBuf::from("/tmp/x/etc/kubernetes")
        );
        assert!(Root::host().is_host() && !Root::new("/tmp/x").is_host());
    }

    #[test]
    fn reads_follow_links_as_the_node_would() {
        let (_d, r) = scratch_with("/var/lib/kubelet/pki/kubelet-client-1.pem", "cert");
        // Absolute target: a node path, resolved under the root (not on the host).
        std::os::unix::fs::symlink(
            "/var/lib/kubelet/pki/kubelet-client-1.pem",
            r.path("/var/lib/kubelet/pki/current.pem"),
        )
        .unwrap();
        assert_eq!(r.read("/var/lib/kubelet/pki/current.pem").unwrap(), b"cert");
        // Relative target: next to the link.
        std::os::unix::fs::symlink("current.pem", r.path("/var/lib/kubelet/pki/rel.pem")).unwrap();
        assert_eq!(r.read("/var/lib/kubelet/pki/rel.pem").unwrap(), b"cert");
        // A loop is an error, not a hang.
        std::os::unix::fs::symlink("/loop", r.path("/loop")).unwrap();
        assert!(r.read("/loop").is_err());
    }
}
