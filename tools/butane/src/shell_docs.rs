//! Completions (bash, zsh, fish) and man pages for nodectl and nodectld, made by clap's own
//! generators (clap_complete, clap_mangen) from the binaries' command-line definitions, so
//! they cannot drift from them; packaging/release.sh puts them in the sysext images under
//! /usr/share (bash-completion, zsh, fish, man).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

fn write(path: PathBuf, bytes: &[u8], written: &mut Vec<PathBuf>) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("making {}", d.display()))?;
    }
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    Ok(())
}

/// A man page for `cmd` in `section`, and one for each of its subcommands (`nodectl-status.1`,
/// `nodectl-reboot-lock-release.1`), as `clap_mangen::generate_to` names them.
fn man_tree(
    cmd: clap::Command,
    section: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    let cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .render(&mut buf)?;
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    write(dir.join(format!("{name}.{section}")), &buf, written)?;
    // (clap's generated `help` subcommands get no page)
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let sub = sub
            .clone()
            .display_name(format!("{name}-{}", sub.get_name()))
            .bin_name(format!(
                "{} {}",
                cmd.get_bin_name().unwrap_or(&name),
                sub.get_name()
            ));
        man_tree(sub, section, dir, written)?;
    }
    Ok(())
}

/// Writes them under `out` (its layout is /usr/share's): the files written.
pub fn shell_docs(out: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (shell, file) in [
        (Shell::Bash, "bash-completion/completions/nodectl"),
        (Shell::Zsh, "zsh/site-functions/_nodectl"),
        (Shell::Fish, "fish/vendor_completions.d/nodectl.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(
            shell,
            &mut nodectl::cli::Cli::command(),
            "nodectl",
            &mut buf,
        );
        write(out.join(file), &buf, &mut written)?;
    }
    let mut nodectl = nodectl::cli::Cli::command();
    nodectl.build();
    man_tree(nodectl, "1", &out.join("man/man1"), &mut written)?;
    man_tree(
        nodectl::daemon::Args::command(),
        "8",
        &out.join("man/man8"),
        &mut written,
    )?;
    Ok(written)
}
