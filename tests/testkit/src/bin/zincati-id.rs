//! `zincati-id [MACHINE_ID_FILE]`: the FleetLock client id Zincati sends, computed as Zincati does
//! (its `identity::compute_node_uuid`: systemd's `sd_id128_get_machine_app_specific` for
//! Zincati's app id): HMAC-SHA256 keyed with the machine id's 16 bytes over the app id's 16
//! bytes, the first 16 bytes made a version-4 UUID, printed as 32 hex digits. A test oracle for
//! the nspawn tier (nodectld no longer shows the id to local users), written apart from
//! nodectld's own.

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() == 32, "not 32 hex digits: {s:?}");
    (0..16)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/etc/machine-id".into());
    let machine = std::fs::read_to_string(&path).expect("reading the machine id");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &unhex(machine.trim()));
    // Zincati's application id (zincati src/identity/mod.rs).
    let tag = ring::hmac::sign(&key, &unhex("de35106b6ec24688b63afddaa156679b"));
    let mut id = tag.as_ref()[..16].to_vec();
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    println!(
        "{}",
        id.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
