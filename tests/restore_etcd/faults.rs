//! Issue #28, part 4: seeded fault schedules over the real etcd-init,
//! upstream's reset-member and real etcd, checked against a recorded client
//! history.
//!
//! What etcd's robustness tests do for etcd itself (random failpoints and
//! crashes under a recorded client history, checked afterwards), done here
//! for the restore: a seeded schedule of pod starts in random order, crashes
//! (the container killed with everything it started, as the kubelet kills a
//! container's cgroup), volume losses, DNS failures, nodes that stay down
//! (late members), the presigned URL expiring and coming back, and a client
//! that writes throughout. The loop plays the kubelet: a pod that is down on
//! a node that is up gets its init containers again after a back-off
//! (etcd-init; then upstream's reset-member as [`RESET_MEMBER`] holds it,
//! with the `etcd-client` Service routing only to members that answer a
//! health check; then etcd with the state reset-member wrote).
//!
//! Half of a schedule's faults hit the restore, the other half the restored
//! cluster. Checked at every tick: never two cluster IDs among the members
//! that answer. Checked once the faults stop and the loop heals (nodes up, DNS
//! back, the URL served again): every member runs in one cluster (no
//! wedge), every key of the snapshot is there, every acknowledged write is
//! readable at the revision it was acknowledged with (the history a resumed
//! watch replays is intact), and acknowledged revisions only grow, above the
//! revision bump.
//!
//! A volume is lost only while etcd never ran on another volume (the restore
//! under way, restored members waiting included) or every member runs in
//! one healthy cluster: a second loss before the first rejoined is a quorum
//! loss, which a runbook recovers, not etcd-init (tests of their own). A
//! crash is of the pod (init containers again) or of the etcd container
//! alone (the kubelet restarts just that, with the pod's state), and etcd
//! exiting by itself is restarted the same way. The schedule's seed is printed; `HCP_FAULT_SEED`
//! replays one, `HCP_FAULT_SCHEDULES` and `HCP_FAULT_STEPS` make the run
//! longer (`scripts/restore-faults.sh`).

use super::common::xorshift::XorShift;
use super::*;

/// One pod of the StatefulSet, as the kubelet sees it.
enum Pod {
    /// Not running; the kubelet starts it at `at`: its init containers
    /// (`init`: a new pod, a node back), or only its etcd container (the
    /// container exited; the pod and its emptyDir state stay).
    Down { at: Instant, init: bool },
    /// etcd-init runs.
    Init(Child),
    /// etcd runs.
    Running(Proc),
}

/// A fault the schedule injects.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The pod dies (etcd-init or etcd, with its children) and comes back as
    /// a new pod: init containers first.
    Crash(usize),
    /// Only the etcd container is killed: the kubelet restarts it alone.
    ContainerCrash(usize),
    /// The pod dies and comes back on an empty volume.
    LoseVolume(usize),
    /// The node goes down with the pod and stays down until `NodeUp`.
    NodeDown(usize),
    NodeUp(usize),
    /// The pod's resolver knows only its own name from now on (or again all).
    Dns(usize, bool),
    /// The presigned URL answers 403 from now on (or serves again).
    Expire(bool),
    /// Time passes.
    Nothing,
}

/// One write the client saw acknowledged.
struct Ack {
    key: String,
    value: String,
    revision: u64,
}

struct Chaos {
    c: Cluster,
    rng: XorShift,
    pods: Vec<Pod>,
    held: Vec<bool>,
    dns_broken: Vec<bool>,
    own_hosts: Vec<PathBuf>,
    acked: Vec<Ack>,
    /// Where this incarnation's acknowledged writes start in `acked`.
    incarnation: usize,
    writes: u64,
    cluster: Option<u64>,
    trace: Vec<String>,
    last_log: Vec<String>,
    /// The state reset-member wrote for each pod (its emptyDir).
    state: Vec<String>,
    /// Whether etcd ever ran on each volume (cleared with the volume).
    ever_ran: Vec<bool>,
    started: Instant,
}

/// Kills the process group `pid` leads (the pod's container: the script and
/// everything it started, the beacon and a background download included).
fn kill_group(pid: u32) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
}

impl Drop for Chaos {
    fn drop(&mut self) {
        for p in &mut self.pods {
            if let Pod::Init(child) = p {
                kill_group(child.id());
                let _ = child.wait();
            }
        }
    }
}

impl Chaos {
    fn new(c: Cluster, seed: u64) -> Self {
        let n = c.members.len();
        let mut rng = XorShift(seed | 1);
        let now = Instant::now();
        // A random start order: the StatefulSet controller creates the pods
        // in parallel, the nodes start them when they can.
        let pods =
            (0..n).map(|_| Pod::Down { at: now + Duration::from_millis(rng.below(3000) as u64), init: true }).collect();
        let own_hosts = (0..n)
            .map(|i| {
                let p = c.root.join(format!("hosts-own-{i}"));
                let m = &c.members[i];
                let line = format!("127.0.0.1 localhost\n{} {}.{}.{}.svc\n", m.ip, m.name, c.service, c.ns);
                std::fs::write(&p, line).expect("hosts");
                p
            })
            .collect();
        Self {
            c,
            rng,
            pods,
            held: vec![false; n],
            dns_broken: vec![false; n],
            own_hosts,
            acked: Vec::new(),
            incarnation: 0,
            writes: 0,
            cluster: None,
            trace: Vec::new(),
            last_log: vec![String::new(); n],
            state: vec![String::new(); n],
            ever_ran: vec![false; n],
            started: now,
        }
    }

    fn note(&mut self, what: String) {
        self.trace.push(format!("{:>6.1}s {what}", self.started.elapsed().as_secs_f64()));
    }

    /// The schedule, the last etcd-init logs and each etcd's log tail: what a
    /// failure needs to be replayed and understood.
    fn report(&self) -> String {
        let mut out = format!("schedule:\n{}\n", self.trace.join("\n"));
        for (i, log) in self.last_log.iter().enumerate() {
            let tail: String = log.chars().rev().take(2500).collect::<Vec<_>>().into_iter().rev().collect();
            out.push_str(&format!("--- etcd-{i}'s last etcd-init:\n{tail}\n"));
            let etcd = std::fs::read_to_string(self.c.root.join(format!("etcd-{i}.log"))).unwrap_or_default();
            let tail: String =
                etcd.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            out.push_str(&format!("--- etcd-{i}'s etcd log (tail):\n{tail}\n"));
        }
        out
    }

    fn backoff(&mut self) -> Instant {
        Instant::now() + Duration::from_millis(500 + self.rng.below(1500) as u64)
    }

    /// The pod dies; `init`: it comes back as a new pod (init containers
    /// first), else only its etcd container restarts (when etcd ran).
    fn crash(&mut self, i: usize, init: bool) {
        let was_etcd = matches!(self.pods[i], Pod::Running(_));
        match std::mem::replace(&mut self.pods[i], Pod::Down { at: Instant::now(), init: true }) {
            Pod::Init(mut child) => {
                kill_group(child.id());
                let _ = child.wait();
            }
            Pod::Running(p) => drop(p),
            Pod::Down { .. } => {}
        }
        let at = self.backoff();
        self.pods[i] = Pod::Down { at, init: init || !was_etcd };
    }

    /// Client endpoints of the members whose etcd answers a health check
    /// (what the `etcd-client` Service routes to).
    fn ready(&self) -> Vec<usize> {
        (0..self.pods.len())
            .filter(|&i| matches!(self.pods[i], Pod::Running(_)))
            .filter(|&i| {
                ctl(
                    &self.c.e,
                    &self.c.endpoints[i],
                    &["--dial-timeout=1s", "--command-timeout=1s", "endpoint", "health"],
                )
                .status
                .success()
            })
            .collect()
    }

    /// Volume `i` is lost only while etcd never ran on any other volume (the
    /// restore is under way: the others hold at most this restore's
    /// snapshot, restored and waiting) or every member runs in one healthy
    /// cluster (module documentation).
    fn may_lose_volume(&self, i: usize) -> bool {
        let n = self.pods.len();
        (0..n).filter(|&j| j != i).all(|j| !self.ever_ran[j])
            || (self.ready().len() == n && self.started_members() == n)
    }

    fn started_members(&self) -> usize {
        let all = self.c.endpoints.join(",");
        let out = ctl(&self.c.e, &all, &["--dial-timeout=1s", "--command-timeout=2s", "member", "list"]);
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(", started, ")).count()
    }

    fn inject(&mut self, f: Fault) {
        match f {
            Fault::Crash(i) => self.crash(i, true),
            Fault::ContainerCrash(i) => self.crash(i, false),
            Fault::LoseVolume(i) => {
                self.crash(i, true);
                self.c.wipe(i);
                self.ever_ran[i] = false;
            }
            Fault::NodeDown(i) => {
                self.crash(i, true);
                self.held[i] = true;
            }
            Fault::NodeUp(i) => self.held[i] = false,
            Fault::Dns(i, broken) => self.dns_broken[i] = broken,
            Fault::Expire(gone) => self.c.store.expire(gone),
            Fault::Nothing => {}
        }
    }

    /// The next fault: any crash, DNS failure, node or URL change; a volume
    /// loss only where [`Self::may_lose_volume`] allows it; one node down
    /// at a time.
    fn choose(&mut self) -> Fault {
        let n = self.pods.len();
        let i = self.rng.below(n);
        match self.rng.below(10) {
            0 => Fault::Crash(i),
            1 => Fault::ContainerCrash(i),
            2 | 3 if self.may_lose_volume(i) => Fault::LoseVolume(i),
            9 => Fault::Crash(i),
            4 => match self.held.iter().position(|h| *h) {
                Some(j) => Fault::NodeUp(j),
                None => Fault::NodeDown(i),
            },
            5 => Fault::Dns(i, !self.dns_broken[i]),
            6 => Fault::Expire(self.rng.below(2) == 0),
            _ => Fault::Nothing,
        }
    }

    /// The kubelet: etcd-init that ended → reset-member and etcd, or a
    /// back-off; a pod whose back-off passed on a node that is up → etcd-init.
    fn kubelet(&mut self) {
        for i in 0..self.pods.len() {
            let exited = match &mut self.pods[i] {
                Pod::Init(child) => child.try_wait().ok().flatten().is_some(),
                Pod::Down { at, init } => {
                    if !self.held[i] && Instant::now() >= *at {
                        if *init {
                            let hosts =
                                if self.dns_broken[i] { self.own_hosts[i].clone() } else { self.c.hosts_file.clone() };
                            self.pods[i] = Pod::Init(self.c.spawn(i, &hosts));
                            let dns = if self.dns_broken[i] { " (its DNS knows only itself)" } else { "" };
                            self.note(format!("etcd-{i}: etcd-init starts{dns}"));
                        } else {
                            let state = self.state[i].clone();
                            self.pods[i] = Pod::Running(self.c.start(i, Some(&state)));
                            self.ever_ran[i] = true;
                            self.note(format!("etcd-{i}: its etcd container restarts ({state})"));
                        }
                    }
                    false
                }
                Pod::Running(p) => {
                    // etcd exited by itself: the kubelet restarts that
                    // container alone, after a back-off.
                    if let Ok(Some(status)) = p.0.try_wait() {
                        let at = Instant::now() + Duration::from_millis(1000);
                        self.pods[i] = Pod::Down { at, init: false };
                        self.note(format!("etcd-{i}: etcd exited by itself ({status})"));
                    }
                    false
                }
            };
            if exited {
                self.reap(i);
            }
        }
    }

    fn reap(&mut self, i: usize) {
        let Pod::Init(child) = std::mem::replace(&mut self.pods[i], Pod::Down { at: Instant::now(), init: true })
        else {
            return;
        };
        let out = child.wait_with_output().expect("etcd-init");
        self.last_log[i] = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = out.status.code().unwrap_or(-1);
        let msg = self.c.termination(i);
        let first = msg.lines().next().unwrap_or_default().chars().take(160).collect::<String>();
        self.note(format!("etcd-{i}: etcd-init exit {code}: {first}"));
        assert!(!self.last_log[i].contains("0badc0ffee"), "the presign signature was logged:\n{}", self.last_log[i]);
        if code != 0 {
            let at = self.backoff();
            self.pods[i] = Pod::Down { at, init: true };
            return;
        }
        let ready = self.ready();
        let service = if ready.is_empty() {
            // A Service without ready endpoints: nothing accepts the connection.
            "http://127.0.0.1:9".to_string()
        } else {
            ready.iter().map(|&j| self.c.endpoints[j].clone()).collect::<Vec<_>>().join(",")
        };
        let (code, out, state) = self.c.reset_member(i, &service);
        let said = out.lines().last().unwrap_or_default().to_string();
        self.note(format!("etcd-{i}: reset-member exit {code}: {said}; etcd starts ({state})"));
        if code != 0 {
            let at = self.backoff();
            self.pods[i] = Pod::Down { at, init: true };
            return;
        }
        self.pods[i] = Pod::Running(self.c.start(i, Some(&state)));
        self.state[i] = state;
        self.ever_ran[i] = true;
    }

    /// Never two cluster IDs among the members that answer.
    fn check_one_cluster(&mut self) {
        let mut ids = Vec::new();
        for i in 0..self.pods.len() {
            if !matches!(self.pods[i], Pod::Running(_)) {
                continue;
            }
            let out = ctl(
                &self.c.e,
                &self.c.endpoints[i],
                &["--dial-timeout=1s", "--command-timeout=1s", "endpoint", "status", "-w", "json"],
            );
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if let Some(id) = v[0]["Status"]["header"]["cluster_id"].as_u64() {
                ids.push((i, id));
            }
        }
        for &(i, id) in &ids {
            let first = *self.cluster.get_or_insert(id);
            assert_eq!(
                id,
                first,
                "etcd-{i} answers as cluster {id:x}, another member as {first:x}: two clusters\n{}",
                self.report()
            );
        }
    }

    /// One write through a random running member; recorded when acknowledged.
    fn write(&mut self) {
        let running: Vec<usize> = (0..self.pods.len()).filter(|&i| matches!(self.pods[i], Pod::Running(_))).collect();
        if running.is_empty() {
            return;
        }
        let i = running[self.rng.below(running.len())];
        self.writes += 1;
        let (key, value) = (format!("/registry/chaos/k{}", self.writes % 7), format!("w{}", self.writes));
        let out = ctl(
            &self.c.e,
            &self.c.endpoints[i],
            &["--dial-timeout=1s", "--command-timeout=2s", "put", &key, &value, "-w", "json"],
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let (true, Some(revision)) = (out.status.success(), v["header"]["revision"].as_u64()) {
            if let Some(last) = self.acked.last() {
                assert!(
                    revision > last.revision,
                    "acknowledged revisions went back: {} after {} (etcd-{i})\n{}",
                    revision,
                    last.revision,
                    self.report()
                );
            }
            self.acked.push(Ack { key, value, revision });
        }
    }

    /// Ticks for `d`: the kubelet, the one-cluster check, a write a second.
    fn run_for(&mut self, d: Duration) {
        let end = Instant::now() + d;
        let mut next_write = Instant::now();
        while Instant::now() < end {
            self.kubelet();
            self.check_one_cluster();
            if Instant::now() >= next_write {
                self.write();
                next_write = Instant::now() + Duration::from_millis(700);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// `n` faults, each followed by 0.3-2.5 s of ticks.
    fn faults(&mut self, n: usize) {
        for _ in 0..n {
            let f = self.choose();
            self.note(format!("fault: {f:?}"));
            self.inject(f);
            let d = Duration::from_millis(300 + self.rng.below(2200) as u64);
            self.run_for(d);
        }
    }

    /// Every member runs in one healthy cluster.
    fn settled(&self) -> bool {
        let n = self.pods.len();
        self.ready().len() == n && self.started_members() == n
    }

    /// The faults stop: nodes up, DNS back, the URL served again; the loop
    /// runs until every member is in one cluster (at most `budget`).
    fn heal(&mut self, budget: Duration) {
        self.note("heal: every node up, DNS back, the URL served".into());
        self.held.iter_mut().for_each(|h| *h = false);
        self.dns_broken.iter_mut().for_each(|d| *d = false);
        self.c.store.expire(false);
        let deadline = Instant::now() + budget;
        while !self.settled() {
            assert!(
                Instant::now() < deadline,
                "no cluster of every member {budget:?} after the faults stopped: a wedge\n{}",
                self.report()
            );
            self.run_for(Duration::from_secs(1));
        }
        let ids: Vec<u64> = self.c.endpoints.iter().map(|ep| cluster_id(&self.c.e, ep)).collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]), "settled with cluster IDs {ids:x?}\n{}", self.report());
        self.note("settled: every member started in one cluster".into());
    }

    /// A second restore of the same snapshot (issue #28, M5): a new
    /// HostedControlPlane, created now, with the same URL; every member
    /// stopped and wiped, the StatefulSet patched again. Its revisions must
    /// land above every revision the client saw acknowledged before (checked
    /// by [`Self::write`]); its cluster ID is another.
    fn second_restore(&mut self) {
        self.note("a second restore: a new HostedControlPlane, every volume replaced".into());
        for i in 0..self.pods.len() {
            self.crash(i, true);
            self.c.wipe(i);
            self.ever_ran[i] = false;
        }
        let created = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date");
        let mut hcp = hcp_with_uid(&self.c.ns, &presigned(&self.c.store), "9a4e6b1c-2d3f-4a5b-8c7d-0e1f2a3b4c5d");
        hcp["metadata"]["creationTimestamp"] = json!(String::from_utf8_lossy(&created.stdout).trim());
        self.c.sts =
            patched_for(&etcd_statefulset(&self.c.ns, self.pods.len(), Template::Env), &hcp, &settings_for(&self.c.e));
        self.cluster = None;
        self.incarnation = self.acked.len();
    }

    /// The client history against the final cluster.
    fn check_history(&self) {
        let e = &self.c.e;
        for ep in &self.c.endpoints {
            let out = ctl(e, ep, &["get", "--prefix", "/registry/test/", "--print-value-only", "--consistency=s"]);
            let got = String::from_utf8_lossy(&out.stdout);
            for k in 1..=5 {
                assert!(got.contains(&format!("value-{k}")), "{ep} lacks the snapshot's key{k}\n{}", self.report());
            }
        }
        // Every member's own history (serializable reads), each write at the
        // revision it was acknowledged with.
        for ep in &self.c.endpoints {
            for a in &self.acked[self.incarnation..] {
                let rev = a.revision.to_string();
                let out = ctl(e, ep, &["get", &a.key, "--rev", &rev, "--print-value-only", "--consistency=s"]);
                let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
                assert_eq!(
                    got,
                    a.value,
                    "{ep}: {} at revision {rev}: the acknowledged write is not in its history\n{}",
                    a.key,
                    self.report()
                );
            }
        }
        if bumps(e) {
            if let Some(first) = self.acked.get(self.incarnation) {
                assert!(
                    first.revision > 10_000_000_000,
                    "revision {} was not bumped\n{}",
                    first.revision,
                    self.report()
                );
            }
        }
    }
}

/// One schedule: half its faults while the restore runs, a heal, the other
/// half on the restored cluster (with the client writing), a heal, the
/// checks; then a second restore of the same snapshot for a new
/// HostedControlPlane under half as many faults, a heal, the checks again.
async fn schedule(e: Etcd, subnet: u8, seed: u64, steps: usize) -> usize {
    let c = Cluster::new(e.clone(), 3, subnet, Template::Env).await;
    let mut w = Chaos::new(c, seed);
    w.note(format!("etcd {}, seed {seed}, {steps} faults", e.label));
    for phase in [steps / 2, steps - steps / 2] {
        w.faults(phase);
        w.heal(Duration::from_secs(180));
    }
    w.check_history();
    if bumps(&e) {
        // The same snapshot again, for a new HostedControlPlane, under faults
        // of its own (etcd 3.4 and 3.5.1 have no bump: no floor either).
        w.second_restore();
        w.faults(steps / 2);
        w.heal(Duration::from_secs(180));
        for _ in 0..3 {
            w.write();
        }
        assert!(w.acked.len() > w.incarnation, "no write acknowledged after the second restore\n{}", w.report());
        w.check_history();
    }
    eprintln!("{}", w.trace.join("\n"));
    let acked = w.acked.len();
    let root = w.c.root.clone();
    drop(w);
    let _ = std::fs::remove_dir_all(root);
    acked
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The schedules of one run: `HCP_FAULT_SCHEDULES` (default 1) from
/// `HCP_FAULT_SEED` (default: from the clock, printed), each of
/// `HCP_FAULT_STEPS` faults (default 12).
pub(super) async fn run(e: Etcd, subnet: u8) {
    let schedules = env_num("HCP_FAULT_SCHEDULES", 1);
    let steps = env_num("HCP_FAULT_STEPS", 12) as usize;
    let seed0 = env_num("HCP_FAULT_SEED", unix_now().wrapping_mul(2_654_435_761));
    let started = Instant::now();
    let mut acked = 0;
    for k in 0..schedules {
        let seed = seed0.wrapping_add(k);
        eprintln!("== fault schedule {k}: etcd {}, HCP_FAULT_SEED={seed} HCP_FAULT_STEPS={steps}", e.label);
        acked += schedule(e.clone(), subnet, seed, steps).await;
    }
    eprintln!(
        "fault schedules on etcd {}: {schedules} x {steps} faults, {acked} acknowledged writes checked, nothing found, {:.0} s",
        e.label,
        started.elapsed().as_secs_f64()
    );
}
