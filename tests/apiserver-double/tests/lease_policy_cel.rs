//! The Lease policy (packaging/kubernetes/reboot-lease-policy.yaml) holds every node to its own
//! reboot slot entry and nothing else of the Lease (issue 37, item 3): its CEL evaluated as
//! shipped by a real CEL evaluator, the double's Rust model of it (`lease_entries_policy`) giving
//! the same verdict case by case, and both through the double's Lease API.
//!
//! The evaluator is the cel-interpreter crate, version 0.10.0 (cel-rust), with its standard
//! functions only (no Kubernetes CEL extension library): an expression that needs one (such as
//! the strings library's `substring`, which the policy used before) fails here. It does not
//! type-check as the API server does, nor absorb errors in `&&`/`||` as CEL does; so every
//! expression must evaluate without error and to a bool for every case here, and the policy is
//! written so it never relies on either.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use cel_interpreter::objects::{Key, Map};
use cel_interpreter::{Context, Program, Value as Cel};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use nodectl::reboot::lease::{entry_key, LeaseLock};
use nodectl::reboot::slots::{Acquire, Sightings};
use nodectl_apiserver_double::{
    lease_entries_policy, Double, Options, User, MEMBERS, NOT_A_MEMBER,
};
use serde_json::{json, Value};

const NS: &str = "nodectl-reboot";

/// The double with the policy, and `reboot-default` holding the entries of nodes b and a (in
/// that order), each written by its own node through nodectl's LeaseLock.
async fn two_holders() -> Double {
    let api = Double::start(Options {
        reboot_lease_policy: true,
        ..Options::default()
    })
    .await
    .unwrap();
    for (n, since) in [("b", 100), ("a", 200)] {
        let l = LeaseLock::new(node_client(&api, n).await, NS, "default");
        let (got, _) = l
            .modify(|s| s.acquire(&format!("id-{n}"), n, "boot", since, 2))
            .await
            .unwrap();
        assert_eq!(got, Acquire::Obtained);
    }
    api
}

async fn node_client(api: &Double, n: &str) -> kube::Client {
    common::client_for(
        &api.client_kubeconfig(&format!("system:node:{n}"), &["system:nodes"])
            .unwrap(),
    )
    .await
}

/// `user` (in `groups`) reads the Lease, changes it with `f` and writes it back: the error's text.
async fn write_as(
    api: &Double,
    user: &str,
    groups: &[&str],
    f: impl FnOnce(&mut Lease),
) -> Result<(), String> {
    let c = common::client_for(&api.client_kubeconfig(user, groups).unwrap()).await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(c, NS);
    let mut l = leases.get("reboot-default").await.unwrap();
    f(&mut l);
    leases
        .replace("reboot-default", &Default::default(), &l)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn denied(r: Result<(), String>, message: &str) {
    let e = r.expect_err("the policy lets it through");
    assert!(e.contains("ValidatingAdmissionPolicy"), "{e}");
    assert!(e.contains(message), "{e}");
}

const NODE: &[&str] = &["system:nodes"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_double_a_node_changes_nothing_of_the_lease_but_its_own_entry() {
    let api = two_holders().await;
    // An owner that does not exist: the garbage collector would delete the Lease, every slot.
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "gone".into(),
                uid: "0b9c4a4e-0000-0000-0000-000000000000".into(),
                ..Default::default()
            }])
        })
        .await,
        "ownerReferences",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.metadata.finalizers = Some(vec!["example.com/keep".into()])
        })
        .await,
        "finalizers",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("x".into(), "y".into());
        })
        .await,
        "labels",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("example.com/x".into(), "y".into());
        })
        .await,
        "no annotation but its own reboot slot entry",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.spec
                .get_or_insert_with(Default::default)
                .lease_transitions = Some(i32::MAX)
        })
        .await,
        "spec.leaseTransitions",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.spec
                .get_or_insert_with(Default::default)
                .lease_duration_seconds = Some(1)
        })
        .await,
        "only spec.holderIdentity and spec.leaseTransitions",
    );
    denied(
        write_as(&api, "system:node:a", NODE, |l| {
            l.spec.get_or_insert_with(Default::default).holder_identity = Some("c".into())
        })
        .await,
        "spec.holderIdentity",
    );
    // Its own entry it may still change (the renewal nodectl writes).
    write_as(&api, "system:node:a", NODE, |l| {
        let a = l.metadata.annotations.get_or_insert_with(Default::default);
        let v = a[&entry_key("a")].replace("\"renewed\":200", "\"renewed\":300");
        a.insert(entry_key("a"), v);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_double_a_system_nodes_member_that_is_no_node_is_refused() {
    let api = two_holders().await;
    // Named like no node: the old policy matched on the name's prefix only and let it free b.
    denied(
        write_as(&api, "b", NODE, |l| {
            l.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .remove(&entry_key("b"));
        })
        .await,
        "must be a node",
    );
    // An administrator is not matched.
    write_as(&api, "admin", &["system:masters"], |l| {
        l.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .remove(&entry_key("b"));
        l.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    })
    .await
    .unwrap();
}

/// Issue 51, 7: an operator names a group's members on its Lease; through the double (the
/// policy enforced), a node outside them takes no slot, a member renews its own, no node can
/// change the membership, and without it any node may take a slot as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_double_only_the_groups_members_take_its_slots() {
    let api = two_holders().await;
    write_as(&api, "admin", &["system:masters"], |l| {
        let a = l.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(MEMBERS.into(), "a|b".into());
    })
    .await
    .unwrap();
    let lock = |n: &'static str| {
        let api = &api;
        async move { LeaseLock::new(node_client(api, n).await, NS, "default") }
    };
    let c = lock("c").await;
    let e = c
        .modify(|s| s.acquire("id-c", "c", "boot", 300, 3))
        .await
        .expect_err("c is not a member");
    assert!(e.to_string().contains(NOT_A_MEMBER), "{e}");
    let a = lock("a").await;
    let (got, _) = a
        .modify(|s| s.acquire("id-a", "a", "boot", 300, 3))
        .await
        .unwrap();
    assert_eq!(got, Acquire::Retained, "a member renews its slot");
    denied(
        write_as(&api, "system:node:c", NODE, |l| {
            let a = l.metadata.annotations.get_or_insert_with(Default::default);
            a.insert(MEMBERS.into(), ".*".into());
        })
        .await,
        "no annotation but its own reboot slot entry",
    );
    write_as(&api, "admin", &["system:masters"], |l| {
        l.metadata.annotations.as_mut().unwrap().remove(MEMBERS);
    })
    .await
    .unwrap();
    let (got, _) = c
        .modify(|s| s.acquire("id-c", "c", "boot", 300, 3))
        .await
        .unwrap();
    assert_eq!(
        got,
        Acquire::Obtained,
        "no membership: any node takes a free slot"
    );
}

/// The shipped policy's expressions, compiled: (name or message, source, program).
struct Policy {
    conditions: Vec<(String, String, Program)>,
    variables: Vec<(String, String, Program)>,
    validations: Vec<(String, String, Program)>,
}

fn shipped() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/kubernetes/reboot-lease-policy.yaml"
    ))
    .unwrap();
    serde_saphyr::from_multiple(&text).unwrap()
}

fn policy() -> Policy {
    let docs = shipped();
    let vap = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the policy");
    let compile = |list: &str, label: &str| -> Vec<(String, String, Program)> {
        vap["spec"][list]
            .as_array()
            .unwrap_or_else(|| panic!("spec.{list}"))
            .iter()
            .map(|e| {
                let src = e["expression"].as_str().unwrap().to_string();
                let p = Program::compile(&src).unwrap_or_else(|e| panic!("{src}: {e}"));
                (e[label].as_str().unwrap().to_string(), src, p)
            })
            .collect()
    };
    Policy {
        conditions: compile("matchConditions", "name"),
        variables: compile("variables", "name"),
        validations: compile("validations", "message"),
    }
}

/// JSON as the API server hands it to CEL: integers are `int`, a field set to null is absent.
fn cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(cel).collect())),
        Value::Object(o) => Cel::Map(Map {
            map: Arc::new(
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (Key::from(k.as_str()), cel(v)))
                    .collect(),
            ),
        }),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    /// A matchCondition is false: the policy does not apply.
    NotMatched,
    Allowed,
    /// The messages of the validations that are false.
    Denied(Vec<String>),
}

/// The policy as the API server evaluates it (failurePolicy Fail: an error would deny; here it
/// fails the test, naming the expression, since no case may make one).
fn evaluate(p: &Policy, user: &User, old: Option<&Value>, new: &Value) -> Verdict {
    let request = json!({
        "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
        "namespace": NS,
        "resource": {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
        "userInfo": {"username": user.name, "groups": user.groups},
    });
    let mut ctx = Context::default();
    ctx.add_variable_from_value("request", cel(&request));
    ctx.add_variable_from_value("object", cel(new));
    ctx.add_variable_from_value("oldObject", old.map(cel).unwrap_or(Cel::Null));
    let boolean = |ctx: &Context, src: &str, p: &Program| match p.execute(ctx) {
        Ok(Cel::Bool(b)) => b,
        other => panic!("{src}: {other:?}, not a bool"),
    };
    for (_, src, p) in &p.conditions {
        if !boolean(&ctx, src, p) {
            return Verdict::NotMatched;
        }
    }
    let mut vars = HashMap::new();
    for (name, src, p) in &p.variables {
        ctx.add_variable_from_value("variables", Cel::Map(Map::from(vars.clone())));
        let v = p.execute(&ctx).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        vars.insert(Key::from(name.as_str()), v);
    }
    ctx.add_variable_from_value("variables", Cel::Map(Map::from(vars)));
    let failed: Vec<String> = p
        .validations
        .iter()
        .filter(|(_, src, p)| !boolean(&ctx, src, p))
        .map(|(m, _, _)| m.clone())
        .collect();
    if failed.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Denied(failed)
    }
}

/// The CEL verdict, after checking that the double's model agrees: it allows what CEL allows
/// (or does not match) and denies what CEL denies, with one of the failing validations' messages.
fn verdict(p: &Policy, name: &str, user: &User, old: Option<&Value>, new: &Value) -> Verdict {
    let v = evaluate(p, user, old, new);
    match (&v, lease_entries_policy(user, old, new)) {
        (Verdict::NotMatched | Verdict::Allowed, Ok(())) => {}
        (Verdict::Denied(ms), Err(m)) if ms.iter().any(|x| x == m) => {}
        (v, m) => panic!("{name}: the policy's CEL gives {v:?}, the double's model {m:?}"),
    }
    v
}

fn node(n: &str) -> User {
    User {
        name: format!("system:node:{n}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
    }
}

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// A holder entry as nodectl writes it.
fn holder(n: &str, since: u64) -> Value {
    json!(format!(
        r#"{{"id":"id-{n}","node":"{n}","since":{since},"renewed":{since},"boot":"boot-{n}"}}"#
    ))
}

/// The stored Lease: entries of b and c, b first.
fn base() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "reboot-default",
            "namespace": NS,
            "resourceVersion": "7",
            "uid": "6f1c1a52-1111-4c6e-9d1e-000000000007",
            "annotations": {
                entry_key("b"): holder("b", 100),
                entry_key("c"): holder("c", 150),
            },
        },
        "spec": {"holderIdentity": "b", "leaseTransitions": 2},
    })
}

fn edit(v: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut v = v.clone();
    f(&mut v);
    v
}

/// `base()` with a's entry too, taken at `since`.
fn with_a(since: u64) -> Value {
    edit(&base(), |l| {
        l["metadata"]["annotations"][entry_key("a")] = holder("a", since);
        l["spec"]["leaseTransitions"] = json!(3);
    })
}

/// `base()` after a's entry came and went (one transition more).
fn base3() -> Value {
    edit(&base(), |l| l["spec"]["leaseTransitions"] = json!(3))
}

/// What nodectl's own create sends: its entry, holderIdentity, leaseTransitions.
fn created(entries: &[&str]) -> Value {
    let annotations: serde_json::Map<String, Value> = entries
        .iter()
        .map(|n| (entry_key(n), holder(n, 100)))
        .collect();
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "reboot-default", "annotations": annotations},
        "spec": {"holderIdentity": entries.first(), "leaseTransitions": 1},
    })
}

enum Want {
    NotMatched,
    Allowed,
    /// Exactly these validations fail (by message, a part of each is enough).
    Denied(&'static [&'static str]),
}

struct Case {
    name: &'static str,
    user: User,
    old: Option<Value>,
    new: Value,
    want: Want,
}

fn case(name: &'static str, user: User, old: Option<Value>, new: Value, want: Want) -> Case {
    Case {
        name,
        user,
        old,
        new,
        want,
    }
}

const ENTRY_ADDED: &str = "a node may add or change only its own reboot slot entry";
const ENTRY_REMOVED: &str = "a node may remove only its own reboot slot entry";
const ANNOTATION: &str = "no annotation but its own reboot slot entry";
const LABELS: &str = "the Lease's labels";
const FINALIZERS: &str = "the Lease's finalizers";
const OWNERS: &str = "the Lease's ownerReferences";
const SPEC: &str = "only spec.holderIdentity and spec.leaseTransitions";
const TRANSITIONS: &str = "spec.leaseTransitions may only stay or grow by one";
const HOLDER: &str = "spec.holderIdentity may only name a node";
const NOT_A_NODE: &str = "must be a node (system:node:<name>)";
const MEMBER: &str = "is not a member of the Lease's group";

/// `v` with the operator's group membership (`nodectl.io/reboot-members`) set to `pattern`.
fn members(v: &Value, pattern: &str) -> Value {
    edit(v, |l| {
        l["metadata"]["annotations"][MEMBERS] = json!(pattern)
    })
}

fn cases() -> Vec<Case> {
    use Want::*;
    let a = || node("a");
    let update = |f: fn(&mut Value)| edit(&base(), f);
    let owner = json!([{"apiVersion": "v1", "kind": "Node", "name": "gone",
        "uid": "0b9c4a4e-0000-0000-0000-000000000000"}]);
    vec![
        // What nodectl itself writes.
        case(
            "create with its own entry",
            a(),
            None,
            created(&["a"]),
            Allowed,
        ),
        case("own entry added", a(), Some(base()), with_a(200), Allowed),
        case(
            "own entry changed (renewed)",
            a(),
            Some(with_a(200)),
            edit(&with_a(200), |l| {
                l["metadata"]["annotations"][entry_key("a")] = json!(l["metadata"]["annotations"]
                    [entry_key("a")]
                .as_str()
                .unwrap()
                .replace("\"renewed\":200", "\"renewed\":300"))
            }),
            Allowed,
        ),
        case(
            "own entry removed",
            a(),
            Some(with_a(200)),
            base3(),
            Allowed,
        ),
        case(
            "stale holders reclaimed: holderIdentity becomes the node's, one transition",
            a(),
            Some(base()),
            edit(&with_a(9_000), |l| l["spec"]["holderIdentity"] = json!("a")),
            Allowed,
        ),
        case(
            "own entry removed: holderIdentity passes to another holder",
            a(),
            Some(edit(&with_a(50), |l| {
                l["spec"]["holderIdentity"] = json!("a")
            })),
            base3(),
            Allowed,
        ),
        case(
            "last entry removed: no holderIdentity",
            a(),
            Some(created(&["a"])),
            edit(&created(&[]), |l| {
                l["spec"].as_object_mut().unwrap().remove("holderIdentity");
            }),
            Allowed,
        ),
        case(
            "leaseTransitions at i32::MAX stays there (nodectl saturates)",
            a(),
            Some(edit(&base(), |l| {
                l["spec"]["leaseTransitions"] = json!(i32::MAX)
            })),
            edit(&with_a(200), |l| {
                l["spec"]["leaseTransitions"] = json!(i32::MAX)
            }),
            Allowed,
        ),
        // Slot entries of other nodes.
        case(
            "another's entry added",
            a(),
            Some(base()),
            update(|l| l["metadata"]["annotations"][entry_key("d")] = holder("d", 1)),
            Denied(&[ENTRY_ADDED]),
        ),
        case(
            "another's entry changed",
            a(),
            Some(base()),
            update(|l| l["metadata"]["annotations"][entry_key("b")] = holder("b", 1)),
            Denied(&[ENTRY_ADDED]),
        ),
        case(
            "another's entry removed",
            a(),
            Some(base()),
            update(|l| {
                l["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(&entry_key("b"));
                l["spec"]["holderIdentity"] = json!("c");
            }),
            Denied(&[ENTRY_REMOVED]),
        ),
        case(
            "create with another's entry",
            a(),
            None,
            created(&["a", "b"]),
            Denied(&[ENTRY_ADDED]),
        ),
        // The rest of the metadata.
        case(
            "another annotation added",
            a(),
            Some(base()),
            update(|l| l["metadata"]["annotations"]["example.com/x"] = json!("y")),
            Denied(&[ANNOTATION]),
        ),
        case(
            "another annotation changed",
            a(),
            Some(update(|l| {
                l["metadata"]["annotations"]["example.com/x"] = json!("y")
            })),
            update(|l| l["metadata"]["annotations"]["example.com/x"] = json!("z")),
            Denied(&[ANNOTATION]),
        ),
        case(
            "another annotation removed",
            a(),
            Some(update(|l| {
                l["metadata"]["annotations"]["example.com/x"] = json!("y")
            })),
            base(),
            Denied(&[ANNOTATION]),
        ),
        case(
            "create with another annotation",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["metadata"]["annotations"]["example.com/x"] = json!("y")
            }),
            Denied(&[ANNOTATION]),
        ),
        case(
            "labels added",
            a(),
            Some(base()),
            update(|l| l["metadata"]["labels"] = json!({"x": "y"})),
            Denied(&[LABELS]),
        ),
        case(
            "labels changed",
            a(),
            Some(update(|l| l["metadata"]["labels"] = json!({"x": "y"}))),
            update(|l| l["metadata"]["labels"] = json!({"x": "z"})),
            Denied(&[LABELS]),
        ),
        case(
            "create with labels",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["metadata"]["labels"] = json!({"x": "y"})
            }),
            Denied(&[LABELS]),
        ),
        case(
            "finalizers added",
            a(),
            Some(base()),
            update(|l| l["metadata"]["finalizers"] = json!(["example.com/keep"])),
            Denied(&[FINALIZERS]),
        ),
        case(
            "finalizers removed",
            a(),
            Some(update(|l| {
                l["metadata"]["finalizers"] = json!(["example.com/keep"])
            })),
            base(),
            Denied(&[FINALIZERS]),
        ),
        case(
            "create with finalizers",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["metadata"]["finalizers"] = json!(["example.com/keep"])
            }),
            Denied(&[FINALIZERS]),
        ),
        case(
            "ownerReferences added (a Node that does not exist)",
            a(),
            Some(base()),
            edit(&base(), |l| {
                l["metadata"]["ownerReferences"] = owner.clone()
            }),
            Denied(&[OWNERS]),
        ),
        case(
            "create with ownerReferences",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["metadata"]["ownerReferences"] = owner.clone()
            }),
            Denied(&[OWNERS]),
        ),
        // The spec.
        case(
            "spec.leaseTransitions set to i32::MAX",
            a(),
            Some(base()),
            update(|l| l["spec"]["leaseTransitions"] = json!(i32::MAX)),
            Denied(&[TRANSITIONS]),
        ),
        case(
            "spec.leaseTransitions lowered",
            a(),
            Some(base()),
            update(|l| l["spec"]["leaseTransitions"] = json!(1)),
            Denied(&[TRANSITIONS]),
        ),
        case(
            "spec.leaseTransitions up by two",
            a(),
            Some(base()),
            edit(&with_a(200), |l| l["spec"]["leaseTransitions"] = json!(4)),
            Denied(&[TRANSITIONS]),
        ),
        case(
            "create with leaseTransitions 5",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["spec"]["leaseTransitions"] = json!(5)
            }),
            Denied(&[TRANSITIONS]),
        ),
        case(
            "spec.leaseDurationSeconds set",
            a(),
            Some(base()),
            update(|l| l["spec"]["leaseDurationSeconds"] = json!(15)),
            Denied(&[SPEC]),
        ),
        case(
            "spec.leaseDurationSeconds removed",
            a(),
            Some(update(|l| l["spec"]["leaseDurationSeconds"] = json!(15))),
            base(),
            Denied(&[SPEC]),
        ),
        case(
            "spec.renewTime changed",
            a(),
            Some(update(|l| {
                l["spec"]["renewTime"] = json!("2025-01-01T00:00:00.000000Z")
            })),
            update(|l| l["spec"]["renewTime"] = json!("2025-01-02T00:00:00.000000Z")),
            Denied(&[SPEC]),
        ),
        case(
            "create with acquireTime, preferredHolder and strategy",
            a(),
            None,
            edit(&created(&["a"]), |l| {
                l["spec"]["acquireTime"] = json!("2025-01-01T00:00:00.000000Z");
                l["spec"]["preferredHolder"] = json!("a");
                l["spec"]["strategy"] = json!("OldestEmulationVersion");
            }),
            Denied(&[SPEC]),
        ),
        case(
            "spec.holderIdentity naming a node without an entry",
            a(),
            Some(base()),
            update(|l| l["spec"]["holderIdentity"] = json!("z")),
            Denied(&[HOLDER]),
        ),
        // Group membership, where an operator set it (issue 51, 7).
        case(
            "a member takes its slot",
            a(),
            Some(members(&base(), "a|b|c")),
            members(&with_a(200), "a|b|c"),
            Allowed,
        ),
        case(
            "a member by pattern takes its slot",
            a(),
            Some(members(&base(), "[a-c]")),
            members(&with_a(200), "[a-c]"),
            Allowed,
        ),
        case(
            "a non-member takes no slot",
            a(),
            Some(members(&base(), "b|c")),
            members(&with_a(200), "b|c"),
            Denied(&[MEMBER]),
        ),
        case(
            "the pattern matches the whole name, not a part of it",
            node("ab"),
            Some(members(&base(), "b")),
            members(
                &edit(&base3(), |l| {
                    l["metadata"]["annotations"][entry_key("ab")] = holder("ab", 200)
                }),
                "b",
            ),
            Denied(&[MEMBER]),
        ),
        case(
            "a non-member's entry is not renewed",
            a(),
            Some(members(&with_a(200), "b|c")),
            members(
                &edit(&with_a(200), |l| {
                    l["metadata"]["annotations"][entry_key("a")] = holder("a", 300)
                }),
                "b|c",
            ),
            Denied(&[MEMBER]),
        ),
        case(
            "a non-member removes its own entry (a release)",
            a(),
            Some(members(&with_a(200), "b|c")),
            members(&base3(), "b|c"),
            Allowed,
        ),
        case(
            "a member renews while a non-member's entry stays as it was",
            node("b"),
            Some(members(&with_a(200), "b|c")),
            members(
                &edit(&with_a(200), |l| {
                    l["metadata"]["annotations"][entry_key("b")] = holder("b", 400)
                }),
                "b|c",
            ),
            Allowed,
        ),
        case(
            "a node removes the membership",
            a(),
            Some(members(&base(), "b|c")),
            with_a(200),
            Denied(&[ANNOTATION, MEMBER]),
        ),
        case(
            "a node widens the membership to itself",
            a(),
            Some(members(&base(), "b|c")),
            members(&with_a(200), ".*"),
            Denied(&[ANNOTATION, MEMBER]),
        ),
        case(
            "a node creates the Lease with a membership",
            a(),
            None,
            members(&created(&["a"]), "a"),
            Denied(&[ANNOTATION]),
        ),
        case(
            "an administrator sets the membership",
            user("kubernetes-admin", &["system:masters"]),
            Some(base()),
            members(&base(), "b|c"),
            NotMatched,
        ),
        // Who is matched.
        case(
            "a system:nodes member not named system:node:*, its 'own' entry",
            user("a", &["system:nodes", "system:authenticated"]),
            Some(base()),
            with_a(200),
            Denied(&[NOT_A_NODE, ENTRY_ADDED]),
        ),
        case(
            "a system:nodes member not named system:node:*, another's entry removed",
            user("a", &["system:nodes"]),
            Some(base()),
            update(|l| {
                l["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(&entry_key("c"));
            }),
            Denied(&[NOT_A_NODE, ENTRY_REMOVED]),
        ),
        case(
            "system:node: with no name, the entry of no name",
            user("system:node:", &["system:nodes"]),
            Some(base()),
            update(|l| l["metadata"]["annotations"][entry_key("")] = holder("", 1)),
            Denied(&[NOT_A_NODE]),
        ),
        case(
            "a node's name without system:nodes, another's entry removed",
            user("system:node:a", &["system:authenticated"]),
            Some(base()),
            update(|l| {
                l["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(&entry_key("c"));
            }),
            Denied(&[ENTRY_REMOVED]),
        ),
        case(
            "an administrator frees another's slot and sets an owner",
            user(
                "kubernetes-admin",
                &["system:masters", "system:authenticated"],
            ),
            Some(base()),
            update(|l| {
                l["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(&entry_key("b"));
                l["metadata"]["ownerReferences"] = json!([]);
                l["spec"]["leaseTransitions"] = json!(0);
            }),
            NotMatched,
        ),
        case(
            "a service account (not a node) is not matched",
            user(
                "system:serviceaccount:kube-system:x",
                &["system:serviceaccounts", "system:authenticated"],
            ),
            None,
            created(&["b"]),
            NotMatched,
        ),
    ]
}

#[test]
fn the_shipped_cel_and_the_doubles_model_give_each_case_its_verdict() {
    let p = policy();
    let mut wrong = Vec::new();
    for c in cases() {
        let got = verdict(&p, c.name, &c.user, c.old.as_ref(), &c.new);
        let ok = match (&c.want, &got) {
            (Want::NotMatched, Verdict::NotMatched) | (Want::Allowed, Verdict::Allowed) => true,
            (Want::Denied(want), Verdict::Denied(failed)) => {
                want.len() == failed.len()
                    && want.iter().all(|w| failed.iter().any(|f| f.contains(w)))
            }
            _ => false,
        };
        if !ok {
            wrong.push(format!("{}: {got:?}", c.name));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every version of the Lease that nodectl's LeaseLock wrote in a run of acquires, renewals,
/// reclaims and releases by three nodes, replayed through the shipped CEL with its writer (the
/// one node whose entry changed): every write allowed, the model agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_nodectl_makes_passes_the_shipped_cel() {
    let api = two_holders().await;
    let lock = |n: &'static str| {
        let api = &api;
        async move { LeaseLock::new(node_client(api, n).await, NS, "default") }
    };
    let (a, b, c) = (lock("a").await, lock("b").await, lock("c").await);
    // a renews; c reclaims both (stale) and takes a slot; a, b and c release.
    a.modify(|s| s.acquire("id-a", "a", "boot", 300, 2))
        .await
        .unwrap();
    let (got, _) = c
        .modify(|s| {
            // (seen at 0 of c's clock, unchanged at 61: stale)
            let mut seen = Sightings::default();
            s.clone().reclaim(&mut seen, 0, 60);
            s.reclaim(&mut seen, 61, 60);
            s.acquire("id-c", "c", "boot", 10_000, 2)
        })
        .await
        .unwrap();
    assert_eq!(got, Acquire::Obtained);
    for (n, l) in [("a", &a), ("b", &b), ("c", &c)] {
        l.modify(|s| s.release(n)).await.unwrap();
    }
    let history = api.lease_history();
    assert!(history.len() >= 7, "{history:#?}");
    let p = policy();
    let entries = |l: &Value| {
        l["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let mut old: Option<&Value> = None;
    for new in &history {
        let (was, now) = (old.map(entries).unwrap_or_default(), entries(new));
        let writers: Vec<&String> = was
            .keys()
            .chain(now.keys())
            .filter(|k| was.get(*k) != now.get(*k))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let [writer] = writers[..] else {
            panic!("one entry per write: {writers:?}");
        };
        let who = node(
            writer
                .strip_suffix(nodectl::reboot::lease::ENTRY_SUFFIX)
                .unwrap(),
        );
        assert_eq!(
            verdict(&p, writer, &who, old, new),
            Verdict::Allowed,
            "{old:#?}\n{new:#?}"
        );
        old = Some(new);
    }
    assert!(entries(old.unwrap()).is_empty(), "all released");
}

/// The binding applies the policy to the nodectl-reboot namespace, as the double does, and the
/// policy to creating and updating Leases; a failing expression denies (failurePolicy Fail).
#[test]
fn the_policy_is_bound_to_the_reboot_namespace_and_fails_closed() {
    let docs = shipped();
    let vap = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap();
    assert_eq!(vap["spec"]["failurePolicy"], "Fail");
    let rules = &vap["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(rules[0]["resources"], json!(["leases"]));
    assert_eq!(rules[0]["operations"], json!(["CREATE", "UPDATE"]));
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .unwrap();
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(
        binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            ["kubernetes.io/metadata.name"],
        NS
    );
}
