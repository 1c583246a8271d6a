//! The double's cluster objects kept in a file across its restarts (`Options::state_file`,
//! `--state FILE`): an API server outlives a node's reboot, and the double, run inside the VM
//! that reboots (tests/vm/suites/reboot.sh), does not. Kept: Leases, Nodes, pods and the
//! resourceVersion counter; not kept: CSRs, Events, watches, the request log. Written after
//! every request that may write (a temp file beside it, fsync, rename), read at start.

use std::io::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use super::{Inner, State};

/// After a request that may have written: the objects to the state file, if there is one.
pub(super) fn after_write(inner: &Inner) {
    let Some(path) = inner.opts.lock().expect("opts").state_file.clone() else {
        return;
    };
    let snapshot = {
        let st = inner.state.lock().expect("state");
        json!({
            "rv": st.rv,
            "leases": st.leases.iter().map(|((ns, n), v)| json!([ns, n, v])).collect::<Vec<_>>(),
            "pods": st.pods.iter().map(|((ns, n), v)| json!([ns, n, v])).collect::<Vec<_>>(),
            "nodes": st.nodes,
        })
    };
    if let Err(e) = write(&path, &snapshot) {
        eprintln!(
            "apiserver-double: saving the state to {}: {e}",
            path.display()
        );
    }
}

fn write(path: &Path, v: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(v.to_string().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The objects a state file holds, into `st` (a missing file: nothing).
pub(super) fn load(st: &mut State, path: &Path) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(anyhow::anyhow!("{}: {e}", path.display())),
    };
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not the double's state: {e}", path.display()))?;
    let keyed = |k: &str| -> anyhow::Result<Vec<((String, String), Value)>> {
        v[k].as_array()
            .into_iter()
            .flatten()
            .map(|e| match (e[0].as_str(), e[1].as_str()) {
                (Some(ns), Some(n)) => Ok(((ns.to_string(), n.to_string()), e[2].clone())),
                _ => Err(anyhow::anyhow!(
                    "{}: a {k} entry without its key",
                    path.display()
                )),
            })
            .collect()
    };
    st.leases = keyed("leases")?.into_iter().collect();
    st.pods = keyed("pods")?.into_iter().collect();
    if let Some(nodes) = v["nodes"].as_object() {
        st.nodes = nodes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    st.rv = st.rv.max(v["rv"].as_u64().unwrap_or(1));
    Ok(())
}
