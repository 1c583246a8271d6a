//! `nodectl import FILE`: hands a Typhoon assets bundle (terraform-render-bootstrap's records,
//! `##### <path>` each) to nodectld, as Typhoon's Terraform delivers it: its `ssh.tf` copies the
//! bundle to `/home/core/assets` and runs `sudo /opt/bootstrap/layout`, which on a nodectl node
//! is `nodectl import assets`.
//!
//! The bundle is checked first as a pass would check it (records, layout, role, owners), so a
//! refusal is said at once and nothing is handed over. It then goes into the inbox by the one
//! atomic write (temp file, fsync, rename; root-owned, 0600), the copy in the operator's
//! directory is removed (as Typhoon's layout removes its `assets`: keys and the token do not
//! stay in a home directory), and, unless `--no-wait`, the command waits until nodectld has
//! placed it: the file gone from the inbox and the `secrets` step converged. A refusal by
//! nodectld (its own checks, an owner missing) ends the wait with its error; the bundle stays
//! in the inbox for the operator to replace.

use kubectl_nodectl::exit;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::status_cmd::{status_from_daemon, status_from_disk};
use crate::engine::StepState;
use crate::fsio::{DirSpec, FileSpec, Writer};
use crate::root::Root;
use crate::steps::bundle::MAX_BUNDLE_BYTES;
use crate::steps::Secrets;

/// The name an imported bundle takes in the inbox (one at a time: a second import before the
/// first was placed replaces it, whole).
pub(crate) const IMPORT_NAME: &str = "typhoon-assets";
/// How often the status is asked again while waiting.
const EVERY: Duration = Duration::from_millis(200);

/// Whether `uid` may own a bundle this import takes: root, the user running it, or the user
/// who ran it through sudo (Typhoon's `ssh.tf` copies the bundle as `core`, then runs
/// `sudo /opt/bootstrap/layout`).
fn trusted_owner(uid: u32) -> bool {
    let sudo = std::env::var("SUDO_UID")
        .ok()
        .and_then(|s| s.parse::<u32>().ok());
    uid == 0 || uid == nix::unistd::getuid().as_raw() || sudo == Some(uid)
}

/// The bundle read from the operator's file: never through a symlink, a regular file, bounded,
/// and (on the descriptor read) owned by root or the operator and writable by no one else, as
/// the inbox holds its bundles: a bundle another user could write, or wrote in a shared
/// directory before the operator's copy, would be placed as root.
fn read_bundle(file: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt as _;
    let f = crate::fsio::open_nofollow(file)
        .with_context(|| format!("opening {} (never through a symlink)", file.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", file.display()))?;
    anyhow::ensure!(meta.is_file(), "{} is not a regular file", file.display());
    anyhow::ensure!(
        trusted_owner(meta.uid()),
        "{} is owned by uid {}, neither root nor the user running the import: another user \
         could have written it (copy it yourself, then import the copy)",
        file.display(),
        meta.uid()
    );
    anyhow::ensure!(
        meta.mode() & 0o022 == 0,
        "{} is writable by group or others (mode {:04o}): `chmod go-w` it, or copy it",
        file.display(),
        meta.mode() & 0o7777
    );
    let mut bytes = Vec::new();
    f.take(MAX_BUNDLE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", file.display()))?;
    Ok(bytes)
}

/// What `--json` prints when the import ends: `result` is `placed`, `handed-over`
/// (`--no-wait`), `refused` or `timed-out`.
fn report(json: bool, file: &Path, files: usize, result: &str, detail: &str) {
    if json {
        let v =
            serde_json::json!({"file": file, "files": files, "result": result, "detail": detail});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
}

/// Runs `nodectl import`; returns the exit code (0: placed, or handed over with `--no-wait`;
/// 3: refused; 5: timed out; 1: error). With `json`, what it says goes to stderr and one
/// object to stdout at the end.
pub(super) async fn run(
    root: &Root,
    file: &Path,
    wait: bool,
    timeout: u64,
    json: bool,
) -> anyhow::Result<i32> {
    let host = crate::load::host(root)?;
    let settings = crate::load::settings(root, &host)?;
    let bytes = read_bundle(file)?;
    let files = match Secrets::fileset_of(root, &settings, &bytes, file) {
        Ok(set) => set.files.len(),
        Err(e) => {
            eprintln!("{e:#}; nothing was imported");
            report(json, file, 0, "refused", &format!("{e:#}"));
            return Ok(exit::FAILED);
        }
    };
    let labeler = nodectl_selinux::Labeler::new(root.dir(), &host.selinux);
    let writer = Writer::new(root, &labeler);
    let inbox = &settings.secrets_inbox;
    writer
        .ensure_dir(&DirSpec::new(inbox, 0o700))
        .with_context(|| format!("making the inbox {}", inbox.display()))?;
    let dest: PathBuf = inbox.join(IMPORT_NAME);
    writer
        .write(&FileSpec::new(&dest, bytes, 0o600))
        .with_context(|| format!("writing {}", dest.display()))?;
    std::fs::remove_file(file).with_context(|| {
        format!(
            "removing {} (handed over as {})",
            file.display(),
            dest.display()
        )
    })?;
    let said = format!(
        "imported {} ({files} files) as {}; {} removed",
        file.display(),
        dest.display(),
        file.display()
    );
    if json {
        eprintln!("{said}");
    } else {
        println!("{said}");
    }
    if !wait {
        report(
            json,
            file,
            files,
            "handed-over",
            &dest.display().to_string(),
        );
        return Ok(0);
    }
    let (code, detail) = placed(root, &dest, files, timeout, json).await?;
    let result = match code {
        exit::OK => "placed",
        exit::TIMEOUT => "timed-out",
        _ => "refused",
    };
    report(json, file, files, result, &detail);
    Ok(code)
}

/// Waits until nodectld placed the bundle at `dest` (node path): gone from the inbox, the
/// `secrets` step converged.
async fn placed(
    root: &Root,
    dest: &Path,
    files: usize,
    timeout: u64,
    json: bool,
) -> anyhow::Result<(i32, String)> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut said = String::new();
    loop {
        let st = match status_from_daemon(root).await {
            Ok(st) => st,
            Err(why) => status_from_disk(root, why.to_string()).await,
        };
        let there = root.path(dest).exists();
        let secrets = st
            .steps
            .iter()
            .find(|s| s.id == "secrets")
            .map(|s| &s.state);
        let left = match secrets {
            Some(StepState::Converged { .. } | StepState::Applied { .. }) if !there => {
                let said = format!(
                    "placed by nodectld: {files} files, with their owners, modes and labels"
                );
                if json {
                    eprintln!("{said}");
                } else {
                    println!("{said}");
                }
                return Ok((exit::OK, said));
            }
            Some(StepState::Failed { error }) if there => {
                eprintln!(
                    "nodectld refused the bundle: {error}\n(it stays in {}; import a mended one to replace it)",
                    dest.display()
                );
                return Ok((exit::FAILED, error.clone()));
            }
            _ if there => format!("nodectld to place {}", dest.display()),
            Some(StepState::Waiting { waiting_for }) => format!("secrets: {waiting_for}"),
            Some(s) => format!("secrets: {}", s.name()),
            None => format!("nodectld's first pass ({})", st.daemon.state),
        };
        if Instant::now() >= deadline {
            eprintln!("still waiting after {timeout} s for {left}");
            return Ok((exit::TIMEOUT, left));
        }
        if left != said {
            if json {
                eprintln!("waiting for {left}");
            } else {
                println!("waiting for {left}");
            }
            said = left;
        }
        tokio::time::sleep(EVERY).await;
    }
}
