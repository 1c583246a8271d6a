//! Kubelet TLS bootstrap, as kubelet does it (`pkg/kubelet/certificate/bootstrap`): with the
//! bootstrap kubeconfig's token, request a node client certificate and wait for it by watch; then
//! write the node's credentials and the kubeconfig kubelet uses. Rotation is the same request
//! made with the node's own certificate and a fresh key. The server is always verified against
//! the cluster CA of the kubeconfig used; there is no insecure mode.
//!
//! The `kubelet-credentials` step (`crate::steps`, `kubelet-credentials`) runs this in the background.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use crate::credentials::{self, Validity};
use crate::csr;
use crate::fsio::{FileSpec, Writer};

/// Why a bootstrap or rotation did not produce credentials.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The kubeconfig used to connect is missing or unusable.
    #[error("{0}")]
    Config(String),
    /// The request got a Denied condition; the next attempt uses a new key.
    #[error("certificate request {name} was denied: {message}")]
    Denied {
        /// The request's name.
        name: String,
        /// The condition's message (or reason).
        message: String,
    },
    /// The request got a Failed condition or was deleted; the next attempt uses a new key.
    #[error("certificate request {name} failed: {message}")]
    Failed {
        /// The request's name.
        name: String,
        /// The condition's message (or reason), or that the request was deleted.
        message: String,
    },
    /// 409: a request with our name exists but has another signer or key.
    #[error("certificate request {name} exists but is not ours ({why}); delete it or wait for it to expire")]
    Incompatible {
        /// The request's name.
        name: String,
        /// What differs, e.g. "another key".
        why: String,
    },
    /// Any other error from the API server or the connection to it.
    #[error("the API server at {server}: {message}")]
    Api {
        /// The server's URL, from the kubeconfig.
        server: String,
        /// The error.
        message: String,
    },
    /// 401: the server does not accept these credentials (expired, revoked, unknown token).
    #[error("the API server at {server} refused the {via} (401 Unauthorized)")]
    Unauthorized {
        /// The server's URL, from the kubeconfig.
        server: String,
        /// The credentials it refused.
        via: Via,
    },
    /// The request was not approved and issued before the wait ran out.
    #[error("certificate request {name} not approved and issued within {secs}s")]
    Timeout {
        /// The request's name.
        name: String,
        /// How long nodectl waited, in seconds.
        secs: u64,
    },
    /// Something on the node failed: the key, the request, reading the issued certificate, or
    /// writing the credentials or kubeconfig.
    #[error("{0}")]
    Local(String),
}

/// What a bootstrap produced.
#[derive(Debug)]
pub struct Issued {
    /// The name of the certificate request.
    pub request: String,
    /// When the issued certificate is valid.
    pub validity: Validity,
    /// `kubelet-client-current.pem` (node path).
    pub credentials: PathBuf,
}

/// Which credentials make the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The bootstrap kubeconfig's token (a node without a valid certificate of its own).
    BootstrapToken,
    /// The node's current certificate, from the node kubeconfig (rotation).
    NodeCertificate,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Via::BootstrapToken => "bootstrap token",
            Via::NodeCertificate => "node's client certificate",
        })
    }
}

/// One bootstrap or rotation: which credentials ask, for which node, and where the results go.
pub struct Bootstrap<'a> {
    /// Writes the key, the credentials and the node kubeconfig.
    pub writer: &'a Writer<'a>,
    /// Which credentials make the request.
    pub via: Via,
    /// The node name; the certificate is for `system:node:<name>`.
    pub node_name: &'a str,
    /// Node paths.
    pub bootstrap_kubeconfig: &'a Path,
    /// The node kubeconfig: the client for rotation, and written with the new credentials.
    pub kubeconfig: &'a Path,
    /// How long to wait for approval and issuance (kubelet: an hour).
    pub wait: Duration,
    /// Called with the request's name once it is created (or found), before the wait.
    pub on_request: Option<&'a (dyn Fn(&str) + Send + Sync)>,
    /// Called once the certificate is issued, before it is stored.
    pub on_issued: Option<&'a (dyn Fn() + Send + Sync)>,
}

/// An error with its causes (`a: b: c`, a cause that repeats its parent left out): kube's
/// errors keep the reason in their sources ("client error (Connect)" is all the top says of a
/// server certificate from an unknown CA). Causes are transport and TLS errors: no credential
/// content.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let m = c.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cause = c.source();
    }
    out
}

fn api_err(server: &str, via: Via) -> impl Fn(kube::Error) -> BootstrapError + '_ {
    move |e| match e {
        kube::Error::Api(s) if s.code == 401 => BootstrapError::Unauthorized {
            server: server.to_string(),
            via,
        },
        e => BootstrapError::Api {
            server: server.to_string(),
            message: error_chain(&e),
        },
    }
}

impl Bootstrap<'_> {
    /// A client from the bootstrap kubeconfig or the node kubeconfig (its cluster CA is the
    /// only trust root).
    async fn client(&self) -> Result<(kube::Client, String, Vec<u8>), BootstrapError> {
        let root = self.writer.root();
        let c = match self.via {
            Via::BootstrapToken => {
                let path = self.bootstrap_kubeconfig;
                match crate::kubeconfig::load_bootstrap(root, path, self.kubeconfig) {
                    Ok(loaded) => crate::kubeconfig::connect_loaded(root, path, loaded, true).await,
                    Err(e) => Err(e),
                }
            }
            Via::NodeCertificate => crate::kubeconfig::connect(root, self.kubeconfig, true).await,
        }
        .map_err(|e| BootstrapError::Config(e.to_string()))?;
        Ok((c.client, c.server, c.ca))
    }

    /// Runs the bootstrap: key (kept while pending), request (reused after a crash), watch,
    /// credentials, node kubeconfig.
    pub async fn run(&self) -> Result<Issued, BootstrapError> {
        let (client, server, ca) = self.client().await?;
        let api: Api<CertificateSigningRequest> = Api::all(client);
        let local = |e: anyhow::Error| BootstrapError::Local(format!("{e:#}"));
        let (key, _) = credentials::pending_key(self.writer).map_err(local)?;
        let name = csr::request_name(&key, self.node_name);
        let request = csr::request_pem(&key, self.node_name)
            .map_err(|e| BootstrapError::Local(e.to_string()))?;
        let mut object = CertificateSigningRequest::default();
        object.metadata.name = Some(name.clone());
        object.spec = CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request.into_bytes()),
            signer_name: csr::SIGNER.into(),
            usages: Some(csr::USAGES.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => tracing::info!(request = %name, "certificate request created"),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Ours from before a restart (same key, so same name)? Then wait for it.
                let existing = api.get(&name).await.map_err(api_err(&server, self.via))?;
                ensure_ours(&existing, &key, &name)?;
                tracing::info!(request = %name, "reusing the certificate request made before a restart");
            }
            Err(e) => return Err(api_err(&server, self.via)(e)),
        }
        crate::util::crash_point!("csr::created");
        if let Some(f) = self.on_request {
            f(&name);
        }
        let chain = match self.wait_for(&api, &name, &server).await {
            Ok(c) => c,
            Err(e @ (BootstrapError::Denied { .. } | BootstrapError::Failed { .. })) => {
                // That key's request is settled: a retry needs a new key (and so a new name).
                self.writer
                    .remove(&Path::new(credentials::CERT_DIR).join(credentials::PENDING_KEY))
                    .map_err(|e| BootstrapError::Local(e.to_string()))?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let validity = credentials::validity(&chain).map_err(local)?;
        if let Some(f) = self.on_issued {
            f();
        }
        let current =
            credentials::store(self.writer, &chain, &key.serialize_pem(), SystemTime::now())
                .map_err(local)?;
        let kubeconfig = csr::node_kubeconfig(&server, &ca, &current.display().to_string());
        self.writer
            .write(&credentials::private(
                self.writer,
                FileSpec::new(self.kubeconfig, kubeconfig, 0o600),
            ))
            .map_err(|e| BootstrapError::Local(e.to_string()))?;
        Ok(Issued {
            request: name,
            validity,
            credentials: current,
        })
    }

    /// Watches the request by name until it is issued, denied or failed. A watch is started
    /// again when it ends, as client-go's reflector does (tools/cache/reflector.go
    /// `ListAndWatch`, with its backoff manager between watches): at once after a watch that
    /// ran its course, after a pause of 1 s doubling to 30 s after one that broke (a connection
    /// cut mid-event, which kube's client reports as a plain end, or an error) or ended early
    /// without an event; a `410 Gone` error event (the server's window no longer holds the
    /// version watched from) is watched again from the current state, at once the first time.
    /// After [`MAX_WATCH_BREAKS`] breaks in a row the request gives up, its own backoff takes
    /// over, and the next attempt finds the same request by name.
    async fn wait_for(
        &self,
        api: &Api<CertificateSigningRequest>,
        name: &str,
        server: &str,
    ) -> Result<Vec<u8>, BootstrapError> {
        let deadline = Instant::now() + self.wait;
        let fields = format!("metadata.name={name}");
        let timeout = || BootstrapError::Timeout {
            name: name.into(),
            secs: self.wait.as_secs(),
        };
        let mut breaks = 0u32;
        let mut pause = Duration::ZERO;
        loop {
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timeout());
            }
            let wp = WatchParams::default()
                .fields(&fields)
                .timeout(left.as_secs().clamp(1, 290) as u32);
            // "0": the current state first (it may be issued already), then changes.
            let started = Instant::now();
            let stream = api
                .watch(&wp, "0")
                .await
                .map_err(api_err(server, self.via))?;
            let mut stream = stream.boxed();
            let mut events = 0;
            let mut expired = false;
            let broke = loop {
                let next = tokio::time::timeout(left, stream.try_next())
                    .await
                    .map_err(|_| timeout())?;
                match next {
                    Ok(Some(ev)) => match watched(ev, name, server)? {
                        Watched::Issued(cert) => return Ok(cert),
                        Watched::Pending => {
                            events += 1;
                            breaks = 0;
                        }
                        Watched::Expired => {
                            expired = true;
                            tracing::info!(request = %name, "the watch expired (410 Gone); watching again from the current state");
                            break true;
                        }
                    },
                    Ok(None) if events > 0 || started.elapsed() >= EARLY_END => break false,
                    Ok(None) => {
                        tracing::info!(request = %name, "the watch ended early without an event; watching again");
                        break true;
                    }
                    Err(e) => {
                        if breaks + 1 > MAX_WATCH_BREAKS {
                            return Err(api_err(server, self.via)(e));
                        }
                        tracing::info!(request = %name, "the watch broke ({}); watching again", error_chain(&e));
                        break true;
                    }
                }
            };
            if broke {
                breaks += 1;
                if breaks > MAX_WATCH_BREAKS {
                    return Err(BootstrapError::Api {
                        server: server.into(),
                        message: format!("the watch of {name} broke {breaks} times in a row"),
                    });
                }
            }
            // A first 410 in a row is the server's window moving on: watch again at once.
            pause = if expired && breaks == 1 {
                Duration::ZERO
            } else {
                watch_pause(breaks)
            };
        }
    }
}

/// The pause before the next watch after `breaks` breaks in a row: none after a watch that ran
/// its course, then 1 s doubling to 30 s (shorter under NODECTL_TEST_TIMERS in a test build).
fn watch_pause(breaks: u32) -> Duration {
    match breaks {
        0 => Duration::ZERO,
        n => crate::util::timers::scaled(
            Duration::from_secs(1 << (n - 1).min(5)).min(WATCH_PAUSE_CAP),
        ),
    }
}

/// A watch that ends sooner than this without an event counts as a break.
const EARLY_END: Duration = Duration::from_secs(10);

/// Watch breaks in a row before the request gives up (and backs off); the pause before watching
/// again doubles from 1 s to this.
const MAX_WATCH_BREAKS: u32 = 5;
const WATCH_PAUSE_CAP: Duration = Duration::from_secs(30);

/// What one watch event says about the request.
enum Watched {
    Issued(Vec<u8>),
    /// Not yet issued (or a bookmark).
    Pending,
    /// A `410 Gone` error event: watch again from the current state.
    Expired,
}

fn watched(
    ev: WatchEvent<CertificateSigningRequest>,
    name: &str,
    server: &str,
) -> Result<Watched, BootstrapError> {
    let csr = match ev {
        WatchEvent::Added(c) | WatchEvent::Modified(c) => c,
        WatchEvent::Deleted(_) => {
            return Err(BootstrapError::Failed {
                name: name.into(),
                message: "the request was deleted".into(),
            })
        }
        WatchEvent::Bookmark(_) => return Ok(Watched::Pending),
        // apiserver/pkg/storage/cacher (`NewTooOldResourceVersionError`): 410, reason Expired.
        WatchEvent::Error(e) if e.code == 410 => return Ok(Watched::Expired),
        WatchEvent::Error(e) => {
            return Err(BootstrapError::Api {
                server: server.into(),
                message: e.message,
            })
        }
    };
    let status = csr.status.unwrap_or_default();
    for c in status.conditions.unwrap_or_default() {
        let message = c.message.unwrap_or_else(|| c.reason.unwrap_or_default());
        match c.type_.as_str() {
            "Denied" => {
                return Err(BootstrapError::Denied {
                    name: name.into(),
                    message,
                })
            }
            "Failed" => {
                return Err(BootstrapError::Failed {
                    name: name.into(),
                    message,
                })
            }
            _ => {}
        }
    }
    Ok(match status.certificate {
        Some(cert) if !cert.0.is_empty() => Watched::Issued(cert.0),
        _ => Watched::Pending,
    })
}

/// A request found under our name must carry our public key and signer (upstream's
/// `ensureCompatible`).
fn ensure_ours(
    existing: &CertificateSigningRequest,
    key: &rcgen::KeyPair,
    name: &str,
) -> Result<(), BootstrapError> {
    use rcgen::PublicKeyData;
    let bad = |why: &str| BootstrapError::Incompatible {
        name: name.into(),
        why: why.into(),
    };
    if existing.spec.signer_name != csr::SIGNER {
        return Err(bad("another signer"));
    }
    let pem =
        std::str::from_utf8(&existing.spec.request.0).map_err(|_| bad("its request is not PEM"))?;
    let params = rcgen::CertificateSigningRequestParams::from_pem(pem)
        .map_err(|_| bad("its request does not parse"))?;
    if params.public_key.der_bytes() != key.der_bytes() {
        return Err(bad("another key"));
    }
    Ok(())
}
