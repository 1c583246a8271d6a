//! Reading input files with a size bound: a file larger than what it can sensibly hold (a
//! config fragment, a kubeconfig, os-release) is refused, not read whole into memory.

use std::io::Read as _;
use std::path::Path;

/// Config fragments, kubeconfigs and certificate files: a few KiB each in practice.
pub const MAX_INPUT_BYTES: u64 = 1 << 20;
/// os-release, hostname, machine-id: a few lines.
pub const MAX_SMALL_BYTES: u64 = 64 << 10;
/// Config fragments considered at most (`*.toml` across the three directories).
pub const MAX_FRAGMENTS: usize = 256;

/// The file's bytes, or an error (`InvalidData`) when it holds more than `max` bytes, or
/// (`InvalidInput`) when what is there is not a regular file: a FIFO someone left in a file's
/// place would block the read for good (it is opened non-blocking, then refused), a link to a
/// device such as `/dev/zero` would never end.
pub fn read(p: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or directory is there)",
        ));
    }
    read_from(f, max)
}

/// [`read`] from an open file (or any reader).
pub fn read_from(f: impl std::io::Read, max: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(out)
}

/// [`read`] as UTF-8 text (`InvalidData` otherwise).
pub fn read_to_string(p: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read(p, max)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_over_the_bound_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![b'a'; 11]).unwrap();
        assert_eq!(super::read(&p, 11).unwrap().len(), 11);
        let e = super::read(&p, 10).unwrap_err();
        assert_eq!(e.to_string(), "larger than 10 bytes");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(super::read_to_string(&p, 10)
            .unwrap_err()
            .to_string()
            .starts_with("not UTF-8 text"));
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_not_waited_on() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("ca.crt");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        // (no writer: a blocking open would wait here for good)
        let e = super::read(&fifo, 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let zero = d.path().join("key");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = super::read(&zero, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let e = super::read(d.path(), 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
}
