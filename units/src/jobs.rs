//! One unit's JobRemoved signals, followed from before its job is queued: the match is added
//! in a task of its own ([`JobWatch::start`]) so a pass can open it at its start
//! ([`crate::systemd::Systemd::watch_jobs_ahead`]) and the AddMatch round trip (8-9 ms under
//! QEMU TCG) is off the way to kubelet's start job; [`crate::systemd::Client`]'s job waits open
//! one there otherwise. The task reads every signal the rule matches as it comes (an unread
//! match stream fills its queue and then holds up the connection's reader, replies included)
//! and keeps only the unit's, at most [`KEPT`] of them. The unit is named as systemd names it
//! in JobRemoved (its primary name, not an alias). Dropped, the watch tells the task to stop
//! once its match is made (never mid-AddMatch, which would leave a match no RemoveMatch undoes).

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use zbus_systemd::systemd1::JobRemoved;
use zbus_systemd::zbus;

/// At most this many of the unit's JobRemoved signals are kept until its job's is looked for
/// (the oldest dropped first: they name earlier jobs).
pub const KEPT: usize = 16;

/// What a JobRemoved said: the job's object path and its result.
type Removed = (String, String);

/// The unit's signals so far, and whether the stream ended (no more will come).
#[derive(Default)]
struct Seen {
    removed: std::collections::VecDeque<Removed>,
    closed: bool,
}

/// The unit's JobRemoved signals since the match was added; the task ends when this is
/// dropped (its stream dropped with it: RemoveMatch).
pub struct JobWatch {
    unit: String,
    subscribed: Option<tokio::sync::oneshot::Receiver<Result<(), zbus::Error>>>,
    seen: Arc<Mutex<Seen>>,
    notify: Arc<tokio::sync::Notify>,
    /// Dropped with the watch: the task stops (once its match is made).
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl JobWatch {
    /// Adds the match in a task of its own and returns at once (the AddMatch is sent once the
    /// task first runs: the caller yields for it).
    pub fn start(conn: &zbus::Connection, unit: &str) -> JobWatch {
        let (tx, subscribed) = tokio::sync::oneshot::channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let notify = Arc::new(tokio::sync::Notify::new());
        let (conn, name) = (conn.clone(), unit.to_string());
        let (their_seen, their_notify) = (seen.clone(), notify.clone());
        tokio::spawn(async move {
            let mut stream = match stream(&conn).await {
                Ok(s) => {
                    let _ = tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    their_seen.lock().expect("job watch").closed = true;
                    their_notify.notify_one();
                    return;
                }
            };
            loop {
                let msg = tokio::select! {
                    _ = &mut stopped => break,
                    msg = stream.next() => match msg {
                        Some(m) => m,
                        None => break,
                    },
                };
                // A broadcast from the rule's sender (the bus routes by the rule): one addressed
                // to nodectld is any peer's, not systemd's.
                let Some(sig) = msg
                    .ok()
                    .filter(|m| m.header().destination().is_none())
                    .and_then(JobRemoved::from_message)
                else {
                    continue;
                };
                let Ok(args) = sig.args() else { continue };
                if args.unit != name {
                    continue;
                }
                let mut seen = their_seen.lock().expect("job watch");
                if seen.removed.len() == KEPT {
                    seen.removed.pop_front();
                }
                seen.removed
                    .push_back((args.job.to_string(), args.result.to_string()));
                drop(seen);
                their_notify.notify_one();
            }
            their_seen.lock().expect("job watch").closed = true;
            their_notify.notify_one();
        });
        JobWatch {
            unit: unit.to_string(),
            subscribed: Some(subscribed),
            seen,
            notify,
            _stop: stop,
        }
    }

    /// The unit followed.
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// Returns once the match is added (at once after the first time).
    pub async fn subscribed(&mut self) -> Result<(), zbus::Error> {
        match self.subscribed.take() {
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Err(zbus::Error::Failure("the JobRemoved task ended".into()))),
            None => Ok(()),
        }
    }

    /// The result of the job at `path`, once its JobRemoved came; `None` when the stream
    /// ended first.
    pub async fn result(&self, path: &str) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut seen = self.seen.lock().expect("job watch");
                if let Some(i) = seen.removed.iter().position(|(job, _)| job == path) {
                    return seen.removed.remove(i).map(|(_, result)| result);
                }
                if seen.closed {
                    return None;
                }
            }
            notified.await;
        }
    }
}

/// The Manager's JobRemoved broadcasts from systemd: one AddMatch naming systemd as the
/// sender, where a proxy's signal stream also asks for the name's owner and matches its
/// changes (three round trips).
async fn stream(conn: &zbus::Connection) -> Result<zbus::MessageStream, zbus::Error> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.systemd1")
        .path("/org/freedesktop/systemd1")
        .interface("org.freedesktop.systemd1.Manager")
        .member("JobRemoved")
        .build()?;
    zbus::MessageStream::for_match_rule(rule, conn, None).await
}
