//! A one-node cluster of real components (`scripts/real-cluster.sh`):
//! kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kube-proxy,
//! CoreDNS, a kubelet with containerd and runc, CNI bridge; in a network namespace and
//! a mount namespace of its own, so every packet stays inside the namespace
//! the test made. The test talks to it with kubectl, run inside that network
//! namespace ([`Cluster::sh`]). Dropping the value stops the cluster and
//! undoes everything it did to the machine.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Output, Stdio},
    sync::mpsc,
    time::Duration,
};

use super::{env::Need, tools};

/// What a cluster needs on this machine, with how to get it.
pub fn needs() -> Vec<Need> {
    let how = "scripts/go-tools.sh (kube-1.35, node-1.35, containerd-2.4, etcd-3.6, coredns)";
    let mut n = vec![Need::Root, Need::Program("runc", "apt-get install runc")];
    n.push(Need::Program("iptables", "apt-get install iptables"));
    n.push(Need::Program("sysctl", "apt-get install procps"));
    n.push(Need::Program("gcc", "apt-get install gcc libc6-dev (the static pause)"));
    n.push(Need::File(
        "/sys/fs/cgroup/pids".into(),
        "cgroup v1 hierarchies: scripts/real-cluster.sh is written for the cgroup v1 hosts CI runs on",
    ));
    n.push(Need::Program("buildah", "apt-get install buildah"));
    n.push(Need::File("/usr/lib/cni/bridge".into(), "apt-get install containernetworking-plugins"));
    for (t, b) in [
        ("kube-1.35", "kube-apiserver"),
        ("kube-1.35", "kubectl"),
        ("node-1.35", "kubelet"),
        ("node-1.35", "kube-controller-manager"),
        ("node-1.35", "kube-scheduler"),
        ("node-1.35", "kube-proxy"),
        ("containerd-2.4", "containerd"),
        ("etcd-3.6", "etcd"),
        ("containerd-2.4", "ctr"),
        ("containerd-2.4", "containerd-shim-runc-v2"),
        ("coredns", "coredns"),
    ] {
        n.push(Need::File(tools::go_bin(t, b), how));
    }
    n
}

/// A running cluster.
pub struct Cluster {
    pub dir: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Keep the directory (its logs) when stopped: a failed start.
    keep: bool,
}

impl Cluster {
    /// Starts a cluster in a fresh directory named after `name`, with the
    /// image archives `images` (docker-archive files) loaded into its
    /// containerd, and waits until its node is Ready.
    pub fn up(name: &str, images: &[PathBuf]) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("hcp-rc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("images")).map_err(|e| e.to_string())?;
        for (i, img) in images.iter().enumerate() {
            std::fs::copy(img, dir.join("images").join(format!("image-{i}.tar")))
                .map_err(|e| format!("copy {}: {e}", img.display()))?;
        }
        let mut child = Command::new(super::root().join("scripts/real-cluster.sh"))
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn real-cluster.sh: {e}"))?;
        let stdin = child.stdin.take();
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut me = Self { dir, child, stdin, keep: false };
        let why = match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(line) if line.trim() == "ready" => return Ok(me),
            Ok(line) => format!("real-cluster.sh did not start (printed {line:?})"),
            Err(_) => "real-cluster.sh not ready in 300 s".to_string(),
        };
        // Stopped when returned; its logs stay for the message.
        me.keep = true;
        Err(format!("{why}; logs in {}", me.logs()))
    }

    /// The components' logs, for a failure message.
    pub fn logs(&self) -> String {
        self.dir.join("logs").display().to_string()
    }

    /// Runs a POSIX shell script inside the cluster's network namespace, in
    /// `cwd`, with kubectl (1.35) and `hcp-etcd-admission` first on PATH and
    /// the admin's KUBECONFIG.
    pub fn sh(&self, cwd: &Path, script: &str) -> Output {
        let path = format!(
            "{}:{}:{}",
            tools::tool_dir("kube-1.35").display(),
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(super::root().join("scripts/real-cluster.sh"))
            .arg("exec")
            .arg(&self.dir)
            .args(["env", &format!("PATH={path}"), "sh", "-ec", script])
            .current_dir(cwd)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run a script in the cluster: {e}"))
    }

    /// [`Cluster::sh`] that must succeed; its stdout.
    pub fn must(&self, cwd: &Path, script: &str) -> String {
        let out = self.sh(cwd, script);
        assert!(
            out.status.success(),
            "script failed ({}):\n{script}\n--- stdout\n{}\n--- stderr\n{}\n(cluster logs in {})",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Cluster {
    /// HyperShift's CRDs as this project meets them: the HCPEtcdBackup one
    /// generated here, open HostedCluster/HostedControlPlane ones (only this
    /// project's rules judge them), Established.
    pub fn hypershift_crds(&self, work: &Path) {
        let crd = |kind: &str, plural: &str| {
            format!(
                r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{{"name":"{plural}.hypershift.openshift.io"}},
"spec":{{"group":"hypershift.openshift.io","scope":"Namespaced",
"names":{{"kind":"{kind}","plural":"{plural}","singular":"{s}","listKind":"{kind}List"}},
"versions":[{{"name":"v1beta1","served":true,"storage":true,"subresources":{{"status":{{}}}},
"schema":{{"openAPIV3Schema":{{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}}]}}}}"#,
                s = kind.to_ascii_lowercase()
            )
        };
        std::fs::write(work.join("hc-crd.json"), crd("HostedCluster", "hostedclusters")).expect("write");
        std::fs::write(work.join("hcp-crd.json"), crd("HostedControlPlane", "hostedcontrolplanes")).expect("write");
        let backup_crd = super::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml");
        self.must(
            work,
            &format!(
                "kubectl apply -f hc-crd.json -f hcp-crd.json -f '{}'\n\
                 kubectl wait --for=condition=Established --timeout=60s crd --all",
                backup_crd.display()
            ),
        );
    }
}

impl Drop for Cluster {
    /// Stops the cluster (closing the script's stdin) and removes its
    /// directory, kept after a failure for its logs.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
        if !self.keep && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The directory of the `hcp-etcd-admission` binary cargo built for the tests.
pub fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hcp-etcd-admission")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The project's image (`scripts/build-image.sh`), as a docker-archive file
/// in `dir`, exported from the buildah storage the build script uses.
pub fn project_image(dir: &Path) -> Result<(PathBuf, String), String> {
    let version = env!("CARGO_PKG_VERSION");
    let tag = format!("quay.io/hcp-etcd-admission/hcp-etcd-admission:{version}");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| tools::cache_dir().join("target"));
    let store = target.join("buildah");
    let out = dir.join("hcp-etcd-admission.tar");
    let _ = std::fs::remove_file(&out);
    let status = Command::new("buildah")
        .arg("--root")
        .arg(store.join("root"))
        .arg("--runroot")
        .arg(store.join("run"))
        .args(["--storage-driver", "vfs", "push", "--quiet", &tag])
        .arg(format!("docker-archive:{}:{tag}", out.display()))
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!(
            "the image {tag} is not in {} (scripts/build-image.sh builds it; scripts/test.sh runs it before the tests)",
            store.display()
        ));
    }
    Ok((out, tag))
}
