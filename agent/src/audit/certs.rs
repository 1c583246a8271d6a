//! Certificates as the audit compares them: subject, issuer, public key, and whether one was
//! signed by another (its signature verifies with the other's key).

/// One certificate of a PEM file.
pub(super) struct Cert {
    pub(super) subject: String,
    pub(super) issuer: String,
    pub(super) spki: Vec<u8>,
    der: Vec<u8>,
}

impl Cert {
    /// This certificate's signature verifies with `ca`'s key (it validates against that CA).
    pub(super) fn signed_by(&self, ca: &Cert) -> bool {
        let (Ok((_, c)), Ok((_, k))) = (
            x509_parser::parse_x509_certificate(&self.der),
            x509_parser::parse_x509_certificate(&ca.der),
        ) else {
            return false;
        };
        c.verify_signature(Some(k.public_key())).is_ok()
    }
}

/// The certificates of a PEM file (none when it holds none).
pub(super) fn certs(pem: &[u8]) -> Vec<Cert> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .flatten()
        .filter(|p| p.label == "CERTIFICATE")
        .filter_map(|p| {
            let c = p.parse_x509().ok()?;
            Some(Cert {
                subject: c.subject().to_string(),
                issuer: c.issuer().to_string(),
                spki: c.public_key().raw.to_vec(),
                der: p.contents.clone(),
            })
        })
        .collect()
}
