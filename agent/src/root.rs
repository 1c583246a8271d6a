//! The configurable root every path goes through: `/` on a node, a scratch directory in tests.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Root {
    pub fn new(p: impl Into<PathBuf>) -> Self {
        Root(p.into())
    }

    pub fn host() -> Self {
        Root(PathBuf::from("/"))
    }

    pub fn is_host(&self) -> bool {
        self.0 == Path::new("/")
    }

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
}
