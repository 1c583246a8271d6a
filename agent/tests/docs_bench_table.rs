//! docs/testing.md's benchmark table is generated from a run's own output
//! (`tests/bench/table.sh --update LOG` keeps the bench's part as docs/bench-last-run.txt):
//! a table edited by hand, or a run kept without its table, fails here.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_docs_benchmark_table_is_the_last_runs() {
    let out = Command::new("bash")
        .arg(repo().join("tests/bench/table.sh"))
        .arg("--check")
        .output()
        .expect("bash runs tests/bench/table.sh");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_table_edited_by_hand_is_caught() {
    // The check itself, on a copy of the docs with one figure changed.
    let d = tempfile::tempdir().unwrap();
    for sub in ["docs", "tests/bench"] {
        std::fs::create_dir_all(d.path().join(sub)).unwrap();
    }
    for f in [
        "docs/testing.md",
        "docs/bench-last-run.txt",
        "tests/bench/table.sh",
    ] {
        std::fs::copy(repo().join(f), d.path().join(f)).unwrap();
    }
    let docs = d.path().join("docs/testing.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let begin = text.find("<!-- bench-table:begin").expect("the markers");
    let row = begin + text[begin..].find("\n| ").expect("a table row") + 1;
    let edited = format!("{}| edited by hand |\n{}", &text[..row], &text[row..]);
    std::fs::write(&docs, edited).unwrap();
    let out = Command::new("bash")
        .arg(d.path().join("tests/bench/table.sh"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a hand-edited table passed the check"
    );
}
