//! The completions and man pages release.sh puts in the sysext (`nodectl-butane shell-docs`):
//! bash takes the completion (`complete -p nodectl`) and it knows the subcommands; every man
//! page renders with groff (Debian's groff-base, as man does) without a warning, one per
//! subcommand, with the options the CLI has.

use std::process::Command;

#[test]
fn completions_load_in_bash_and_every_man_page_renders_cleanly() {
    let d = tempfile::tempdir().unwrap();
    let written = nodectl_butane::shell_docs(d.path()).unwrap();
    let rel: Vec<String> = written
        .iter()
        .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
        .collect();
    for want in [
        "bash-completion/completions/nodectl",
        "zsh/site-functions/_nodectl",
        "fish/vendor_completions.d/nodectl.fish",
        "man/man1/nodectl.1",
        "man/man1/nodectl-status.1",
        "man/man1/nodectl-converge.1",
        "man/man1/nodectl-reboot-lock-release.1",
        "man/man1/nodectl-config-check.1",
        "man/man8/nodectld.8",
    ] {
        assert!(rel.iter().any(|r| r == want), "{want} not in {rel:?}");
    }
    let bash = d.path().join("bash-completion/completions/nodectl");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p nodectl",
            bash.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nodectl"),
        "{out:?}"
    );
    let script = std::fs::read_to_string(&bash).unwrap();
    for sub in [
        "status",
        "plan",
        "converge",
        "reboot-lock",
        "fleet",
        "config",
    ] {
        assert!(script.contains(sub), "bash completion lacks {sub}");
    }
    let zsh = std::fs::read_to_string(d.path().join("zsh/site-functions/_nodectl")).unwrap();
    assert!(zsh.starts_with("#compdef nodectl"), "{}", &zsh[..40]);
    let fish =
        std::fs::read_to_string(d.path().join("fish/vendor_completions.d/nodectl.fish")).unwrap();
    assert!(fish.contains("complete -c nodectl"));

    for page in written
        .iter()
        .filter(|p| p.to_string_lossy().contains("/man/"))
    {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww"])
            .arg(page)
            .output()
            .expect("groff (Debian: groff-base; tests/vm/setup-host.sh installs it)");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.is_empty(),
            "{}: {err}",
            page.display()
        );
        assert!(!out.stdout.is_empty(), "{}", page.display());
        let src = std::fs::read_to_string(page).unwrap();
        assert!(
            src.contains(".SH NAME") && src.contains(".SH SYNOPSIS"),
            "{}",
            page.display()
        );
    }
    let plan = std::fs::read_to_string(d.path().join("man/man1/nodectl-plan.1")).unwrap();
    assert!(plan.contains("detailed\\-exitcode"), "{plan}");
    let daemon = std::fs::read_to_string(d.path().join("man/man8/nodectld.8")).unwrap();
    assert!(daemon.contains(".TH nodectld 8"), "{daemon}");
}
