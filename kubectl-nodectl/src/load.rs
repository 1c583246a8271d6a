//! The operator's kubeconfig and the client made of it, as kubectl makes them, and paged lists.
//!
//! kubeconfig loading follows client-go's `tools/clientcmd/loader.go`
//! (`ClientConfigLoadingRules.Load`): `--kubeconfig` alone when given (a missing file is an
//! error); else every path in `KUBECONFIG` (empty entries and duplicates dropped, missing files
//! skipped, an error when all are missing), merged with kube's `Kubeconfig::merge` (the first
//! file to set a value or a named entry wins); else `~/.kube/config`. The context: `--context`,
//! else the merged `current-context`. Exec credential plugins and the rest of what a kubeconfig
//! may say are kube's (the same as kubectl's).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The User-Agent of every request the plugin makes (audit logs, API Priority and Fairness).
pub const USER_AGENT: &str = concat!("kubectl-nodectl/", env!("CARGO_PKG_VERSION"));

/// A kubeconfig file larger than this is refused (they are a few KiB).
pub const MAX_KUBECONFIG: u64 = 4 << 20;

/// At most this many objects are listed (paged) before giving up: a bound on memory.
pub const MAX_ITEMS: usize = 200_000;

/// Which cluster, as who.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Target {
    /// The kubeconfig file (default: every path in KUBECONFIG, merged as kubectl merges them,
    /// else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Give up on a request after this many seconds.
    #[arg(long, global = true, default_value_t = 30, value_name = "SECONDS")]
    pub request_timeout: u64,
    /// List this many objects per request (kubectl's --chunk-size).
    #[arg(long, global = true, default_value_t = 500)]
    pub chunk_size: u32,
}

/// The kubeconfig files `explicit` (`--kubeconfig`), `env` (`KUBECONFIG`) and `home` name, in
/// the order they are merged.
pub fn paths(
    explicit: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(p) = explicit {
        return Ok(vec![p.to_path_buf()]);
    }
    if let Some(env) = env.filter(|e| !e.is_empty()) {
        let mut out: Vec<PathBuf> = Vec::new();
        for p in std::env::split_paths(env) {
            if !p.as_os_str().is_empty() && !out.contains(&p) {
                out.push(p);
            }
        }
        if !out.is_empty() {
            return Ok(out);
        }
    }
    match home {
        Some(h) => Ok(vec![h.join(".kube/config")]),
        None => bail!("no kubeconfig: no --kubeconfig, KUBECONFIG or HOME"),
    }
}

/// The merged kubeconfig of `paths`; missing files are skipped unless `explicit` (one path the
/// operator named), and at least one must exist.
pub fn read(paths: &[PathBuf], explicit: bool) -> anyhow::Result<Kubeconfig> {
    let mut merged: Option<Kubeconfig> = None;
    for p in paths {
        let meta = match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => continue,
            r => r.with_context(|| format!("{}: cannot read", p.display()))?,
        };
        if meta.len() > MAX_KUBECONFIG {
            bail!(
                "{}: larger than {} MiB: not a kubeconfig",
                p.display(),
                MAX_KUBECONFIG >> 20
            );
        }
        let mut kc = Kubeconfig::read_from(p).map_err(|e| unquoted(p, e))?;
        // an empty current-context is unset (client-go; `kubectl config` writes "" itself), so a
        // later file's may win
        if kc.current_context.as_deref() == Some("") {
            kc.current_context = None;
        }
        merged = Some(match merged {
            None => kc,
            Some(m) => m
                .merge(kc)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        });
    }
    merged.with_context(|| format!("no kubeconfig: none of {} exists", shown(paths)))
}

/// `e` without what it may quote of the file: a kubeconfig carries credentials, and the YAML
/// parser's message carries a snippet of the source (line and column only, then).
fn unquoted(p: &Path, e: kube::config::KubeconfigError) -> anyhow::Error {
    use kube::config::KubeconfigError as E;
    match e {
        E::Parse(e) => match e.location() {
            Some(l) => anyhow::anyhow!(
                "{}: not a valid kubeconfig (line {}, column {})",
                p.display(),
                l.line(),
                l.column()
            ),
            None => anyhow::anyhow!("{}: not a valid kubeconfig", p.display()),
        },
        E::ReadConfig(io, _) => anyhow::anyhow!("{}: cannot read: {io}", p.display()),
        e => anyhow::anyhow!("{}: {e}", p.display()),
    }
}

fn shown(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// A client for `target`, with the environment's `KUBECONFIG` and `HOME`.
pub async fn client(target: &Target) -> anyhow::Result<kube::Client> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let env = std::env::var_os("KUBECONFIG");
    let paths = paths(
        target.kubeconfig.as_deref(),
        env.as_deref(),
        home.as_deref(),
    )?;
    let kc = read(&paths, target.kubeconfig.is_some())?;
    let context = match target
        .context
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| kc.current_context.clone())
    {
        Some(c) => c,
        None => bail!(
            "{}: no current-context; pass --context (contexts: {})",
            shown(&paths),
            kc.contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if !kc.contexts.iter().any(|c| c.name == context) {
        bail!("{}: no context \"{context}\"", shown(&paths));
    }
    let opts = KubeConfigOptions {
        context: Some(context.clone()),
        ..Default::default()
    };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .with_context(|| format!("{}: context \"{context}\"", shown(&paths)))?;
    let timeout = Duration::from_secs(target.request_timeout.max(1));
    cfg.connect_timeout = Some(timeout);
    cfg.read_timeout = Some(timeout);
    cfg.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    kube::Client::try_from(cfg).with_context(|| format!("context \"{context}\": no client"))
}

/// Every object `api` lists, `chunk` per request (the API server's `limit`/`continue`), each
/// request bounded by `timeout`.
pub async fn list_all<K>(
    api: &kube::Api<K>,
    chunk: u32,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    // (issue 64: a server answering empty pages, each with a new continue token, kept the
    // plugin paging forever; full pages of `chunk` reach MAX_ITEMS in far fewer)
    let max_pages = MAX_ITEMS / chunk.max(1) as usize + 100;
    for _ in 0..max_pages {
        let mut lp = kube::api::ListParams::default().limit(chunk.max(1));
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = tokio::time::timeout(timeout, api.list(&lp))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "listing {what}: the API server did not answer within {} s",
                    timeout.as_secs()
                )
            })?
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 410 => anyhow::anyhow!(
                    "listing {what}: the list expired between two pages (the API server keeps a \
                     list's version about 5 minutes); run again, or with a larger --chunk-size"
                ),
                e => anyhow::Error::new(e).context(format!("listing {what}")),
            })?;
        items.extend(page.items);
        if items.len() > MAX_ITEMS {
            bail!("listing {what}: more than {MAX_ITEMS}");
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) if token.as_deref() == Some(c.as_str()) => {
                bail!("listing {what}: the API server gave the same continue token twice")
            }
            Some(c) => token = Some(c),
            None => return Ok(items),
        }
    }
    bail!(
        "listing {what}: still not at the end after {max_pages} pages ({} objects): the API server keeps answering short pages with a new continue token",
        items.len()
    )
}

#[cfg(test)]
mod tests {
    /// A server that answers every list with an empty page and a new continue token (issue 64)
    /// ends the listing with an error naming it, rather than paging forever.
    #[tokio::test]
    async fn endless_empty_pages_end_the_listing() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                n += 1;
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => req.extend_from_slice(&buf[..k]),
                    }
                }
                let body = format!(
                    r#"{{"kind":"NodeList","apiVersion":"v1","metadata":{{"continue":"page-{n}"}},"items":[]}}"#
                );
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let e = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            super::list_all(&api, 2000, std::time::Duration::from_secs(5), "nodes"),
        )
        .await
        .expect("the listing ended")
        .unwrap_err()
        .to_string();
        assert!(e.contains("still not at the end after 200 pages"), "{e}");
    }

    use super::*;

    #[test]
    fn paths_as_client_go_takes_them() {
        let home = Path::new("/home/op");
        assert_eq!(
            paths(Some(Path::new("/k")), Some("/a:/b".as_ref()), Some(home)).unwrap(),
            [PathBuf::from("/k")]
        );
        assert_eq!(
            paths(None, Some("/a::/b:/a".as_ref()), Some(home)).unwrap(),
            [PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(
            paths(None, Some("".as_ref()), Some(home)).unwrap(),
            [PathBuf::from("/home/op/.kube/config")]
        );
        assert!(paths(None, None, None).is_err());
    }

    #[test]
    fn missing_files_are_skipped_unless_named_or_all_missing() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, "apiVersion: v1\nkind: Config\ncurrent-context: x\n").unwrap();
        let gone = d.path().join("gone");
        let kc = read(&[gone.clone(), a.clone()], false).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("x"));
        // an empty current-context in the first file does not hide the second's
        let empty = d.path().join("empty");
        std::fs::write(
            &empty,
            "apiVersion: v1\nkind: Config\ncurrent-context: \"\"\n",
        )
        .unwrap();
        let kc = read(&[empty, a.clone()], false).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("x"));
        let e = read(std::slice::from_ref(&gone), true).unwrap_err();
        assert!(format!("{e:#}").contains("gone: cannot read"), "{e:#}");
        let e = read(std::slice::from_ref(&gone), false).unwrap_err();
        assert!(format!("{e:#}").contains("none of"), "{e:#}");
        // a token in a file that does not parse is not quoted
        let bad = d.path().join("bad");
        std::fs::write(
            &bad,
            "users:\n- name: u\n  user:\n    token: [s3cr3t-t0ken\n",
        )
        .unwrap();
        let e = format!("{:#}", read(&[bad], true).unwrap_err());
        assert!(e.contains("bad: not a valid kubeconfig (line"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
    }
}
