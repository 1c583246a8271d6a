//! Files the kernel said are complete: closed after writing (`IN_CLOSE_WRITE`) or renamed in
//! (`IN_MOVED_TO`), with their modification time then. A bundle that is settled and unchanged
//! since is read at once; others wait until they are a second old (the fallback).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// At most this many files are remembered (the oldest go first).
const MAX: usize = 1024;

/// The settled files (real paths) and their modification time when the kernel told.
#[derive(Debug, Default)]
pub struct Settled(Mutex<HashMap<PathBuf, (SystemTime, u64)>>);

impl Settled {
    /// Records that `real` was closed after writing or renamed in, as it is now.
    pub fn mark(&self, real: &Path) {
        let Ok(m) = std::fs::symlink_metadata(real) else {
            return;
        };
        let Ok(mtime) = m.modified() else { return };
        let mut map = self.0.lock().expect("settled");
        if map.len() >= MAX {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(p, _)| p.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(real.to_path_buf(), (mtime, m.len()));
    }

    /// True when `real` was marked and has not been modified since.
    pub fn is_settled(&self, real: &Path) -> bool {
        let Ok(m) = std::fs::symlink_metadata(real) else {
            return false;
        };
        let now = (m.modified().ok(), m.len());
        self.0
            .lock()
            .expect("settled")
            .get(real)
            .is_some_and(|(t, len)| now == (Some(*t), *len))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_is_settled_until_written_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("assets");
        let s = super::Settled::default();
        assert!(!s.is_settled(&p));
        std::fs::write(&p, "one").unwrap();
        assert!(!s.is_settled(&p));
        s.mark(&p);
        assert!(s.is_settled(&p));
        std::fs::write(&p, "one and more").unwrap();
        assert!(!s.is_settled(&p), "written again after the event");
    }
}
