//! `cri-run`: runs one pod through a container runtime's CRI, as kubelet does
//! (pkg/kubelet/kuberuntime: RunPodSandbox, CreateContainer, StartContainer), for the VM tier's
//! check of containerd with the config nodectl ships (tests/vm/suites/typhoon.sh T3).
//!
//! `cri-run SOCKET run NAME IMAGE SLICE UID CMD...`: a pod named NAME in the node's network
//! namespace (control-plane pods are hostNetwork: no CNI), its cgroup parent the systemd slice
//! SLICE (kubelet's form with the systemd driver, e.g. `kubepods-besteffort.slice`), one
//! container of IMAGE running CMD as UID; prints `sandbox ID`, `container ID`, `pid PID`.
//! `cri-run SOCKET remove SANDBOX`: stops and removes the pod.
//! Both are bounded: each call gives up after 60 s.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerStatusRequest, CreateContainerRequest, ImageSpec,
    Int64Value, LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StopPodSandboxRequest,
};
use tonic::transport::{Channel, Endpoint, Uri};

type Client = RuntimeServiceClient<Channel>;

async fn connect(socket: &str) -> Result<Client, Box<dyn std::error::Error>> {
    let socket = socket.to_string();
    let channel = Endpoint::try_from("http://[::]")?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await?;
    Ok(RuntimeServiceClient::new(channel))
}

/// The node's namespaces for network, as a hostNetwork pod's.
fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

async fn run(c: &mut Client, a: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [name, image, slice, uid, cmd @ ..] = a else {
        return Err("usage: run NAME IMAGE SLICE UID CMD...".into());
    };
    let uid: i64 = uid.parse()?;
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: format!("{name}-uid"),
            namespace: "kube-system".into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: format!("/var/log/pods/{name}"),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: slice.clone(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(host_network()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = c
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    println!("sandbox {sandbox}");
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.clone(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.clone(),
            ..Default::default()
        }),
        command: cmd.to_vec(),
        log_path: format!("{name}.log"),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                run_as_user: Some(Int64Value { value: uid }),
                namespace_options: Some(host_network()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let container = c
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        })
        .await?
        .into_inner()
        .container_id;
    println!("container {container}");
    c.start_container(StartContainerRequest {
        container_id: container.clone(),
    })
    .await?;
    let status = c
        .container_status(ContainerStatusRequest {
            container_id: container,
            verbose: true,
        })
        .await?
        .into_inner();
    // containerd's verbose info: {"pid": N, ...} under "info"
    let info: serde_json::Value =
        serde_json::from_str(status.info.get("info").map(String::as_str).unwrap_or("{}"))?;
    println!("pid {}", info["pid"]);
    Ok(())
}

async fn remove(c: &mut Client, sandbox: &str) -> Result<(), Box<dyn std::error::Error>> {
    let id = sandbox.to_string();
    c.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.clone(),
    })
    .await?;
    c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
        .await?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = async {
        let [socket, verb, rest @ ..] = args.as_slice() else {
            return Err(
                "usage: cri-run SOCKET run NAME IMAGE SLICE UID CMD... | remove SANDBOX".into(),
            );
        };
        let mut c = connect(socket).await?;
        match (verb.as_str(), rest) {
            ("run", a) => run(&mut c, a).await,
            ("remove", [sandbox]) => remove(&mut c, sandbox).await,
            _ => Err::<(), Box<dyn std::error::Error>>("unknown command".into()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(120), r).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("cri-run: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("cri-run: no answer in 120 s");
            std::process::exit(1);
        }
    }
}
