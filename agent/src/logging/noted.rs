//! The journal lines an operator alerts on (those with a `MESSAGE_ID` of [`super::ids`]), kept
//! in a bounded queue for nodectld to tell the cluster too (Kubernetes Events on its Node:
//! `status::events`, sent by `daemon::events`). A tracing layer copies them as they are logged,
//! whatever the log filter; nothing else of the log is kept.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// At most this many wait to be sent; older ones are dropped first (they are in the journal).
pub const MAX_QUEUED: usize = 64;

/// One line with a `MESSAGE_ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Noted {
    /// The `MESSAGE_ID` (one of [`super::ids::ALL`]).
    pub id: &'static str,
    /// The line's message.
    pub message: String,
    /// Its `status` field, if any (the condition's).
    pub status: String,
    /// Unix seconds.
    pub at: u64,
}

static QUEUE: Mutex<VecDeque<Noted>> = Mutex::new(VecDeque::new());

fn wake() -> &'static tokio::sync::Notify {
    static WAKE: OnceLock<tokio::sync::Notify> = OnceLock::new();
    WAKE.get_or_init(tokio::sync::Notify::new)
}

/// Everything noted since the last call, oldest first.
pub fn take() -> Vec<Noted> {
    QUEUE.lock().expect("noted").drain(..).collect()
}

/// Returns once something was noted (at once if something was since the last wait).
pub async fn wait() {
    wake().notified().await
}

fn push(n: Noted) {
    let mut q = QUEUE.lock().expect("noted");
    q.push_back(n);
    while q.len() > MAX_QUEUED {
        q.pop_front();
    }
    drop(q);
    wake().notify_one();
}

/// The tracing layer that notes lines with a known `message_id`.
pub struct Capture;

#[derive(Default)]
struct Fields {
    id: Option<&'static str>,
    message: String,
    status: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message_id" => self.id = super::ids::ALL.iter().copied().find(|i| *i == value),
            "status" => self.status = value.to_string(),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message_id" => {
                let v = format!("{value:?}");
                let v = v.trim_matches('"');
                self.id = super::ids::ALL.iter().copied().find(|i| *i == v);
            }
            "status" => self.status = format!("{value:?}"),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        if let Some(id) = f.id {
            push(Noted {
                id,
                message: f.message,
                status: f.status,
                at: crate::util::time::now_secs(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Lines with a known MESSAGE_ID are noted, with their message and status; others are not;
    /// the queue keeps the newest MAX_QUEUED.
    #[test]
    fn lines_with_a_message_id_are_noted_and_bounded() {
        let sub = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::with_default(sub, || {
            take();
            tracing::info!(message_id = super::super::ids::CONDITION_CHANGED, status = %"False", "condition is now {}", "False");
            tracing::info!("not an operator's event");
            tracing::info!(message_id = "0000", "an unknown id");
            let got = take();
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].message, "condition is now False");
            assert_eq!(got[0].status, "False");
            for i in 0..(MAX_QUEUED + 5) {
                tracing::warn!(message_id = super::super::ids::DRAINING, "n{i}");
            }
            let got = take();
            assert_eq!(got.len(), MAX_QUEUED);
            assert_eq!(got[0].message, "n5");
        });
    }
}
