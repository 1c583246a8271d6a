//! Tier 1: a bundle renamed into the inbox (or closed after writing) is placed at once, on the
//! kernel's word (inotify `IN_MOVED_TO`/`IN_CLOSE_WRITE`), not after the age rule's second; a
//! file being written in place is left alone until it is closed, however old its mtime.

use std::time::{Duration, Instant};

mod common;
use common::{controller_bundle, controller_root, start_daemon, status, Bus, TOKEN};

async fn secrets_state(bus: &Bus) -> Option<String> {
    let v = status(bus).await?;
    let s = v["steps"]
        .as_array()?
        .iter()
        .find(|s| s["id"] == "secrets")?
        .clone();
    Some(format!(
        "{} {}{}",
        s["state"].as_str()?,
        s["detail"].as_str().unwrap_or_default(),
        s["waiting_for"].as_str().unwrap_or_default()
    ))
}

async fn until_placed(bus: &Bus, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if secrets_state(bus)
            .await
            .is_some_and(|s| s.starts_with("converged") || s.starts_with("applied"))
        {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_in_bundle_is_placed_without_waiting_for_its_age() {
    let bus = Bus::start();
    let api = nodectl_apiserver_double::Double::start(Default::default())
        .await
        .unwrap();
    let bundle = controller_bundle(api.bootstrap_kubeconfig(TOKEN).trim_end());
    let d = controller_root();
    let root = d.path();
    let inbox = root.join("var/lib/nodectl/inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let _daemon = start_daemon(root, &bus);
    let start = Instant::now();
    while !secrets_state(&bus)
        .await
        .is_some_and(|s| s.starts_with("waiting"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            secrets_state(&bus).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Written in place and still open: left alone (it may be half-written), also once it was
    // last modified longer ago than the age rule's second (the kernel says it is open for
    // writing: a read lease is refused)...
    let path = inbox.join("assets");
    let mut open = std::fs::File::create(&path).unwrap();
    let (head, tail) = bundle.split_at(bundle.len() / 2);
    std::io::Write::write_all(&mut open, head.as_bytes()).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(10);
    open.set_modified(old).unwrap();
    assert_eq!(
        until_placed(&bus, Duration::from_millis(2500)).await,
        None,
        "a half-written bundle was placed"
    );
    assert!(
        secrets_state(&bus)
            .await
            .is_some_and(|s| s.contains("to be completely written (open for writing")),
        "{:?}",
        secrets_state(&bus).await
    );
    assert!(!root.join("etc/kubernetes/pki/ca.key").exists());
    // ...closed after writing: placed at once (its mtime is brand new)
    std::io::Write::write_all(&mut open, tail.as_bytes()).unwrap();
    let t0 = Instant::now();
    drop(open);
    let took = until_placed(&bus, Duration::from_secs(5))
        .await
        .expect("placed");
    assert!(
        took < Duration::from_millis(800),
        "placed {took:?} after the close (the age rule waits 1 s)"
    );
    assert!(root.join("etc/kubernetes/pki/ca.key").exists());
    eprintln!("closed -> placed: {:?}", t0.elapsed());
    // Written aside, renamed in: taken from the inbox at once.
    let aside = inbox.join(".assets.part");
    std::fs::write(&aside, &bundle).unwrap();
    let t0 = Instant::now();
    std::fs::rename(&aside, &path).unwrap();
    while path.exists() {
        assert!(
            t0.elapsed() < Duration::from_millis(800),
            "still in the inbox {:?} after the rename",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("renamed in -> taken: {:?}", t0.elapsed());
}
