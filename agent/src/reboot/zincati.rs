//! Zincati's FleetLock client id, as Zincati computes it from the machine id.

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
