//! The property the webhook must keep whatever it is sent, enforced where
//! the review measured it: the `serve` process inside a memory cgroup with
//! the Deployment's limit (384 MiB), fed generated hostile inputs for every
//! endpoint and shape from four attacker sources at once, while a victim
//! (127.0.0.1, the apiserver's place) sends real reviews. Asserted:
//!
//! * no OOM kill (the process answers to the end; the cgroup's OOM counter
//!   stays 0) and peak cgroup memory under [`PEAK_BOUND`];
//! * the server's CPU per input byte under [`CPU_NS_PER_BYTE`] (debug build;
//!   `scripts/adversarial.sh` runs the release binary at a larger scale and
//!   prints the numbers the README's sizing section states);
//! * every real review answered 200 (allowed) within the webhooks' 5 s.
//!
//! The shapes are the review's and the issue's: deep, wide, duplicate-heavy,
//! escape-heavy, many small objects, quadratic-bait lists and Secrets,
//! conflicting flags on the mutating path, each as an UPDATE (object and
//! oldObject, up to the 7 MiB body limit); plus answers nobody reads over
//! HTTP/1.1. Generated, not fixed: every shape's size is drawn per request
//! (a seeded generator, the seed printed) within the byte budget.
//!
//! Needs root and a writable cgroup v1 memory hierarchy (what this machine
//! has; skipped otherwise, failed under `HCP_REQUIRE_ALL_SUITES`).

mod common;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::https::Client;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// The Deployment's memory limit.
const LIMIT: u64 = 384 * 1024 * 1024;
/// Peak memory of the cgroup the property allows (the README's sizing).
const PEAK_BOUND: u64 = 320 * 1024 * 1024;
/// Server CPU per byte of hostile input, debug build (nanoseconds).
const CPU_NS_PER_BYTE: f64 = 2_000.0;
const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";

struct Cgroup(PathBuf);

impl Cgroup {
    fn new(tag: &str) -> Option<Self> {
        let dir = Path::new(CGROUP_ROOT).join(format!("hcp-adversarial-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("memory.limit_in_bytes"), LIMIT.to_string()).ok()?;
        // No swap to hide in (absent when the kernel has no swap accounting).
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), LIMIT.to_string());
        Some(Self(dir))
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }

    fn peak(&self) -> u64 {
        self.read("memory.max_usage_in_bytes").trim().parse().unwrap_or(0)
    }

    /// OOM kills in this cgroup (`oom_kill` of memory.oom_control), and
    /// whether the limit was hit at all (`memory.failcnt`).
    fn ooms(&self) -> (u64, u64) {
        let control = self.read("memory.oom_control");
        let kills =
            control.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        (kills, self.read("memory.failcnt").trim().parse().unwrap_or(0))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn cgroup_needs() -> Vec<common::env::Need> {
    vec![
        common::env::Need::Root,
        common::env::Need::File(
            PathBuf::from(CGROUP_ROOT).join("memory.limit_in_bytes"),
            "a cgroup v1 memory hierarchy at /sys/fs/cgroup/memory",
        ),
    ]
}

/// `serve` started inside the cgroup (it moves itself in before `exec`), on
/// an ephemeral loopback port, with the HostedControlPlane fixtures as its
/// context.
fn spawn_in(cg: &Cgroup, dir: &Path, context: &Path) -> (Child, SocketAddr) {
    let bin = std::env::var_os("HCP_ADVERSARIAL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_hcp-etcd-admission")));
    let script = format!("echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"", cg.0.display());
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", &script])
        .arg(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "never", "--dev-cert-dir"])
        .arg(dir)
        .arg("--context")
        .arg(context)
        .env("RUST_LOG", "warn");
    common::running::spawn_listening(cmd)
}

/// The process's CPU time (user + system), nanoseconds.
fn cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    ticks * 10_000_000
}

/// A small deterministic generator (xorshift), seeded per run.
use common::xorshift::XorShift as Gen;

/// One hostile review (path, body) of `shape`, about `size` bytes per object.
fn hostile(shape: usize, size: usize, g: &mut Gen, fx: &Value) -> (&'static str, Vec<u8>, &'static str) {
    let n = size / 8;
    let update = |resource: &str, obj: Value, uid: &str| {
        common::admission_review(uid, resource, None, "UPDATE", Some(&obj), Some(&obj)).to_string().into_bytes()
    };
    let mut b = fx["backup"].clone();
    match shape % 8 {
        // Many small objects (C1): 8 body bytes, ~674 heap bytes each before.
        0 => {
            b["spec"]["extra"] = Value::Array((0..n).map(|i| json!({"a": i % 10})).collect());
            ("/validate/hcpetcdbackups", update("hcpetcdbackups", b, "small-objects"), "many small objects")
        }
        // Wide: unknown fields, one warning each before the recorder's cap.
        1 => {
            let wide: serde_json::Map<String, Value> = (0..n / 2).map(|i| (format!("f{i}"), json!(0))).collect();
            b["spec"]["storage"]["s3"]["extra"] = Value::Object(wide);
            ("/validate/hcpetcdbackups", update("hcpetcdbackups", b, "wide"), "wide")
        }
        // Escape-heavy (M1's 10x answer): DEL in an enum field.
        2 => {
            b["spec"]["storage"]["storageType"] = json!("\u{7f}".repeat(size / 6));
            ("/validate/hcpetcdbackups", update("hcpetcdbackups", b, "escapes"), "escape-heavy")
        }
        // Duplicate-heavy, quadratic bait (C2): a restoreSnapshotURL list.
        3 => {
            let mut hc = fx["hc"].clone();
            let dup = g.below(2) == 0;
            hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] =
                Value::Array((0..n).map(|i| json!(if dup { "u".to_string() } else { format!("u{i:06}") })).collect());
            ("/validate/hostedclusters", update("hostedclusters", hc, "urls"), "quadratic-bait list")
        }
        // Quadratic bait (C2): a Secret with data and stringData keys.
        4 => {
            let mut s = fx["secret"].clone();
            let data: serde_json::Map<String, Value> = (0..n / 3).map(|i| (format!("k{i}"), json!("MA=="))).collect();
            let string_data: serde_json::Map<String, Value> =
                (0..n / 3).map(|i| (format!("s{i}"), json!("0"))).collect();
            s["data"] = Value::Object(data);
            s["stringData"] = Value::Object(string_data);
            ("/validate/etcd-backup-secrets", update("secrets", s, "secret"), "quadratic-bait Secret")
        }
        // Deep: nesting to just under the parser's limit, many times over.
        5 => {
            let mut deep = json!(0);
            for _ in 0..120 {
                deep = json!({"d": deep});
            }
            b["spec"]["extra"] = Value::Array(vec![deep; (size / 1000).max(1)]);
            ("/validate/hcpetcdbackups", update("hcpetcdbackups", b, "deep"), "deep")
        }
        // The mutating path: conflicting `--name` flags, copied env.
        6 => {
            let mut sts = fx["sts"].clone();
            let etcd = &mut sts["spec"]["template"]["spec"]["containers"][0];
            etcd["args"] = Value::Array((0..n / 2).map(|i| json!(format!("--name=m{i}"))).collect());
            ("/mutate/etcd-statefulsets", update("statefulsets", sts, "flags"), "conflicting flags")
        }
        _ => {
            let mut sts = fx["sts"].clone();
            let env = sts["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut().expect("env");
            for _ in 0..n / 4 {
                env.insert(0, json!({"name": "HOSTNAME", "value": "x"}));
            }
            ("/mutate/etcd-statefulsets", update("statefulsets", sts, "env"), "copied env")
        }
    }
}

fn fixtures() -> Value {
    let read = |f: &str| -> Value {
        serde_yaml_ng::from_str(&std::fs::read_to_string(common::root().join("tests/conformance").join(f)).expect(f))
            .expect("yaml")
    };
    let (sts, hc, pre) = (read("statefulset.yaml"), read("hostedcluster.yaml"), read("preflight.yaml"));
    json!({
        "sts": sts["fixtures"]["sts3"], "hcp": sts["fixtures"]["hcp"], "hc": hc["fixtures"]["hc"],
        "backup": pre["fixtures"]["s3"], "secret": pre["fixtures"]["secretsts"],
    })
}

/// Posts `body` on a fresh HTTP/1.1 connection from `src`; reads the answer
/// unless `unread` (then the connection is held until the server closes it).
async fn post_raw(client: &Client, addr: SocketAddr, src: IpAddr, path: &str, body: &[u8], unread: bool) -> u64 {
    use tokio::io::AsyncReadExt;
    let Ok(mut tls) =
        (if unread { client.connect_from_small_window(addr, src).await } else { client.connect_from(addr, src).await })
    else {
        return 0;
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if tls.write_all(head.as_bytes()).await.is_err() || tls.write_all(body).await.is_err() {
        return 0;
    }
    let _ = tls.flush().await;
    if unread {
        tokio::time::sleep(Duration::from_secs(8)).await;
        return body.len() as u64;
    }
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut sink)).await;
    body.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_on_every_endpoint_stay_inside_the_deployment_memory_limit() {
    if !common::env::ready("hostile_inputs_on_every_endpoint_stay_inside_the_deployment_memory_limit", &cgroup_needs())
    {
        return;
    }
    let scale: usize = std::env::var("HCP_ADVERSARIAL_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let seed = std::env::var("HCP_ADVERSARIAL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("adversarial harness: seed {seed}, scale {scale}");
    let Some(cg) = Cgroup::new("serve") else { panic!("cannot create a memory cgroup under {CGROUP_ROOT}") };
    let dir = std::env::temp_dir().join(format!("hcp-adversarial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let fx = fixtures();
    let context = dir.join("hcp.json");
    std::fs::write(&context, fx["hcp"].to_string()).expect("context");
    let (mut child, addr) = spawn_in(&cg, &dir, &context);
    let pid = child.id();
    let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("dev CA");
    let client = Arc::new(Client::new(&[&ca], None));
    let cpu_before = cpu_ns(pid);

    // The victim: a real review every 250 ms, each answered 200 within 5 s,
    // on a thread and runtime of its own (the attackers' generators must not
    // delay it: that would be the test's latency, not the server's).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let victim = {
        let (client, stop) = (client.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let (mut served, mut worst) = (0u32, Duration::ZERO);
                let review = common::running::small_review();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let call = client.post_json(addr, "/validate/hcpetcdbackups", &review);
                    let r = tokio::time::timeout(Duration::from_secs(5), call).await;
                    let took = started.elapsed();
                    match r {
                        Ok(Ok(r)) if r.status == 200 && r.json()["response"]["allowed"] == true => {}
                        other => {
                            return Err(format!(
                                "victim review {served} after {took:?}: {:?}",
                                other.map(|r| r.map(|r| (r.status, r.text())))
                            ))
                        }
                    }
                    served += 1;
                    worst = worst.max(took);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok((served, worst))
            })
        })
    };

    // Four attacker sources, four senders each; every sender draws shapes
    // and sizes until its byte budget is spent.
    let budget_per_sender: u64 = 8 * 1024 * 1024 * scale as u64;
    let sent = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    for s in 0..16u64 {
        let (client, fx, sent) = (client.clone(), fx.clone(), sent.clone());
        let src = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (s % 4) as u8));
        senders.push(tokio::spawn(async move {
            let mut g = Gen(seed.wrapping_add(s.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
            let mut spent = 0u64;
            while spent < budget_per_sender {
                let shape = g.below(8);
                let size = 64 * 1024 + g.below(3 * 1024 * 1024 - 64 * 1024);
                let seed = g.next();
                let fx = fx.clone();
                let built = tokio::task::spawn_blocking(move || hostile(shape, size, &mut Gen(seed | 1), &fx)).await;
                let Ok((path, body, _)) = built else { break };
                // One in six is left unread (answers nobody reads).
                let unread = g.below(6) == 0;
                let n = post_raw(&client, addr, src, path, &body, unread).await;
                spent += body.len() as u64;
                sent.fetch_add(n, Ordering::Relaxed);
            }
        }));
    }
    for s in senders {
        let _ = s.await;
    }
    stop.store(true, Ordering::Relaxed);
    let victim = victim.join().expect("victim thread");
    let alive = child.try_wait().expect("wait").is_none();
    let cpu = cpu_ns(pid).saturating_sub(cpu_before);
    let bytes = sent.load(Ordering::Relaxed).max(1);
    let (peak, (kills, failcnt)) = (cg.peak(), cg.ooms());
    eprintln!(
        "adversarial harness: {} MiB of hostile input; peak cgroup memory {} MiB (limit {} MiB, failcnt {failcnt}, OOM kills {kills}); server CPU {:.0} ns/byte ({:.1} s); victim {victim:?}",
        bytes / (1024 * 1024),
        peak / (1024 * 1024),
        LIMIT / (1024 * 1024),
        cpu as f64 / bytes as f64,
        cpu as f64 / 1e9
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(alive && kills == 0, "the server was killed (OOM kills {kills})");
    assert!(peak < PEAK_BOUND, "peak cgroup memory {} MiB over {} MiB", peak >> 20, PEAK_BOUND >> 20);
    assert!((cpu as f64 / bytes as f64) < CPU_NS_PER_BYTE, "{cpu} ns of CPU for {bytes} bytes");
    let (served, worst) = victim.unwrap_or_else(|e| panic!("{e}"));
    assert!(served >= 4, "the victim was served {served} times");
    assert!(worst < Duration::from_secs(5), "{worst:?}");
}
