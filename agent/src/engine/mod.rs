//! The plan/apply engine. The node is a set of [`Step`]s with explicit dependencies. Each step
//! observes the current state and says what would change ([`Observation`]); computing that has
//! no side effects, so a plan is just every step's observation. Apply walks the steps in
//! dependency order, applies a step only when all its dependencies are converged, and observes
//! again afterwards to prove the step converged.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub mod context;

pub use context::{Cx, Waker};

/// One change a step would make, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The action, e.g. `write <path>` or `start kubelet.service`.
    pub what: String,
    /// Why it is needed, e.g. what differs from the goal.
    pub why: String,
}

impl Change {
    /// A change to `what`, made because of `why`.
    pub fn new(what: impl Into<String>, why: impl Into<String>) -> Self {
        Change {
            what: what.into(),
            why: why.into(),
        }
    }
}

/// What a step sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Nothing to do; the detail says what is in place.
    Converged(String),
    /// These changes would bring the step to its goal.
    Changes(Vec<Change>),
    /// The step needs input from outside (a file provisioning drops, an approval, ...).
    Waiting(String),
}

/// One piece of node state the engine converges, such as a file, a unit or a credential.
pub trait Step: Send + Sync {
    /// Stable name of the step, used in dependencies, reports and logs.
    fn id(&self) -> &'static str;
    /// One-line summary of what the step looks after, for humans.
    fn description(&self) -> &'static str;
    /// Steps that must be converged before this one may apply.
    fn deps(&self) -> &'static [&'static str];
    /// Steps this one runs after in a pass without waiting for them to converge: ones that
    /// may deliver its input (a bundle may hold the bootstrap kubeconfig) but whose waiting
    /// or failing says nothing about it (ordering only, as systemd's `After=` without
    /// `Requires=`).
    fn after(&self) -> &'static [&'static str] {
        &[]
    }
    /// Observes and computes the changes. Must not change anything.
    fn observe<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>>;
    /// Makes the changes. Idempotent: applying a converged step changes nothing.
    fn apply<'a>(&'a self, cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>>;
    /// Called for every step at an apply pass's start: work whose result `observe` would wait
    /// for may start now in the background (reads only; `observe` waits for it and checks it
    /// still holds).
    fn start_ahead(&self, _cx: &Cx) {}
    /// Called for every step at an apply pass's end: what `start_ahead` started and `observe`
    /// did not take (a blocked step) is dropped.
    fn end_ahead(&self) {}
}

/// How a step ended up in a plan or an apply pass; serialized with a `state` tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum StepState {
    /// Nothing to do.
    Converged {
        /// What is in place.
        detail: String,
    },
    /// Plan: what would change. After an apply that made changes: what was changed.
    Pending {
        /// The changes.
        changes: Vec<Change>,
    },
    /// An apply pass made these changes and the step converged afterwards.
    Applied {
        /// The changes that were made.
        changes: Vec<Change>,
    },
    /// The step needs input from outside before it can go on.
    Waiting {
        /// What it waits for.
        waiting_for: String,
    },
    /// Skipped because a dependency waits, is blocked or failed.
    Blocked {
        /// The dependencies that hold it back.
        blocked_by: Vec<String>,
    },
    /// Observing or applying failed, or the step did not converge after apply.
    Failed {
        /// The error, with its causes.
        error: String,
    },
}

impl StepState {
    /// Short lower-case name of the state ("converged", "pending", ...), for text output.
    pub fn name(&self) -> &'static str {
        match self {
            StepState::Converged { .. } => "converged",
            StepState::Pending { .. } => "pending",
            StepState::Applied { .. } => "applied",
            StepState::Waiting { .. } => "waiting",
            StepState::Blocked { .. } => "blocked",
            StepState::Failed { .. } => "failed",
        }
    }

    /// Converged now (nothing left to do for this step).
    pub fn is_done(&self) -> bool {
        matches!(
            self,
            StepState::Converged { .. } | StepState::Applied { .. }
        )
    }
}

/// The outcome for one step in a plan or apply pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    /// The step's id.
    pub id: String,
    /// The step's one-line description.
    pub description: String,
    /// Ids of the steps it depends on.
    pub deps: Vec<String>,
    /// What happened to the step.
    #[serde(flatten)]
    pub state: StepState,
}

/// The outcome of a whole plan or apply pass, steps in dependency order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// One entry per step, in the order the engine ran them.
    pub steps: Vec<StepReport>,
    /// How long the pass took, in milliseconds.
    pub duration_ms: u64,
}

impl Report {
    /// Changes a plan says are still to be made.
    pub fn pending_changes(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match &s.state {
                StepState::Pending { changes } => changes.len(),
                _ => 0,
            })
            .sum()
    }

    /// Steps that failed in this pass.
    pub fn failed(&self) -> Vec<&StepReport> {
        self.steps
            .iter()
            .filter(|s| matches!(s.state, StepState::Failed { .. }))
            .collect()
    }

    /// What the node waits for from outside, for sd_notify STATUS= and `nodectl status`.
    pub fn waiting_for(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|s| match &s.state {
                StepState::Waiting { waiting_for } => Some(format!("{}: {waiting_for}", s.id)),
                _ => None,
            })
            .collect()
    }

    /// True when every step is converged or was applied.
    pub fn all_done(&self) -> bool {
        self.steps.iter().all(|s| s.state.is_done())
    }
}

/// Why a set of steps cannot form an engine.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    /// A step names a dependency that no step has as its id.
    #[error("step {step} depends on unknown step {dep}")]
    UnknownDep {
        /// The step with the bad dependency.
        step: String,
        /// The id it depends on.
        dep: String,
    },
    /// Some steps depend on each other in a loop; lists the steps that could not be ordered.
    #[error("steps form a dependency cycle: {0}")]
    Cycle(String),
    /// Two steps share an id.
    #[error("two steps are called {0}")]
    Duplicate(String),
}

/// The steps of the node, ordered so each comes after its dependencies.
pub struct Engine {
    steps: Vec<Box<dyn Step>>,
}

impl Engine {
    /// Orders the steps so each comes after its dependencies (stable for independent steps).
    pub fn new(steps: Vec<Box<dyn Step>>) -> Result<Self, GraphError> {
        let mut index = BTreeMap::new();
        for (i, s) in steps.iter().enumerate() {
            if index.insert(s.id(), i).is_some() {
                return Err(GraphError::Duplicate(s.id().into()));
            }
        }
        let before = |s: &dyn Step| {
            s.deps()
                .iter()
                .chain(s.after())
                .copied()
                .collect::<Vec<_>>()
        };
        for s in &steps {
            for d in before(s.as_ref()) {
                if !index.contains_key(d) {
                    return Err(GraphError::UnknownDep {
                        step: s.id().into(),
                        dep: (*d).into(),
                    });
                }
            }
        }
        let mut placed = vec![false; steps.len()];
        let mut order = Vec::with_capacity(steps.len());
        while order.len() < steps.len() {
            let next = (0..steps.len()).find(|&i| {
                !placed[i] && before(steps[i].as_ref()).iter().all(|d| placed[index[d]])
            });
            match next {
                Some(i) => {
                    placed[i] = true;
                    order.push(i);
                }
                None => {
                    let left: Vec<&str> = (0..steps.len())
                        .filter(|&i| !placed[i])
                        .map(|i| steps[i].id())
                        .collect();
                    return Err(GraphError::Cycle(left.join(" -> ")));
                }
            }
        }
        let mut slots: Vec<Option<Box<dyn Step>>> = steps.into_iter().map(Some).collect();
        let steps = order
            .into_iter()
            .map(|i| slots[i].take().expect("placed once"))
            .collect();
        Ok(Engine { steps })
    }

    /// Step ids in the order the engine runs them.
    pub fn step_ids(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.id()).collect()
    }

    fn report(step: &dyn Step, state: StepState) -> StepReport {
        StepReport {
            id: step.id().into(),
            description: step.description().into(),
            deps: step.deps().iter().map(|d| d.to_string()).collect(),
            state,
        }
    }

    fn blockers(step: &dyn Step, done: &BTreeMap<&str, StepState>) -> Vec<String> {
        step.deps()
            .iter()
            .filter(|d| {
                !matches!(
                    done.get(*d),
                    Some(
                        StepState::Converged { .. }
                            | StepState::Applied { .. }
                            | StepState::Pending { .. }
                    )
                )
            })
            .map(|d| d.to_string())
            .collect()
    }

    /// Observes every step. No side effects. A step whose dependency waits, is blocked or failed
    /// is reported blocked; one whose dependency only has pending changes is observed as usual.
    pub async fn plan(&self, cx: &Cx) -> Report {
        cx.applying
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let start = Instant::now();
        let mut states: BTreeMap<&str, StepState> = BTreeMap::new();
        let mut out = Vec::new();
        for step in &self.steps {
            let blocked = Self::blockers(step.as_ref(), &states);
            let state = if !blocked.is_empty() {
                StepState::Blocked {
                    blocked_by: blocked,
                }
            } else {
                observed(step.observe(cx).await, false)
            };
            states.insert(step.id(), state.clone());
            out.push(Self::report(step.as_ref(), state));
        }
        Report {
            steps: out,
            duration_ms: start.elapsed().as_millis() as u64,
        }
    }

    /// One convergence pass.
    pub async fn apply(&self, cx: &Cx) -> Report {
        self.start_ahead(cx);
        self.apply_started(cx).await
    }

    /// What the steps start on their own threads for this pass's observes
    /// ([`Step::start_ahead`]): called by [`Engine::apply`], or by the daemon before its own
    /// set-up of a pass (bus questions asked ahead), which then calls [`Engine::apply_started`].
    pub fn start_ahead(&self, cx: &Cx) {
        for step in &self.steps {
            step.start_ahead(cx);
        }
    }

    /// [`Engine::apply`] once [`Engine::start_ahead`] was called for `cx`.
    pub async fn apply_started(&self, cx: &Cx) -> Report {
        cx.applying
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let start = Instant::now();
        let mut states: BTreeMap<&str, StepState> = BTreeMap::new();
        let mut out = Vec::new();
        for step in &self.steps {
            let blocked: Vec<String> = step
                .deps()
                .iter()
                .filter(|d| !states.get(*d).is_some_and(StepState::is_done))
                .map(|d| d.to_string())
                .collect();
            let t = Instant::now();
            let mut phases = Phases::default();
            let state = if !blocked.is_empty() {
                StepState::Blocked {
                    blocked_by: blocked,
                }
            } else {
                apply_one(step.as_ref(), cx, &mut phases).await
            };
            tracing::debug!(
                step = step.id(),
                "step {} {} in {:.1} ms{}",
                step.id(),
                state.name(),
                t.elapsed().as_secs_f64() * 1e3,
                phases
            );
            match &state {
                StepState::Failed { error } => {
                    tracing::error!(step = step.id(), "step {} failed: {error}", step.id())
                }
                StepState::Applied { changes } => {
                    for c in changes {
                        tracing::info!(step = step.id(), change = %c.what, reason = %c.why, "{}: {} ({})", step.id(), c.what, c.why);
                    }
                }
                _ => {}
            }
            states.insert(step.id(), state.clone());
            out.push(Self::report(step.as_ref(), state));
        }
        for step in &self.steps {
            step.end_ahead();
        }
        durable(cx, &mut out);
        Report {
            steps: out,
            duration_ms: start.elapsed().as_millis() as u64,
        }
    }
}

/// The pass's directory fsyncs, which finished in the background (`fsio::Deferred`), waited
/// for: when one failed, the renames of the steps that applied changes may not survive a power
/// loss, and those steps fail with it. A removal queued behind them that failed fails the step
/// that queued it.
fn durable(cx: &Cx, out: &mut [StepReport]) {
    if let Err(e) = cx.deferred.wait() {
        let error = format!("{e} (what this pass renamed may not survive a power loss)");
        tracing::error!("{error}");
        for s in out.iter_mut() {
            if matches!(s.state, StepState::Applied { .. }) {
                s.state = StepState::Failed {
                    error: error.clone(),
                };
            }
        }
    }
    // A removal done in the background that failed (a bundle left in the inbox): its step's.
    for (step, e) in cx.deferred.take_not_removed() {
        let error = format!("{e} (left in place; the next pass removes it)");
        tracing::error!(step, "step {step} failed: {error}");
        if let Some(s) = out.iter_mut().find(|s| s.id == step) {
            s.state = StepState::Failed { error };
        }
    }
}

fn observed(r: anyhow::Result<Observation>, applied: bool) -> StepState {
    match r {
        Ok(Observation::Converged(detail)) => StepState::Converged { detail },
        Ok(Observation::Changes(changes)) if applied => StepState::Applied { changes },
        Ok(Observation::Changes(changes)) => StepState::Pending { changes },
        Ok(Observation::Waiting(w)) => StepState::Waiting { waiting_for: w },
        Err(e) => StepState::Failed {
            error: format!("{e:#}"),
        },
    }
}

/// Where an applied step's time went (its debug line): the observe that found changes, the
/// apply, and the observe after it that checks the step converged.
#[derive(Default)]
struct Phases(Option<[Duration; 3]>);

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some([o, a, v]) => write!(
                f,
                " (observed in {:.1} ms, applied in {:.1} ms, checked after in {:.1} ms)",
                o.as_secs_f64() * 1e3,
                a.as_secs_f64() * 1e3,
                v.as_secs_f64() * 1e3
            ),
            None => Ok(()),
        }
    }
}

async fn apply_one(step: &dyn Step, cx: &Cx, phases: &mut Phases) -> StepState {
    let t = Instant::now();
    let changes = match step.observe(cx).await {
        Ok(Observation::Changes(c)) => c,
        other => return observed(other, false),
    };
    let observed_in = t.elapsed();
    if let Err(e) = step.apply(cx).await {
        return StepState::Failed {
            error: format!("{e:#}"),
        };
    }
    let applied_in = t.elapsed() - observed_in;
    let after = step.observe(cx).await;
    phases.0 = Some([
        observed_in,
        applied_in,
        t.elapsed() - observed_in - applied_in,
    ]);
    match after {
        Ok(Observation::Converged(_)) => StepState::Applied { changes },
        Ok(Observation::Changes(left)) => StepState::Failed {
            error: format!(
                "did not converge: still to do after apply: {}",
                left.iter()
                    .map(|c| c.what.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        },
        other => observed(other, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A step that needs `applies_needed` applies to converge, or waits forever.
    struct Fake {
        id: &'static str,
        deps: &'static [&'static str],
        after: &'static [&'static str],
        todo: Arc<AtomicU32>,
        waiting: bool,
        applies: Arc<AtomicU32>,
        broken_apply: bool,
    }

    fn fake(id: &'static str, deps: &'static [&'static str], todo: u32) -> Fake {
        Fake {
            id,
            deps,
            after: &[],
            todo: Arc::new(AtomicU32::new(todo)),
            waiting: false,
            applies: Arc::default(),
            broken_apply: false,
        }
    }

    impl Step for Fake {
        fn id(&self) -> &'static str {
            self.id
        }
        fn description(&self) -> &'static str {
            "fake"
        }
        fn deps(&self) -> &'static [&'static str] {
            self.deps
        }
        fn after(&self) -> &'static [&'static str] {
            self.after
        }
        fn observe<'a>(&'a self, _cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<Observation>> {
            async move {
                Ok(if self.waiting {
                    Observation::Waiting("input".into())
                } else if self.todo.load(Ordering::SeqCst) == 0 {
                    Observation::Converged("ok".into())
                } else {
                    Observation::Changes(vec![Change::new(format!("fix {}", self.id), "test")])
                })
            }
            .boxed()
        }
        fn apply<'a>(&'a self, _cx: &'a Cx) -> BoxFuture<'a, anyhow::Result<()>> {
            async move {
                self.applies.fetch_add(1, Ordering::SeqCst);
                if !self.broken_apply {
                    self.todo.store(0, Ordering::SeqCst);
                }
                Ok(())
            }
            .boxed()
        }
    }

    fn cx() -> (tempfile::TempDir, Cx) {
        Cx::scratch()
    }

    #[test]
    fn orders_by_dependencies_and_rejects_bad_graphs() {
        let e = Engine::new(vec![
            Box::new(fake("c", &["b"], 0)),
            Box::new(fake("a", &[], 0)),
            Box::new(fake("b", &["a"], 0)),
        ])
        .unwrap();
        assert_eq!(e.step_ids(), vec!["a", "b", "c"]);
        let cyc = Engine::new(vec![
            Box::new(fake("a", &["b"], 0)),
            Box::new(fake("b", &["a"], 0)),
        ]);
        assert!(matches!(cyc, Err(GraphError::Cycle(_))));
        let unknown = Engine::new(vec![Box::new(fake("a", &["zz"], 0))]);
        assert_eq!(
            unknown.err().unwrap().to_string(),
            "step a depends on unknown step zz"
        );
        let dup = Engine::new(vec![
            Box::new(fake("a", &[], 0)),
            Box::new(fake("a", &[], 0)),
        ]);
        assert!(matches!(dup, Err(GraphError::Duplicate(_))));
    }

    #[tokio::test]
    async fn plan_has_no_side_effects_and_apply_converges() {
        let (_d, cx) = cx();
        let a = fake("a", &[], 1);
        let applies = a.applies.clone();
        let e = Engine::new(vec![Box::new(a), Box::new(fake("b", &["a"], 1))]).unwrap();
        let plan = e.plan(&cx).await;
        assert_eq!(plan.pending_changes(), 2);
        assert_eq!(applies.load(Ordering::SeqCst), 0, "plan applied something");
        let r = e.apply(&cx).await;
        assert!(r.all_done(), "{r:?}");
        assert_eq!(e.plan(&cx).await.pending_changes(), 0);
        e.apply(&cx).await;
        assert_eq!(
            applies.load(Ordering::SeqCst),
            1,
            "a converged step was applied again"
        );
    }

    #[tokio::test]
    async fn waiting_blocks_dependents_and_failed_convergence_is_reported() {
        let (_d, cx) = cx();
        let mut w = fake("input", &[], 0);
        w.waiting = true;
        let after = fake("after", &["input"], 1);
        let after_applies = after.applies.clone();
        let mut broken = fake("broken", &[], 1);
        broken.broken_apply = true;
        let e = Engine::new(vec![Box::new(w), Box::new(after), Box::new(broken)]).unwrap();
        let r = e.apply(&cx).await;
        let state = |id: &str| r.steps.iter().find(|s| s.id == id).unwrap().state.clone();
        assert_eq!(
            state("input"),
            StepState::Waiting {
                waiting_for: "input".into()
            }
        );
        assert_eq!(
            state("after"),
            StepState::Blocked {
                blocked_by: vec!["input".into()]
            }
        );
        assert_eq!(after_applies.load(Ordering::SeqCst), 0);
        match state("broken") {
            StepState::Failed { error } => assert!(error.contains("did not converge"), "{error}"),
            s => panic!("{s:?}"),
        }
        assert_eq!(r.waiting_for(), vec!["input: input".to_string()]);
        assert_eq!(Status::summary(&r), "failed: broken");
    }

    /// A step ordered after another (`after`) runs after it in every pass but is not held
    /// back when it waits; an unknown name there is refused like an unknown dependency.
    #[tokio::test]
    async fn a_step_after_a_waiting_one_runs_after_it_unblocked() {
        let (_d, cx) = cx();
        let mut w = fake("input", &[], 0);
        w.waiting = true;
        let mut later = fake("later", &[], 1);
        later.after = &["input"];
        let later_applies = later.applies.clone();
        let e = Engine::new(vec![Box::new(later), Box::new(w)]).unwrap();
        assert_eq!(e.step_ids(), vec!["input", "later"]);
        let r = e.apply(&cx).await;
        assert_eq!(r.steps[1].state.name(), "applied", "{r:?}");
        assert_eq!(later_applies.load(Ordering::SeqCst), 1);
        assert_eq!(r.steps[1].deps, Vec::<String>::new());
        let mut bad = fake("a", &[], 0);
        bad.after = &["zz"];
        assert_eq!(
            Engine::new(vec![Box::new(bad)]).err().unwrap().to_string(),
            "step a depends on unknown step zz"
        );
    }

    use crate::status::Status;
}
