//! Relabeling a tree: read every label, write only those that differ.
//!
//! Unlike `chcon -R`, which sets every entry, this reads first, so a tree that is already right
//! costs one `lgetxattr` per entry. It never follows symlinks (a link gets its own label), never
//! crosses into another filesystem (pod volumes mounted under /var/lib/kubelet stay untouched), and
//! reports unreadable entries per path instead of stopping. The label work is split across the
//! machine's cores.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Context, Labeler};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Socket,
    Other,
}

/// One path that could not be read or labeled, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathError {
    pub path: PathBuf,
    pub error: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub examined: u64,
    /// Labels written (or, in a dry run, that would be).
    pub changed: u64,
    /// Directories not entered because they are another filesystem.
    pub other_filesystems: u64,
    pub errors: Vec<PathError>,
}

impl Report {
    fn merge(&mut self, o: Report) {
        self.examined += o.examined;
        self.changed += o.changed;
        self.other_filesystems += o.other_filesystems;
        self.errors.extend(o.errors);
    }
}

/// Walks `top` and lists its entries (top included), staying on its filesystem.
fn walk(top: &Path, out: &mut Vec<(PathBuf, Kind)>, report: &mut Report) {
    let meta = match fs::symlink_metadata(top) {
        Ok(m) => m,
        Err(e) => {
            report.errors.push(PathError {
                path: top.to_path_buf(),
                error: format!("stat: {e}"),
            });
            return;
        }
    };
    if !meta.is_dir() {
        out.push((top.to_path_buf(), kind_of(&meta.file_type())));
        return;
    }
    let dev = meta.dev();
    let mut stack = vec![top.to_path_buf()];
    out.push((top.to_path_buf(), Kind::Dir));
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                report.errors.push(PathError {
                    path: dir,
                    error: format!("read directory: {e}"),
                });
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    report.errors.push(PathError {
                        path: dir.clone(),
                        error: format!("read directory: {e}"),
                    });
                    continue;
                }
            };
            let path = entry.path();
            let ft = match entry.file_type() {
                Ok(t) => t,
                Err(e) => {
                    report.errors.push(PathError {
                        path,
                        error: format!("file type: {e}"),
                    });
                    continue;
                }
            };
            if ft.is_dir() {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.dev() != dev => {
                        report.other_filesystems += 1;
                        continue;
                    }
                    Ok(_) => stack.push(path.clone()),
                    Err(e) => {
                        report.errors.push(PathError {
                            path,
                            error: format!("stat: {e}"),
                        });
                        continue;
                    }
                }
            }
            out.push((path, kind_of(&ft)));
        }
    }
}

fn kind_of(ft: &fs::FileType) -> Kind {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_socket() {
        Kind::Socket
    } else {
        Kind::Other
    }
}

/// Relabels everything under `top` to what `want` says (`None`: leave that entry alone).
/// `dry_run` counts what would change without writing.
pub fn relabel_tree<F>(labeler: &Labeler, top: &Path, want: F, dry_run: bool) -> Report
where
    F: Fn(&Path, Kind) -> Option<Context> + Sync,
{
    let mut report = Report::default();
    let mut entries = Vec::new();
    walk(top, &mut entries, &mut report);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let chunk = entries.len().div_ceil(threads).max(256);
    let parts: Vec<Report> = std::thread::scope(|s| {
        let handles: Vec<_> = entries
            .chunks(chunk)
            .map(|part| {
                let want = &want;
                s.spawn(move || {
                    let mut r = Report::default();
                    for (path, kind) in part {
                        r.examined += 1;
                        let Some(target) = want(path, *kind) else {
                            continue;
                        };
                        match labeler.get(path) {
                            Ok(Some(have)) if have == target => {}
                            Ok(_) => {
                                r.changed += 1;
                                if !dry_run {
                                    if let Err(e) = labeler.set_on_path(path, &target) {
                                        r.changed -= 1;
                                        r.errors.push(PathError {
                                            path: path.clone(),
                                            error: e.to_string(),
                                        });
                                    }
                                }
                            }
                            Err(e) => r.errors.push(PathError {
                                path: path.clone(),
                                error: e.to_string(),
                            }),
                        }
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("relabel worker"))
            .collect()
    });
    for p in parts {
        report.merge(p);
    }
    report
}
