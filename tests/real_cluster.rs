//! The README's install, upgrade and uninstall, run **as written** on a
//! one-node cluster of real components (`scripts/real-cluster.sh`: a real
//! kubelet runs the project's own image with containerd and runc; the
//! StatefulSet/Deployment controllers, scheduler and kube-proxy are real).
//!
//! The command blocks are read out of README.md at run time and run by `sh`
//! unchanged, inside the cluster's network namespace, so a README edit that
//! breaks an install step fails here. What the README leaves to the reader
//! (the overlay `my-overlay/` its comments describe, HyperShift's CRDs and
//! operator namespace being there already) is made by the test, as those
//! comments say.
//!
//! The apiserver reaches the webhook the way it does in production: through
//! the Service (`--enable-aggregator-routing`: the Service's endpoints, the
//! pod IPs on the cluster's bridge), with the caBundle the README's
//! `certs --patch-out` wrote. Every packet stays in the network namespace
//! the cluster made.
//!
//! Not run here, and why: the OpenShift block (service-ca and the
//! restricted-v2 SCC are OpenShift's; rendering and the SCC's rules are
//! checked in tests/manifests.rs) and `webhooks/install/kubernetes` (it
//! needs cert-manager; rendering is checked there too).

mod common;

use std::{path::Path, time::Instant};

use common::cluster::{self, Cluster};

/// The first ```sh block after the text `marker` of README.md.
fn readme_block(marker: &str) -> String {
    readme_block_of(marker, "```sh\n")
}

/// The first block opened by `fence` after the text `marker` of README.md.
fn readme_block_of(marker: &str, fence: &str) -> String {
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README.md");
    let start = readme.find(marker).unwrap_or_else(|| panic!("README.md no longer says {marker:?}"));
    let rest = &readme[start..];
    let open = rest.find(fence).unwrap_or_else(|| panic!("no {fence:?} block after {marker:?}")) + fence.len();
    let len = rest[open..].find("```").expect("an unclosed block");
    rest[open..open + len].to_string()
}

/// The inline command (between backticks) of README.md that starts with
/// `start` after the text `marker`, its line breaks read as spaces.
fn readme_inline_after(marker: &str, start: &str) -> String {
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README.md");
    let at = readme.find(marker).unwrap_or_else(|| panic!("README.md no longer says {marker:?}"));
    let rest = &readme[at..];
    let open = rest.find(start).unwrap_or_else(|| panic!("no {start:?} after {marker:?}")) + 1;
    let len = rest[open..].find('`').expect("an unclosed inline command");
    rest[open..open + len].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `to` relative to `from` (kustomize wants relative paths).
fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out: Vec<String> = std::iter::repeat_n("..".to_string(), f.len() - common).collect();
    out.extend(t[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    out.join("/")
}

/// The overlay the README's "make the certificates yourself" block names,
/// as its comments describe it: `workload` = base + components/kubernetes,
/// `registration` = webhooks/registration + the `ca-bundle` Component that
/// `certs --patch-out` writes. `settings` (when given) replaces the base's
/// settings file (the README's Roll out section: the `enforcement` block).
fn write_overlay(work: &Path, settings: Option<&str>) {
    let webhooks = common::root().join("webhooks");
    let wl = work.join("my-overlay/workload");
    let reg = work.join("my-overlay/registration");
    std::fs::create_dir_all(&wl).unwrap();
    std::fs::create_dir_all(&reg).unwrap();
    let mut k = format!(
        "resources: [{}]\ncomponents: [{}]\n",
        relative(&wl, &webhooks.join("base")),
        relative(&wl, &webhooks.join("components/kubernetes"))
    );
    if let Some(s) = settings {
        std::fs::write(wl.join("settings.yaml"), s).unwrap();
        k.push_str(
            "configMapGenerator:\n  - name: hcp-etcd-admission-settings\n    namespace: hcp-etcd-admission\n    behavior: replace\n    files: [settings.yaml]\n",
        );
    }
    std::fs::write(wl.join("kustomization.yaml"), k).unwrap();
    std::fs::write(
        reg.join("kustomization.yaml"),
        format!("resources: [{}]\ncomponents: [../ca-bundle]\n", relative(&reg, &webhooks.join("registration"))),
    )
    .unwrap();
}

/// What HyperShift has installed before this project: its CRDs (the
/// HCPEtcdBackup one generated here, open HostedCluster/HostedControlPlane
/// ones) and the operator's namespace.
fn hypershift_is_installed(c: &Cluster, work: &Path) {
    c.hypershift_crds(work);
    c.must(work, "kubectl create namespace hypershift\nkubectl create namespace clusters");
}

/// A HostedCluster or HostedControlPlane (`kind`) in `ns` whose managed etcd
/// restores from `url`: only this project's rules judge it (the CRDs here
/// are open).
fn hypershift_object(kind: &str, name: &str, ns: &str, url: &str) -> String {
    format!(
        "apiVersion: hypershift.openshift.io/v1beta1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  etcd:\n    managementType: Managed\n    managed:\n      storage:\n        type: PersistentVolume\n        \
         restoreSnapshotURL: [\"{url}\"]\n"
    )
}

/// `s3://` (rule `restore-url-s3-scheme`).
const S3_URL: &str = "s3://bucket/snapshot.db";
/// A presigned URL that expired in 2020 (rule `restore-url-expired`).
const EXPIRED_URL: &str = "https://bucket.s3.us-east-1.amazonaws.com/snapshot.db?X-Amz-Algorithm=AWS4-HMAC-SHA256\
&X-Amz-Credential=AKIAEXAMPLE%2F20200101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20200101T000000Z\
&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=0123456789abcdef";

/// `kubectl create --dry-run=server -f FILE`: whether it was allowed, and
/// what kubectl printed (the denial on stderr, warnings on stderr).
fn try_create(c: &Cluster, work: &Path, file: &str) -> (bool, String) {
    let out = c.sh(work, &format!("kubectl create --dry-run=server -f {file}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Calls `try_create(file)` until `want(allowed, text)` holds (at most 60 s:
/// a new registration or the last old replica's endpoint takes the
/// apiserver a moment to drop), and returns the last answer.
fn eventually(c: &Cluster, work: &Path, file: &str, want: impl Fn(bool, &str) -> bool, what: &str) -> (bool, String) {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (allowed, text) = try_create(c, work, file);
        if want(allowed, &text) {
            return (allowed, text);
        }
        assert!(Instant::now() < deadline, "{what}: still, after 60 s:\n{text}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Whether `text` is this project's denial of the HostedCluster as kubectl
/// prints it: the webhook's Invalid status with causes, shown as
/// `The HostedCluster "NAME" is invalid: FIELD: Invalid value: ... (rule ID)`
/// (only this project's rules carry `(rule ID)`; the CRD here is open).
fn denied_by(text: &str, rule: &str) -> bool {
    text.contains("The HostedCluster \"")
        && text.contains("is invalid: spec.etcd.managed.storage.restoreSnapshotURL[0]: Invalid value:")
        && text.contains(&format!("(rule {rule})"))
}

/// The base settings with their `enforcement` block replaced by `block`
/// (the README's Roll out block, as written).
fn settings_with(block: &str) -> String {
    let base = std::fs::read_to_string(common::root().join("webhooks/base/settings.yaml")).unwrap();
    let mut out = String::new();
    let mut skipping = false;
    for line in base.lines() {
        if line.starts_with("enforcement:") {
            skipping = true;
            continue;
        }
        if skipping && (line.starts_with(' ') || line.is_empty()) {
            continue;
        }
        skipping = false;
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(block);
    out
}

#[test]
fn readme_install_upgrade_and_uninstall_run_as_written_on_a_real_node() {
    let mut needs = cluster::needs();
    needs.push(common::env::Need::Root);
    if !common::env::ready("real_cluster", &needs) {
        return;
    }
    let work = std::env::temp_dir().join(format!("hcp-rc-work-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let (image, tag) = cluster::project_image(&work).unwrap_or_else(|e| panic!("{e}"));
    let c = Cluster::up("install", &[image]).unwrap_or_else(|e| panic!("{e}"));
    hypershift_is_installed(&c, &work);
    for (file, name, ns, url) in [
        ("s3.yaml", "s3-scheme", "clusters", S3_URL),
        ("expired.yaml", "expired-url", "clusters", EXPIRED_URL),
        ("sandbox-s3.yaml", "s3-scheme", "clusters-sandbox", S3_URL),
    ] {
        std::fs::write(work.join(file), hypershift_object("HostedCluster", name, ns, url)).unwrap();
    }
    c.must(&work, "kubectl create namespace clusters-sandbox");

    // --- Install (Kubernetes, certificates made by hand), as written.
    write_overlay(&work, None);
    let install = readme_block("Without cert-manager or service-ca, make the certificates yourself");
    assert!(install.contains("certs --out certs --patch-out my-overlay/ca-bundle"), "{install}");
    let t0 = Instant::now();
    c.must(&work, &install);
    eprintln!("install block ran in {:?}", t0.elapsed());
    let ready = c.must(
        &work,
        "kubectl -n hcp-etcd-admission get deployment hcp-etcd-admission -o jsonpath='{.status.readyReplicas}/{.spec.replicas} {.spec.template.spec.containers[0].image}'",
    );
    assert_eq!(ready.trim(), format!("2/2 {tag}"), "both replicas of the image under test are Ready");
    let ca_b64 = {
        let ca = std::fs::read(work.join("certs/ca.crt")).expect("certs/ca.crt written by the README's certs step");
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(ca)
    };
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let bundles = c.must(
            &work,
            &format!(
                "kubectl get {kind} hcp-etcd-admission -o jsonpath='{{range .webhooks[*]}}{{.name}}={{.clientConfig.caBundle}}{{\"\\n\"}}{{end}}'"
            ),
        );
        let lines: Vec<&str> = bundles.lines().collect();
        assert!(lines.len() >= 2, "{kind}: its webhooks: {bundles}");
        for l in lines {
            let (name, bundle) = l.split_once('=').unwrap_or((l, ""));
            assert_eq!(bundle, ca_b64, "{kind} {name} carries the CA `certs` made");
        }
    }

    // The apiserver calls the pods through the Service: the webhook's answers,
    // in deny mode (the default).
    for file in ["s3.yaml", "expired.yaml", "sandbox-s3.yaml"] {
        eventually(&c, &work, file, |allowed, _| !allowed, &format!("{file} is denied once installed"));
    }
    let (_, text) = try_create(&c, &work, "s3.yaml");
    assert!(denied_by(&text, "restore-url-s3-scheme"), "the denial is this webhook's:\n{text}");
    let (_, text) = try_create(&c, &work, "expired.yaml");
    assert!(denied_by(&text, "restore-url-expired"), "the denial is this webhook's:\n{text}");
    assert!(!text.contains("X-Amz-Signature"), "a presigned URL's query is never echoed:\n{text}");

    // --- Before an upgrade: "not while a restore is pending", checked across
    // the fleet both ways the README gives, as written.
    std::fs::write(
        work.join("pending-hcp.yaml"),
        hypershift_object("HostedControlPlane", "pending", "clusters", "https://bucket.s3.amazonaws.com/snapshot.db"),
    )
    .unwrap();
    c.must(&work, "kubectl create -f pending-hcp.yaml");
    let audit = readme_inline_after("across a fleet:", "`kubectl get hostedcontrolplanes");
    assert!(audit.ends_with("check --audit"), "{audit}");
    let out = c.sh(&work, &audit);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "nothing in the fleet is denied: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("HostedControlPlane/clusters/pending: allowed\n  restore pending:")
            && text.contains("1 restore pending"),
        "the README's fleet check names the pending restore:\n{text}"
    );
    let metric = "hcp_etcd_admission_restores_pending 1";
    let scrape = "for p in $(kubectl -n hcp-etcd-admission get pods -o name); do \
        kubectl get --raw \"/api/v1/namespaces/hcp-etcd-admission/pods/${p#pod/}:8080/proxy/metrics\"; done";
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let scraped = String::from_utf8_lossy(&c.sh(&work, scrape).stdout).into_owned();
        if scraped.matches(metric).count() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "both replicas report {metric}:\n{scraped}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    c.must(&work, "kubectl delete -f pending-hcp.yaml");

    // --- Roll out (the README's enforcement block, as written) as an upgrade,
    // as the README says: the new workload, rollout status, then the
    // registrations. Every call during the rolling update is answered (PDB,
    // maxUnavailable 0, drain): never "failed calling webhook".
    let rollout = readme_block_of("## Roll out: warn, then deny", "```yaml\n");
    assert!(rollout.starts_with("enforcement:"), "{rollout}");
    write_overlay(&work, Some(&settings_with(&rollout)));
    c.must(&work, "kubectl apply -k my-overlay/workload");
    // The README's `rollout status` runs on a thread of its own while this
    // one sends calls back to back (bounded: until it returns, at most 300 s),
    // through the old replicas' drain and the new ones' start.
    let (mut answered, mut denied, mut warned) = (0, 0, 0);
    let rolled = std::thread::scope(|scope| {
        let status = scope.spawn(|| {
            c.sh(&work, "kubectl -n hcp-etcd-admission rollout status deployment/hcp-etcd-admission --timeout=5m")
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(300);
        while !status.is_finished() && Instant::now() < deadline {
            let (allowed, text) = try_create(&c, &work, "expired.yaml");
            assert!(
                !text.contains("failed calling webhook") && !text.contains("Internal error"),
                "a call during the rolling update was not answered:\n{text}"
            );
            if allowed {
                assert!(text.contains("(rule restore-url-expired)"), "a new replica warns:\n{text}");
                warned += 1;
            } else {
                assert!(denied_by(&text, "restore-url-expired"), "an old replica denies:\n{text}");
                denied += 1;
            }
            answered += 1;
        }
        status.join().expect("the rollout status thread")
    });
    assert!(rolled.status.success(), "rollout status: {}", String::from_utf8_lossy(&rolled.stderr));
    c.must(&work, "kubectl apply -k my-overlay/registration");
    eprintln!(
        "{answered} calls answered during the rolling update ({denied} by old replicas, {warned} by new), none failed"
    );
    assert!(answered >= 3, "calls were sent during the rolling update ({answered})");
    // mode: warn: the same text as a warning; the rule named `deny` still
    // denies; the exempt namespace is allowed, silently.
    eventually(
        &c,
        &work,
        "expired.yaml",
        |allowed, text| allowed && text.contains("Warning:") && text.contains("(rule restore-url-expired)"),
        "mode warn: allowed with the denial's text as a warning",
    );
    let (allowed, text) = try_create(&c, &work, "s3.yaml");
    assert!(!allowed && denied_by(&text, "restore-url-s3-scheme"), "a rule named deny still denies:\n{text}");
    eventually(
        &c,
        &work,
        "sandbox-s3.yaml",
        |allowed, text| allowed && !text.contains("Warning:"),
        "an exempt namespace is allowed, silently",
    );

    // --- Uninstall, as written: registrations first (the block's own `# or:`
    // for any install), then the workload (the block's line, the overlay's path).
    let uninstall = readme_block("**Uninstall** in the reverse order");
    let registrations = uninstall
        .lines()
        .find_map(|l| l.split_once("# or: ").map(|(_, alt)| alt.trim().to_string()))
        .expect("the uninstall block's `# or:` alternative");
    c.must(&work, &registrations);
    // The block's workload line, with this install's overlay for its path.
    let workload = uninstall
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .find(|l| l.starts_with("kubectl delete -k") && l.ends_with("/workload"))
        .expect("the uninstall block's workload line");
    let (verb, _) = workload.rsplit_once(' ').expect("a path");
    c.must(&work, &format!("{verb} my-overlay/workload"));
    eventually(
        &c,
        &work,
        "s3.yaml",
        |allowed, text| allowed && !text.contains("Warning:"),
        "nothing judges once uninstalled",
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&work);
}
