//! Tier 2: the D-Bus client against a real systemd (PID 1 in systemd-nspawn). Ignored in
//! `cargo test`; tests/nspawn runs this binary inside the container with `--ignored`.

use std::time::Duration;

use nodectl_units::systemd::{Client, SystemdError};

const DIR: &str = "/etc/systemd/system";

fn unit(name: &str, body: &str) {
    std::fs::write(format!("{DIR}/{name}"), body).unwrap();
}

async fn client() -> Client {
    Client::system()
        .await
        .expect("system bus with systemd on it")
        .with_job_timeout(Duration::from_secs(30))
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (nspawn tier)"]
async fn start_restart_stop_report_job_results_and_states() {
    unit(
        "nodectl-live-a.service",
        "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n",
    );
    unit(
        "nodectl-live-fail.service",
        "[Service]\nType=oneshot\nExecStart=/bin/false\n",
    );
    let c = client().await;
    c.reload().await.unwrap();

    let st = c.state("nodectl-live-a.service").await.unwrap();
    assert_eq!(
        (st.load.as_str(), st.active.as_str()),
        ("loaded", "inactive")
    );
    assert_eq!(st.unit_file, "disabled");

    c.start("nodectl-live-a.service").await.unwrap();
    let st = c.state("nodectl-live-a.service").await.unwrap();
    assert_eq!((st.active.as_str(), st.sub.as_str()), ("active", "running"));

    c.restart("nodectl-live-a.service").await.unwrap();
    assert_eq!(
        c.state("nodectl-live-a.service").await.unwrap().active,
        "active"
    );

    c.stop("nodectl-live-a.service").await.unwrap();
    let st = c.state("nodectl-live-a.service").await.unwrap();
    assert_eq!((st.active.as_str(), st.sub.as_str()), ("inactive", "dead"));

    // A failing job is reported with systemd's job result, not as success.
    match c.start("nodectl-live-fail.service").await {
        Err(SystemdError::JobFailed { result, op, .. }) => {
            assert_eq!((result.as_str(), op), ("failed", "start"))
        }
        other => panic!("expected a failed job, got {other:?}"),
    }
    let st = c.state("nodectl-live-fail.service").await.unwrap();
    assert_eq!(
        (st.active.as_str(), st.result.as_str()),
        ("failed", "exit-code")
    );

    c.enable(&["nodectl-live-a.service".into()]).await.unwrap();
    c.reload().await.unwrap();
    assert_eq!(
        c.state("nodectl-live-a.service").await.unwrap().unit_file,
        "enabled"
    );

    let calls = c.calls();
    assert_eq!(
        (
            calls.start,
            calls.restart,
            calls.stop,
            calls.reload,
            calls.enable
        ),
        (2, 1, 1, 2, 1)
    );
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (nspawn tier)"]
async fn follows_state_changes_by_signal() {
    // Active for a moment, then it exits by itself: only a PropertiesChanged signal tells.
    unit(
        "nodectl-live-brief.service",
        "[Service]\nExecStart=/bin/sleep 1\n",
    );
    let c = client().await;
    c.reload().await.unwrap();
    c.start("nodectl-live-brief.service").await.unwrap();
    let started = std::time::Instant::now();
    let st = c
        .wait_for("nodectl-live-brief.service", Duration::from_secs(10), |s| {
            s.active == "inactive"
        })
        .await
        .unwrap();
    assert_eq!(st.sub, "dead");
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "saw inactive too early"
    );

    // A timeout is an error that names the unit.
    match c
        .wait_for(
            "nodectl-live-brief.service",
            Duration::from_millis(300),
            |s| s.active == "active",
        )
        .await
    {
        Err(SystemdError::JobTimeout { unit, .. }) => {
            assert_eq!(unit, "nodectl-live-brief.service")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// `brief` (one or two small Manager calls) says what `state` says about load, activity, job
/// and unit file, including for a unit that has no file yet and then gets one (loaded again by
/// systemd itself, no reload).
#[tokio::test]
#[ignore = "needs systemd as PID 1 (nspawn tier)"]
async fn brief_agrees_with_state_and_sees_a_new_unit_file_without_a_reload() {
    let c = client().await;
    let name = "nodectl-live-brief2.service";
    let st = c.brief(name, true).await.unwrap();
    assert_eq!(
        (st.load.as_str(), st.active.as_str(), st.unit_file.as_str()),
        ("not-found", "inactive", "")
    );
    unit(
        name,
        "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n",
    );
    let st = c.brief(name, true).await.unwrap();
    assert_eq!(
        (st.load.as_str(), st.unit_file.as_str()),
        ("loaded", "disabled")
    );
    c.start(name).await.unwrap();
    let (b, s) = (
        c.brief(name, false).await.unwrap(),
        c.state(name).await.unwrap(),
    );
    assert_eq!(
        (b.load, b.active, b.sub, b.job),
        (s.load, s.active, s.sub, s.job)
    );
    assert_eq!(b.unit_file, "", "not asked for");
    // Asked by an alias, systemd answers with the unit's own name (`u->id`): still its row.
    std::os::unix::fs::symlink(
        format!("{DIR}/{name}"),
        format!("{DIR}/nodectl-live-brief2-alias.service"),
    )
    .unwrap();
    c.reload().await.unwrap();
    let a = c
        .brief("nodectl-live-brief2-alias.service", false)
        .await
        .unwrap();
    assert_eq!((a.active.as_str(), a.sub.as_str()), ("active", "running"));
    std::fs::remove_file(format!("{DIR}/nodectl-live-brief2-alias.service")).unwrap();
    c.stop(name).await.unwrap();
    // Jobs that end at once are not missed (their end is followed from the client's start):
    // many starts and stops in a row each return with their own job's result.
    for _ in 0..5 {
        c.start(name).await.unwrap();
        c.stop(name).await.unwrap();
    }
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 (nspawn tier)"]
async fn a_job_followed_from_the_pass_start_reports_its_own_result_after_many_other_jobs() {
    use nodectl_units::systemd::Systemd;
    unit(
        "nodectl-live-ahead.service",
        "[Service]\nExecStart=/bin/sleep infinity\n",
    );
    unit(
        "nodectl-live-ahead-fail.service",
        "[Service]\nType=oneshot\nExecStart=/bin/false\n",
    );
    unit(
        "nodectl-live-other.service",
        "[Service]\nType=oneshot\nExecStart=/bin/true\n",
    );
    let base = Systemd::Bus(client().await);
    base.reload().await.unwrap();
    let sd = base.for_pass();
    sd.watch_jobs_ahead("nodectl-live-ahead.service").await;
    // More JobRemoved broadcasts than a match stream queues (64) reach the watch before its
    // job: the task reads them as they come, so the bus connection's replies keep flowing.
    for _ in 0..40 {
        sd.start("nodectl-live-other.service").await.unwrap();
        sd.restart("nodectl-live-other.service").await.unwrap();
    }
    sd.start("nodectl-live-ahead.service").await.unwrap();
    assert_eq!(
        sd.state("nodectl-live-ahead.service").await.unwrap().active,
        "active"
    );
    sd.stop("nodectl-live-ahead.service").await.unwrap();
    // A failed job's result comes through a watch opened ahead too.
    let sd = base.for_pass();
    sd.watch_jobs_ahead("nodectl-live-ahead-fail.service").await;
    match sd.start("nodectl-live-ahead-fail.service").await {
        Err(SystemdError::JobFailed { result, .. }) => assert_eq!(result, "failed"),
        other => panic!("expected a failed job, got {other:?}"),
    }
}
