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

/// The file's bytes, or an error (`InvalidData`) when it holds more than `max` bytes.
pub fn read(p: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_from(std::fs::File::open(p)?, max)
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
}
