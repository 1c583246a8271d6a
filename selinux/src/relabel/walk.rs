//! The walk over directory descriptors that every relabel uses (see the module docs).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat, FileStat};

use super::{excluded, PathError, Report};

/// Entries grouped by their directory, which is held open: workers `fchdir` into it once and use
/// the one-component `names` (path lookup of a single component per call, as `chcon -R`'s fts
/// does). No path is resolved again after the listing, so a directory swapped for a symlink
/// meanwhile cannot lead a worker outside the tree.
#[derive(Debug)]
pub(super) struct Group {
    /// Where the directory was (reports only).
    pub(super) dir: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) names: Vec<CString>,
}

/// At most this many directories are held open by a walk: it hands its groups over in batches.
const BATCH_DIRS: usize = 256;

pub(super) fn cname(n: &std::ffi::OsStr) -> CString {
    CString::new(n.as_bytes()).expect("no NUL in file names")
}

/// `lstat` of `name` in the directory `dir`.
pub(super) fn stat_at(dir: RawFd, name: &CStr) -> io::Result<FileStat> {
    fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

pub(super) fn is_dir(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// A walk over directory descriptors: lists a tree on its filesystem, never following a symlink
/// (subdirectories are opened component by component with `O_NOFOLLOW` from the walk's root),
/// and hands the entries, grouped by directory, to `sink` in batches of [`BATCH_DIRS`].
pub(super) struct Walk<'a> {
    pub(super) exclude: &'a [PathBuf],
    report: Report,
    /// Every directory the walk opened.
    on_dir: &'a mut dyn FnMut(&Path),
    sink: &'a mut dyn FnMut(Vec<Group>, &mut Report),
    batch: Vec<Group>,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        exclude: &'a [PathBuf],
        on_dir: &'a mut dyn FnMut(&Path),
        sink: &'a mut dyn FnMut(Vec<Group>, &mut Report),
    ) -> Self {
        Walk {
            exclude,
            report: Report::default(),
            on_dir,
            sink,
            batch: Vec::new(),
        }
    }

    pub(super) fn err(&mut self, path: &Path, what: &str, e: io::Error) {
        self.report.errors.push(PathError {
            path: path.to_path_buf(),
            error: format!("{what}: {e}"),
        });
    }

    pub(super) fn push(&mut self, g: Group) {
        if g.names.is_empty() {
            return;
        }
        self.batch.push(g);
        if self.batch.len() >= BATCH_DIRS {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        if !batch.is_empty() {
            (self.sink)(batch, &mut self.report);
        }
    }

    /// The end: the last batch handed over, the walk's report.
    pub(super) fn finish(mut self) -> Report {
        self.flush();
        self.report
    }

    /// `top` (absolute) and everything below it; no component of `top` may be a symlink.
    pub(super) fn tree(&mut self, top: &Path) {
        let (Some(parent), Some(name)) = (top.parent(), top.file_name()) else {
            return;
        };
        match crate::beneath::open_dir_nofollow(parent) {
            Ok(fd) => self.entry(fd, parent, cname(name)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => self.err(top, "open (symlinks are not followed)", e),
        }
    }

    /// `name` in the open directory `parent` (at `parent_path`), and when it is a directory
    /// everything below it on its filesystem.
    pub(super) fn entry(&mut self, parent: OwnedFd, parent_path: &Path, name: CString) {
        let path = parent_path.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        if excluded(self.exclude, &path) {
            return;
        }
        let st = match stat_at(parent.as_raw_fd(), &name) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.err(&path, "stat", e),
        };
        let below = if is_dir(&st) {
            match crate::beneath::open_child_dir(parent.as_raw_fd(), &name) {
                Ok(fd) => Some(fd),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(e) => return self.err(&path, "open directory (symlinks are not followed)", e),
            }
        } else {
            None
        };
        self.push(Group {
            dir: parent_path.to_path_buf(),
            fd: parent,
            names: vec![name],
        });
        if let Some(fd) = below {
            self.below(&path, fd, st.st_dev);
        }
    }

    /// Everything below the open directory `base` (at `path`) on the filesystem `dev`.
    /// Directories still to list are kept as paths relative to `base` and opened from it
    /// component by component when their turn comes, so few descriptors are open at a time.
    fn below(&mut self, path: &Path, base: OwnedFd, dev: u64) {
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dpath = path.join(&rel);
            let fd = match crate::beneath::open_dir_beneath(base.as_raw_fd(), &rel) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    self.err(&dpath, "open directory (symlinks are not followed)", e);
                    continue;
                }
            };
            // The directory opened is the one listed, on this filesystem (a mount appearing
            // since is not entered).
            match fstat(fd.as_raw_fd()) {
                Ok(st) if st.st_dev == dev => {}
                Ok(_) => {
                    self.report.other_filesystems += 1;
                    continue;
                }
                Err(e) => {
                    self.err(&dpath, "stat", e.into());
                    continue;
                }
            }
            (self.on_dir)(&dpath);
            let names = self.list(&dpath, &fd, dev, &rel, &mut stack);
            self.push(Group {
                dir: dpath,
                fd,
                names,
            });
        }
    }

    /// The entries of the open directory `fd` to label; subdirectories on `dev` go on `stack`.
    fn list(
        &mut self,
        dpath: &Path,
        fd: &OwnedFd,
        dev: u64,
        rel: &Path,
        stack: &mut Vec<PathBuf>,
    ) -> Vec<CString> {
        let mut names = Vec::new();
        let dir = nix::unistd::dup(fd.as_raw_fd()).and_then(nix::dir::Dir::from_fd);
        let mut dir = match dir {
            Ok(d) => d,
            Err(e) => {
                self.err(dpath, "read directory", e.into());
                return names;
            }
        };
        for entry in dir.iter() {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    self.err(dpath, "read directory", e.into());
                    break;
                }
            };
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let os = std::ffi::OsStr::from_bytes(name.to_bytes());
            if !self.exclude.is_empty() && excluded(self.exclude, &dpath.join(os)) {
                continue;
            }
            let dir_entry = match entry.file_type() {
                Some(t) => t == nix::dir::Type::Directory,
                None => stat_at(fd.as_raw_fd(), name).is_ok_and(|st| is_dir(&st)),
            };
            if dir_entry {
                match stat_at(fd.as_raw_fd(), name) {
                    Ok(st) if st.st_dev != dev => {
                        self.report.other_filesystems += 1;
                        continue;
                    }
                    Ok(_) => stack.push(rel.join(os)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.err(&dpath.join(os), "stat", e);
                        continue;
                    }
                }
            }
            names.push(name.to_owned());
        }
        names
    }
}
