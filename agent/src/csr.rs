//! The kubelet client certificate request, as kubelet's TLS bootstrap makes it
//! (`pkg/kubelet/certificate/bootstrap`, client-go `util/certificate/csr`):
//!
//! - an ECDSA P-256 key (kept, mode 0600, while its request is pending, so a restart reuses it);
//! - a CSR with subject `CN=system:node:<node>, O=system:nodes` and no SANs (the approver refuses
//!   any);
//! - a certificates.k8s.io/v1 request for signer `kubernetes.io/kube-apiserver-client-kubelet`
//!   with usages digital signature, key encipherment, client auth;
//! - named from its content (`digested_name`), so a retry after a crash finds its own request.
//!
//! And what comes after approval: the node's credentials (certificate chain and key in one PEM
//! file, as kubelet's certificate store keeps them) and the kubeconfig kubelet then uses.

use base64::Engine as _;
use rcgen::{CertificateParams, DnType, KeyPair, PublicKeyData, PKCS_ECDSA_P256_SHA256};

/// The signer of kubelet client certificates, named in every request.
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The key usages every request asks for (those of a kubelet client certificate).
pub const USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
pub(crate) const ORGANIZATION: &str = "system:nodes";

/// Why a key or certificate request could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// rcgen failed to generate or read the key, or to build or encode the request.
    #[error("{what}: {source}")]
    Rcgen {
        /// What nodectl was doing, e.g. "reading the private key".
        what: &'static str,
        /// rcgen's error.
        source: rcgen::Error,
    },
}

fn rc(what: &'static str) -> impl FnOnce(rcgen::Error) -> CsrError {
    move |source| CsrError::Rcgen { what, source }
}

/// `system:node:<name>`: the user a node's certificate authenticates as.
pub(crate) fn common_name(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// A fresh ECDSA P-256 key (what kubelet generates for bootstrap and for every rotation).
pub fn generate_key() -> Result<KeyPair, CsrError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rc("generating an ECDSA P-256 key"))
}

pub(crate) fn load_key(pem: &str) -> Result<KeyPair, CsrError> {
    KeyPair::from_pem(pem).map_err(rc("reading the private key"))
}

/// The PEM CSR for `node_name`, signed with `key`.
pub fn request_pem(key: &KeyPair, node_name: &str) -> Result<String, CsrError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, ORGANIZATION);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name(node_name));
    // No SANs, no extensions: kube-controller-manager's approver refuses DNS/IP/email/URI SANs.
    params.subject_alt_names.clear();
    params
        .serialize_request(key)
        .map_err(rc("building the certificate request"))?
        .pem()
        .map_err(rc("encoding the certificate request"))
}

/// The request's name, as upstream's `digestedName`: SHA-512/256 over base64url(x) + "|" for x in
/// [the public key's PKIX DER, CN, each O, each usage]; `node-csr-` + base64url(hash). The same
/// key, subject and usages always give the same name.
pub(crate) fn digested_name(
    public_key_spki_der: &[u8],
    cn: &str,
    orgs: &[&str],
    usages: &[&str],
) -> String {
    let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |data: &[u8]| {
        ctx.update(enc.encode(data).as_bytes());
        ctx.update(b"|");
    };
    write(public_key_spki_der);
    write(cn.as_bytes());
    for o in orgs {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", enc.encode(ctx.finish().as_ref()))
}

/// The name of the request kubelet would make for `key` and `node_name`.
pub fn request_name(key: &KeyPair, node_name: &str) -> String {
    digested_name(
        &key.subject_public_key_info(),
        &common_name(node_name),
        &[ORGANIZATION],
        &USAGES,
    )
}

/// The node kubeconfig kubelet uses once it has its certificate (as upstream's
/// `writeKubeconfigFromBootstrapping`): the bootstrap kubeconfig's server and CA, and the client
/// certificate and key from one PEM file.
pub fn node_kubeconfig(server: &str, ca_pem: &[u8], credentials_pem_path: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "# Managed by nodectl: the node's own credentials (written after TLS bootstrap).
apiVersion: v1
kind: Config
clusters:
- name: default-cluster
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: default-auth
  user:
    client-certificate: {credentials_pem_path}
    client-key: {credentials_pem_path}
contexts:
- name: default-context
  context:
    cluster: default-cluster
    user: default-auth
    namespace: default
current-context: default-context
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_has_kubelets_subject_no_sans_and_our_key() {
        let key = generate_key().unwrap();
        let pem = request_pem(&key, "worker-1").unwrap();
        // Parse it back as the API double and kube-controller-manager would (signature verified).
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let dn: Vec<(String, String)> = parsed
            .params
            .distinguished_name
            .iter()
            .map(|(t, v)| (format!("{t:?}"), format!("{v:?}")))
            .collect();
        assert!(
            dn.iter()
                .any(|(t, v)| t == "CommonName" && v.contains("system:node:worker-1")),
            "{dn:?}"
        );
        assert!(
            dn.iter()
                .any(|(t, v)| t == "OrganizationName" && v.contains("system:nodes")),
            "{dn:?}"
        );
        assert_eq!(dn.len(), 2, "{dn:?}");
        assert!(parsed.params.subject_alt_names.is_empty());
        assert_eq!(parsed.public_key.der_bytes(), key.public_key_raw());
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
    }

    #[test]
    fn the_name_is_deterministic_and_covers_key_subject_and_usages() {
        let key = generate_key().unwrap();
        let name = request_name(&key, "worker-1");
        assert_eq!(name, request_name(&key, "worker-1"), "same key, same name");
        // A reloaded key (as after a crash) gives the same name.
        let reloaded = load_key(&key.serialize_pem()).unwrap();
        assert_eq!(name, request_name(&reloaded, "worker-1"));
        assert!(name.starts_with("node-csr-"));
        assert_eq!(
            name.len(),
            "node-csr-".len() + 43,
            "base64url of 32 bytes, unpadded"
        );
        assert_ne!(
            name,
            request_name(&generate_key().unwrap(), "worker-1"),
            "another key"
        );
        assert_ne!(name, request_name(&key, "worker-2"), "another node");
        let spki = key.subject_public_key_info();
        let cn = common_name("worker-1");
        assert_ne!(
            digested_name(&spki, &cn, &[ORGANIZATION], &USAGES),
            digested_name(
                &spki,
                &cn,
                &[ORGANIZATION],
                &["digital signature", "client auth"]
            ),
            "usages are part of the name"
        );
        // The delimiter keeps "CN=foo, O=bar" and "CN=foob, O=ar" apart.
        assert_ne!(
            digested_name(&spki, "foo", &["bar"], &[]),
            digested_name(&spki, "foob", &["ar"], &[])
        );
    }

    #[test]
    fn the_key_is_p256_and_kept_as_pkcs8_pem() {
        let key = generate_key().unwrap();
        assert!(key.is_compatible(&PKCS_ECDSA_P256_SHA256));
        assert!(key
            .serialize_pem()
            .starts_with("-----BEGIN PRIVATE KEY-----"));
    }

    #[test]
    fn node_kubeconfig_points_at_the_credentials_and_verifies_the_ca() {
        let ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let text = node_kubeconfig(
            "https://controller.example.com:6443",
            ca,
            "/var/lib/kubelet/pki/kubelet-client-current.pem",
        );
        let kc =
            crate::kubeconfig::parse(&text, std::path::Path::new("/var/lib/kubelet/kubeconfig"))
                .unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("default-context"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate.as_deref(),
            Some("/var/lib/kubelet/pki/kubelet-client-current.pem")
        );
        assert_eq!(
            user.client_key.as_deref(),
            user.client_certificate.as_deref()
        );
        let cluster = crate::kubeconfig::cluster(&kc, std::path::Path::new("k")).unwrap();
        let data = cluster
            .cluster
            .as_ref()
            .unwrap()
            .certificate_authority_data
            .as_deref()
            .unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap(),
            ca
        );
        assert!(!text.contains("insecure"), "the CA is always verified");
    }
}
