//! Every `kind` the FleetLock endpoint answers with ([`super::KINDS`]).

/// Every `kind` this endpoint answers with, and when (docs/reboot.md lists them too).
pub const KINDS: &[(&str, u16, &str)] = &[
    (
        "not_found",
        404,
        "a path other than /v1/pre-reboot and /v1/steady-state",
    ),
    ("method_not_allowed", 405, "a method other than POST"),
    (
        "missing_header",
        400,
        "no `fleet-lock-protocol: true` header",
    ),
    ("decode_error", 400, "the body is not the protocol's JSON"),
    (
        "payload_too_large",
        413,
        "a declared Content-Length over 64 KiB (refused before reading)",
    ),
    ("timeout", 408, "the body did not arrive within 5 s"),
    ("invalid_id", 400, "client_params.id is empty"),
    (
        "invalid_group",
        400,
        "client_params.group does not match ^[a-zA-Z0-9.-]+$",
    ),
    (
        "wrong_node",
        403,
        "the id is not this node's (the endpoint serves its own node only)",
    ),
    (
        "forbidden_peer",
        403,
        "the connection is not from a user in reboot.fleetlock_users (Zincati's); the body is not read",
    ),
    (
        "group_not_served",
        403,
        "client_params.group is not reboot.group",
    ),
    (
        "reboot_pending",
        423,
        "steady-state in the boot the slot was granted in, before reboot.abandon_after_secs: slot kept",
    ),
    (
        "lock_held",
        423,
        "every slot of the group is held (value: by whom)",
    ),
    (
        "outside_window",
        423,
        "no reboot window is open now (reboot.windows)",
    ),
    ("blocked", 423, "a gate holds the node back (value: which pods or alerts)"),
    ("settling", 423, "a slot is free; the group settles after a release"),
    ("pre_check_failed", 423, "a pre-reboot check failed: slot released, backing off"),
    (
        "in_progress",
        423,
        "an earlier pre-reboot request of this node is still under way (its checks, its drain)",
    ),
    ("post_check_failed", 423, "a post-reboot check failed: slot kept"),
    ("held", 423, "this node holds its slot for maintenance (nodectl reboot hold)"),
    (
        "draining",
        423,
        "slot held, the node is still being drained",
    ),
    (
        "not_ready",
        423,
        "steady-state before kubelet is active and the Node Ready: slot kept",
    ),
    (
        "internal_error",
        500,
        "the API server or the agent failed (value: why)",
    ),
];
