//! Every actor's moves: the kubelet, etcd-init (the rules under test),
//! upstream's reset-member (as its script runs), etcd, the StatefulSet
//! controller, the control-plane-operator with the webhook, time, clients,
//! faults and the runbooks' steps.

use super::checker::Model;
use super::world::*;

/// The rules under test: each field is one fix; `Rules::OLD` is the code
/// the turn-4 review ran, `Rules::FIXED` every fix.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// C1, M3: hand off only to a healthy cluster whose member list, read
    /// as reset-member reads it (through the `etcd-client` Service), names
    /// this member.
    pub handoff_named: bool,
    /// M2: and only once that cluster has served past etcd's 5 s
    /// strict-reconfig window (two healthy answers 10 s apart).
    pub handoff_settled: bool,
    /// M1: the bump is in the restore's identity (token), and the webhook
    /// keeps the bump of a restore in progress whatever its setting now.
    pub bump_identity: bool,
    /// M5: the restored revision is at least the incarnation's floor.
    pub revision_floor: bool,
    /// M4: etcd-init leaves the template only when every replica is ready
    /// (the CPO sets `EtcdSnapshotRestored` in that reconcile) or the
    /// condition is set; never at a bare quorum.
    pub remove_when_all_ready: bool,
    /// M6: download and verify before waiting for the other members.
    pub download_first: bool,
    /// The model's own finding: reset-member writes `new` whenever its
    /// member list fails, so a quorum lost between the hand-off and
    /// reset-member (one crash) left the member outside for good. etcd-init
    /// joins the member itself (remove, add, a first sync), so reset-member
    /// finds data and does nothing.
    pub join_itself: bool,
    /// A fault schedule's finding (real etcd, after the model had the
    /// first sync as one step): a join resumes only from a staged WAL, and
    /// its local etcd always starts with `--initial-cluster-state
    /// existing`. A staged db without a WAL (the local etcd exited before
    /// it joined) was resumed without it: a one-member cluster of its own.
    pub resume_needs_wal: bool,
}

impl Rules {
    pub const OLD: Rules = Rules {
        handoff_named: false,
        handoff_settled: false,
        bump_identity: false,
        revision_floor: false,
        remove_when_all_ready: false,
        download_first: false,
        join_itself: false,
        resume_needs_wal: false,
    };
    /// What etcd-init.sh and the webhook do now. No settle wait before
    /// joining: a `member add` refused inside etcd's window fails the run
    /// and the kubelet's retry adds it (the stamp remembers the remove);
    /// `handoff_settled` is the fix the review proposed, kept to show M2.
    pub const FIXED: Rules = Rules {
        handoff_named: true,
        handoff_settled: false,
        bump_identity: true,
        revision_floor: true,
        remove_when_all_ready: true,
        download_first: true,
        join_itself: true,
        resume_needs_wal: true,
    };
}

/// What the environment may do, and how often.
#[derive(Clone, Copy, Debug, Default)]
pub struct Allow {
    pub crash: bool,
    pub lose_volume: bool,
    pub stop_all: bool,
    pub settings_change: bool,
    pub url_expiry: bool,
    /// Old runbook: start the survivor with `--force-new-cluster`.
    pub force_new_cluster: bool,
    /// Old runbook: `etcdctl member remove` a member, wipe it, let
    /// etcd-init hand off.
    pub member_remove: bool,
    /// The fixed runbooks (docs/restore.md): a member stuck outside the
    /// cluster is wiped and `member add`ed; a survivor without a quorum is
    /// the source of one `snapshot save` every member is restored from.
    pub repair: bool,
}

#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// A new incarnation: every volume empty, etcd-init in the template.
    FirstRestore,
    /// A restore that completed and served a write; `pending`: etcd-init
    /// still in the template and the condition unset (M4's aftermath, or
    /// before the removal), else both done.
    Restored { pending: bool },
    /// A restored cluster with etcd-init still in the template, stopped as a
    /// whole (scale to 0, power loss); the members in `lost` lost their volume.
    StoppedWithLostVolumes { lost: u8 },
}

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub n: u8,
    pub start: Start,
    pub faults: u8,
    pub writes: u8,
    /// Second restores of the same snapshot (a new HostedCluster incarnation).
    pub restores: u8,
    pub allow: Allow,
}

pub struct Protocol {
    pub rules: Rules,
    pub scenario: Scenario,
}

type Moves = Vec<(String, bool, World)>;

impl Protocol {
    fn bump_of(&self, setting: u8) -> u32 {
        BUMPS[setting as usize]
    }

    /// The base revision a member restored with `setting` starts from.
    fn restored_base(&self, w: &World, setting: u8) -> u32 {
        let bumped = SNAPSHOT_REV + self.bump_of(setting);
        if self.rules.revision_floor {
            // One member restores alone: its own clock's floor too (no peer
            // to agree with), so a re-restore after its volume is lost
            // lands above what the first one served.
            let epoch = if w.n == 1 { u32::from(w.epoch) } else { 0 };
            bumped.max(FLOOR_STEP * (u32::from(w.inc) + epoch))
        } else {
            bumped
        }
    }

    fn restore_cid(&self, w: &World, setting: u8) -> Cid {
        Cid::Restore { inc: w.inc, bump: self.rules.bump_identity.then_some(setting) }
    }

    /// What member `i`'s etcd-init learns by asking member `j`'s peer port.
    fn probe(&self, w: &World, j: u8) -> Probe {
        match w.pods[j as usize].phase {
            Phase::Init(Stage::WaitFresh) => Probe::Fresh,
            Phase::Init(Stage::WaitRestored) => match w.vols[j as usize].data {
                Some(d) => Probe::Restored(d.cid),
                None => Probe::Unknown,
            },
            Phase::Etcd => match w.vols[j as usize].data {
                Some(d) => Probe::Etcd(d.cid),
                None => Probe::Unknown,
            },
            _ => Probe::Unknown,
        }
    }

    /// Whether member `i` may hand off to cluster `cid` (whose member `j`
    /// answered healthy).
    fn may_hand_off(&self, w: &World, i: u8, cid: Cid) -> bool {
        if !w.serving(cid) {
            return false;
        }
        let Some(c) = w.cluster(cid) else { return false };
        if self.rules.handoff_named {
            // Read through the Service: some Ready member's list, and every
            // Ready member's (the Service may route to any) names it.
            let ready: Vec<Cid> = (0..w.n).filter_map(|m| w.ready(m)).collect();
            if ready.is_empty() || ready.iter().any(|r| *r != cid) || c.members & (1 << i) == 0 {
                return false;
            }
        }
        !self.rules.handoff_settled || c.settled
    }

    fn etcd_init(&self, w: &World, i: u8, stage: Stage, out: &mut Moves) {
        let iu = i as usize;
        let vol = w.vols[iu];
        let setting = w.pods[iu].spec.unwrap_or(w.setting);
        let others: Vec<u8> = (0..w.n).filter(|&j| j != i).collect();
        let exit_ok = |mut s: World, label: String, out: &mut Moves| {
            s.pods[iu].phase = Phase::Reset { removed_from: None };
            s.pods[iu].init_done = true;
            out.push((label, false, s));
        };
        match stage {
            Stage::Start => {
                if vol.data.is_some() {
                    let mut s = w.clone();
                    if vol.pending {
                        s.pods[iu].phase = Phase::Init(Stage::WaitRestored);
                        out.push((format!("etcd-{i} etcd-init: resumes its restore"), false, s));
                    } else {
                        exit_ok(s, format!("etcd-{i} etcd-init: SKIPPED (holds a member)"), out);
                    }
                    return;
                }
                if vol.joining.is_some() {
                    let mut s = w.clone();
                    s.pods[iu].phase = Phase::Init(Stage::Join);
                    out.push((format!("etcd-{i} etcd-init: resumes joining"), false, s));
                    return;
                }
                if others.is_empty() {
                    if w.url_ok {
                        let mut s = w.clone();
                        self.restore(&mut s, i, setting);
                        s.vols[iu].pending = false;
                        exit_ok(s, format!("etcd-{i} etcd-init: RESTORED (one member)"), out);
                    }
                    return;
                }
                let mut s = w.clone();
                // Fixed: download and verify first (kept for retries); a
                // member whose download fails still answers "fresh", so the
                // others can go on without it and it hands off later.
                if self.rules.download_first && !vol.downloaded && w.url_ok {
                    s.vols[iu].downloaded = true;
                }
                s.pods[iu].phase = Phase::Init(Stage::WaitFresh);
                out.push((format!("etcd-{i} etcd-init: beacon fresh, waiting"), false, s));
            }
            Stage::WaitFresh => {
                let mut seen = vol.seen;
                let mut missing = false;
                for &j in &others {
                    match self.probe(w, j) {
                        Probe::Fresh => seen |= 1 << j,
                        Probe::Restored(Cid::Restore { inc, .. }) if inc == w.inc => seen |= 1 << j,
                        Probe::Etcd(cid) if w.serving(cid) => {
                            if self.may_hand_off(w, i, cid) {
                                let mut s = w.clone();
                                s.vols[iu] = Vol::default();
                                if self.rules.join_itself {
                                    s.pods[iu].phase = Phase::Init(Stage::Join);
                                    out.push((format!("etcd-{i} etcd-init: joins {cid:?}"), false, s));
                                } else {
                                    exit_ok(s, format!("etcd-{i} etcd-init: HANDED OFF to {cid:?}"), out);
                                }
                                return;
                            }
                            missing = true;
                        }
                        Probe::Unknown if vol.seen & (1 << j) != 0 => {}
                        _ => missing = true,
                    }
                }
                let mut s = w.clone();
                s.vols[iu].seen = seen;
                if missing {
                    // The wait runs out: FAILED, the kubelet retries from the top.
                    s.pods[iu].phase = Phase::Init(Stage::Start);
                    out.push((format!("etcd-{i} etcd-init: FAILED waiting for the others"), false, s));
                    return;
                }
                if !vol.downloaded && !w.url_ok {
                    s.pods[iu].phase = Phase::Init(Stage::Start);
                    out.push((format!("etcd-{i} etcd-init: FAILED download (URL expired)"), false, s));
                    return;
                }
                // Positive evidence: restore now.
                for &j in &others {
                    if let Some(d) = w.vols[j as usize].data {
                        if !matches!(d.cid, Cid::Restore { inc, .. } if inc == w.inc) {
                            s.broken = Some("restored while another member held data the snapshot may lack");
                        }
                    }
                }
                self.restore(&mut s, i, setting);
                s.pods[iu].phase = Phase::Init(Stage::WaitRestored);
                out.push((format!("etcd-{i} etcd-init: restored with bump setting {setting}"), false, s));
            }
            Stage::Join => self.join(w, i, out),
            Stage::WaitRestored => {
                let Some(mine) = vol.data else { return };
                let mut done = vol.restored_peers;
                for &j in &others {
                    if done & (1 << j) != 0 {
                        continue;
                    }
                    match self.probe(w, j) {
                        Probe::Restored(cid) if self.same_restore(cid, mine.cid) => done |= 1 << j,
                        Probe::Etcd(cid) if cid == mine.cid && vol.seen & (1 << j) != 0 => done |= 1 << j,
                        _ => {}
                    }
                }
                let mut s = w.clone();
                s.vols[iu].restored_peers = done;
                let count = done.count_ones() + 1;
                let release = |mut s: World, label: String, out: &mut Moves| {
                    s.vols[iu].pending = false;
                    s.vols[iu].seen = 0;
                    s.vols[iu].restored_peers = 0;
                    exit_ok(s, label, out);
                };
                if count == u32::from(w.n) {
                    release(s, format!("etcd-{i} etcd-init: RESTORED, every member restored"), out);
                    return;
                }
                if count > u32::from(w.n) / 2 {
                    release(s.clone(), format!("etcd-{i} etcd-init: RESTORED, a quorum restored after the wait"), out);
                }
                s.pods[iu].phase = Phase::Init(Stage::Start);
                out.push((format!("etcd-{i} etcd-init: FAILED waiting for the others to restore"), false, s));
            }
        }
    }

    /// Fixed rules: etcd-init joins the member to the cluster itself, so
    /// reset-member finds data and never writes `new` for it. Each step is
    /// one etcdctl call or the local etcd's first sync; a failed one exits
    /// non-zero and the kubelet retries from the top (the stamp resumes).
    fn join(&self, w: &World, i: u8, out: &mut Moves) {
        let iu = i as usize;
        let mut s = w.clone();
        s.pods[iu].phase = Phase::Init(Stage::Start);
        let target = w.vols[iu].joining.or_else(|| (0..w.n).find_map(|m| w.ready(m)));
        let Some(cid) = target else {
            out.push((format!("etcd-{i} etcd-init: FAILED joining (no Ready member lists)"), false, s));
            return;
        };
        let listed = w.cluster(cid).is_some_and(|c| c.members & (1 << i) != 0);
        let ok = w.serving(cid) && w.cluster(cid).is_some_and(|c| c.settled);
        match (w.vols[iu].joining, listed) {
            (None, true) if w.serving(cid) => {
                s.vols[iu].joining = Some(cid);
                s.vols[iu].staged = Staged::Nothing;
                s.cluster_mut(cid).members &= !(1 << i);
                s.pods[iu].phase = Phase::Init(Stage::Join);
                out.push((format!("etcd-{i} etcd-init: stamped; member remove from {cid:?}"), false, s));
            }
            (Some(_), false) if ok => {
                s.cluster_mut(cid).members |= 1 << i;
                s.vols[iu].staged = Staged::Nothing;
                s.pods[iu].phase = Phase::Init(Stage::Join);
                out.push((format!("etcd-{i} etcd-init: member add to {cid:?}"), false, s));
            }
            (Some(_), true) if w.serving(cid) => {
                let staged = w.vols[iu].staged;
                if staged == Staged::Db && !self.rules.resume_needs_wal {
                    // The staged db taken for a sync to resume; the local
                    // etcd, started without --initial-cluster-state
                    // existing and with no WAL, bootstraps alone.
                    let own = Cid::Own { inc: w.inc, member: i };
                    s.vols[iu] = Vol { data: Some(Data { cid: own, base: 0 }), ..Vol::default() };
                    s.cluster_mut(own).members = 1 << i;
                    s.pods[iu].phase = Phase::Reset { removed_from: None };
                    s.pods[iu].init_done = true;
                    out.push((
                        format!("etcd-{i} etcd-init: resumes a staged db without a WAL: JOINED {own:?}"),
                        false,
                        s,
                    ));
                    return;
                }
                // The local etcd exits part-way (its peers stop answering,
                // its node goes down): the kubelet retries from the top.
                // Before its WAL (a db only), unless it resumes one.
                if staged != Staged::Wal {
                    let mut f = s.clone();
                    f.vols[iu].staged = Staged::Db;
                    out.push((
                        format!("etcd-{i} etcd-init: FAILED, its local etcd exited before it joined (a db, no WAL)"),
                        false,
                        f,
                    ));
                }
                let mut f = s.clone();
                f.vols[iu].staged = Staged::Wal;
                out.push((
                    format!("etcd-{i} etcd-init: FAILED, its local etcd exited mid-sync (its WAL staged)"),
                    false,
                    f,
                ));
                let base =
                    (0..w.n).find_map(|m| w.vols[m as usize].data.filter(|d| d.cid == cid)).map_or(0, |d| d.base);
                s.vols[iu] = Vol { data: Some(Data { cid, base }), ..Vol::default() };
                s.pods[iu].phase = Phase::Reset { removed_from: None };
                s.pods[iu].init_done = true;
                out.push((format!("etcd-{i} etcd-init: JOINED {cid:?} (first sync done)"), false, s));
            }
            _ => out.push((
                format!("etcd-{i} etcd-init: FAILED joining {cid:?} (not serving or inside the reconfig window)"),
                false,
                s,
            )),
        }
    }

    /// Two members' restores are the same restore: the same token. Before
    /// the fixes the token did not hold the bump.
    fn same_restore(&self, a: Cid, b: Cid) -> bool {
        a == b
    }

    fn restore(&self, s: &mut World, i: u8, setting: u8) {
        if s.n == 1 {
            s.epoch += 1;
        }
        let cid = self.restore_cid(s, setting);
        let base = self.restored_base(s, setting);
        if s.seen_rev > 0 && base <= s.seen_rev {
            s.broken = Some("a restore landed at or below a revision clients already saw");
        }
        s.vols[i as usize] =
            Vol { data: Some(Data { cid, base }), pending: true, seen: s.vols[i as usize].seen, ..Vol::default() };
        s.cluster_mut(cid);
    }

    /// Upstream's reset-member, as its script runs (`set -eu`; member list
    /// through `https://etcd-client:2379`, which routes to Ready pods only;
    /// the grep for the host name; `member remove`, then `member add`).
    fn reset_member(&self, w: &World, i: u8, removed_from: Option<Cid>, out: &mut Moves) {
        let iu = i as usize;
        if let Some(cid) = removed_from {
            let mut s = w.clone();
            if w.serving(cid) && w.cluster(cid).is_some_and(|c| c.settled) {
                s.cluster_mut(cid).members |= 1 << i;
                let base =
                    (0..w.n).find_map(|m| w.vols[m as usize].data.filter(|d| d.cid == cid)).map_or(0, |d| d.base);
                s.vols[iu].data = Some(Data { cid, base });
                s.pods[iu].phase = Phase::Etcd;
                out.push((format!("etcd-{i} reset-member: member add; etcd joins {cid:?} (existing)"), false, s));
            } else {
                s.pods[iu].phase = Phase::Reset { removed_from: None };
                out.push((
                    format!(
                        "etcd-{i} reset-member: member add refused (strict reconfig); exit 1, retried from the top"
                    ),
                    false,
                    s,
                ));
            }
            return;
        }
        let start_new = |mut s: World, why: &str, out: &mut Moves| {
            if s.vols[iu].data.is_none() {
                let cid = Cid::Default { inc: s.inc };
                s.vols[iu].data = Some(Data { cid, base: 0 });
                s.cluster_mut(cid);
            }
            s.pods[iu].phase = Phase::Etcd;
            out.push((format!("etcd-{i} reset-member: {why}; etcd starts (state new)"), false, s));
        };
        if w.vols[iu].data.is_some() {
            start_new(w.clone(), "snapshot db exists", out);
            return;
        }
        let mut listed: Vec<Cid> = (0..w.n).filter_map(|m| w.ready(m)).collect();
        listed.sort();
        listed.dedup();
        if listed.is_empty() {
            start_new(w.clone(), "cannot list members", out);
            return;
        }
        for cid in listed {
            let named = w.cluster(cid).is_some_and(|c| c.members & (1 << i) != 0);
            let mut s = w.clone();
            if named {
                s.cluster_mut(cid).members &= !(1 << i);
                s.pods[iu].phase = Phase::Reset { removed_from: Some(cid) };
                out.push((format!("etcd-{i} reset-member: listed in {cid:?}: member remove"), false, s));
            } else {
                start_new(s, &format!("not listed in {cid:?}, nothing to do"), out);
            }
        }
    }

    /// The control-plane-operator's reconcile: the condition first (as
    /// upstream: only while unset; every replica ready and every pod with
    /// a finished etcd-init), then the StatefulSet update the webhook
    /// decides on from the stored object.
    fn reconcile(&self, w: &World, out: &mut Moves) {
        let mut s = w.clone();
        let ready = w.ready_count();
        if !s.condition && ready == w.n && w.pods[..w.n as usize].iter().all(|p| p.spec.is_some() && p.init_done) {
            s.condition = true;
        }
        let inject = if s.condition {
            false
        } else if self.rules.remove_when_all_ready {
            ready < w.n
        } else {
            ready <= w.n / 2
        };
        s.template = if inject {
            let keep = if self.rules.bump_identity { w.template } else { None };
            Some(keep.unwrap_or(w.setting))
        } else {
            None
        };
        if s != *w {
            out.push((
                format!("CPO reconcile ({ready} ready): condition {}, etcd-init {:?}", s.condition, s.template),
                false,
                s,
            ));
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Probe {
    Fresh,
    Restored(Cid),
    Etcd(Cid),
    Unknown,
}

impl Model for Protocol {
    type State = World;

    fn init(&self) -> Vec<World> {
        let sc = &self.scenario;
        let down = Pod { phase: Phase::Down, spec: None, init_done: false };
        let mut w = World {
            n: sc.n,
            pods: [down; 3],
            vols: [Vol::default(); 3],
            clusters: Vec::new(),
            template: Some(0),
            setting: 0,
            condition: false,
            url_ok: true,
            inc: 0,
            seen_rev: 0,
            epoch: 0,
            faults: sc.faults,
            writes: sc.writes,
            restores_left: sc.restores,
            broken: None,
        };
        let restored = |w: &mut World| {
            let cid = self.restore_cid(w, 0);
            let base = self.restored_base(w, 0);
            for m in 0..sc.n as usize {
                w.vols[m].data = Some(Data { cid, base });
                w.pods[m] = Pod { phase: Phase::Etcd, spec: Some(0), init_done: true };
            }
            w.cluster_mut(cid).settled = true;
            w.cluster_mut(cid).writes = 1;
            w.seen_rev = base + 1;
        };
        match sc.start {
            Start::FirstRestore => {}
            Start::Restored { pending } => {
                restored(&mut w);
                if !pending {
                    w.template = None;
                    w.condition = true;
                    for m in 0..sc.n as usize {
                        w.pods[m].spec = None;
                    }
                }
            }
            Start::StoppedWithLostVolumes { lost } => {
                restored(&mut w);
                for m in 0..sc.n as usize {
                    w.pods[m].phase = Phase::Down;
                    if lost & (1 << m) != 0 {
                        w.vols[m] = Vol::default();
                    }
                }
                if let Some(c) = w.clusters.first_mut() {
                    c.settled = false;
                }
            }
        }
        w.normalise();
        vec![w]
    }

    fn next(&self, w: &World, out: &mut Moves) {
        if w.broken.is_some() {
            return;
        }
        let start = out.len();
        let allow = self.scenario.allow;
        for i in 0..w.n {
            let iu = i as usize;
            let pod = w.pods[iu];
            match pod.phase {
                Phase::Down => {
                    let mut s = w.clone();
                    s.pods[iu] = Pod {
                        phase: if w.template.is_some() {
                            Phase::Init(Stage::Start)
                        } else {
                            Phase::Reset { removed_from: None }
                        },
                        spec: w.template,
                        init_done: false,
                    };
                    out.push((format!("etcd-{i}: pod starts (etcd-init {:?})", w.template), false, s));
                }
                Phase::Init(stage) => self.etcd_init(w, i, stage, out),
                Phase::Reset { removed_from } => self.reset_member(w, i, removed_from, out),
                Phase::Etcd => {}
            }
            // The StatefulSet controller replaces a pod of an older template.
            if pod.phase != Phase::Down && pod.spec != w.template {
                let mut s = w.clone();
                s.pods[iu].phase = Phase::Down;
                out.push((format!("etcd-{i}: deleted by the StatefulSet controller (out of date)"), false, s));
            }
            if w.faults > 0 {
                if allow.crash && pod.phase != Phase::Down {
                    let mut s = w.clone();
                    s.pods[iu].phase = Phase::Down;
                    s.faults -= 1;
                    out.push((format!("FAULT etcd-{i} crashes"), true, s));
                }
                if allow.lose_volume && (w.vols[iu] != Vol::default() || pod.phase != Phase::Down) {
                    let mut s = w.clone();
                    s.pods[iu].phase = Phase::Down;
                    s.vols[iu] = Vol::default();
                    s.faults -= 1;
                    out.push((format!("FAULT etcd-{i} loses its volume"), true, s));
                }
                if allow.member_remove && w.vols[iu].data.is_some() {
                    if let Some(cid) = w.vols[iu].data.map(|d| d.cid) {
                        let mut s = w.clone();
                        s.cluster_mut(cid).members &= !(1 << i);
                        s.vols[iu] = Vol::default();
                        s.pods[iu].phase = Phase::Down;
                        s.faults -= 1;
                        out.push((format!("RUNBOOK (old) etcdctl member remove etcd-{i}, wipe it"), true, s));
                    }
                }
                if allow.force_new_cluster && pod.phase != Phase::Etcd {
                    if let Some(d) = w.vols[iu].data {
                        if !w.serving(d.cid) {
                            let mut s = w.clone();
                            s.cluster_mut(d.cid).members = 1 << i;
                            s.pods[iu].phase = Phase::Etcd;
                            s.faults -= 1;
                            out.push((format!("RUNBOOK (old) etcd-{i} starts with --force-new-cluster"), true, s));
                        }
                    }
                }
            }
            // The fixed runbook for a member outside the cluster (etcd runs
            // but is not Ready and not of the serving cluster, or etcd-init
            // reports the healthy cluster does not list it): stop it, wipe
            // member/, `member add` it; reset-member then finds it.
            if allow.repair {
                if let Some(c) = (0..w.n).find_map(|m| w.ready(m)).and_then(|cid| w.cluster(cid).copied()) {
                    let listed = c.members & (1 << i) != 0;
                    let theirs = w.vols[iu].data.map(|d| d.cid) == Some(c.cid);
                    let stuck = match pod.phase {
                        Phase::Etcd => w.ready(i).is_none() && (!theirs || !listed),
                        Phase::Init(_) => w.vols[iu].data.is_none() && !listed,
                        _ => false,
                    };
                    if stuck && c.settled {
                        let mut s = w.clone();
                        s.vols[iu] = Vol::default();
                        s.pods[iu].phase = Phase::Down;
                        s.cluster_mut(c.cid).members |= 1 << i;
                        out.push((format!("RUNBOOK (fixed) etcd-{i}: wipe member/, member add"), false, s));
                    }
                }
            }
        }
        if w.faults > 0 {
            if allow.stop_all && w.pods[..w.n as usize].iter().any(|p| p.phase != Phase::Down) {
                let mut s = w.clone();
                for p in &mut s.pods {
                    p.phase = Phase::Down;
                }
                s.faults -= 1;
                out.push(("FAULT every member stops (scale to 0, power loss)".into(), true, s));
            }
            if allow.settings_change {
                let mut s = w.clone();
                s.setting ^= 1;
                s.faults -= 1;
                out.push((format!("ENV restoreRevisionBump setting -> {}", s.setting), true, s));
            }
            // The URL expires once a quorum has been waiting in etcd-init on
            // time (a member late past the expiry; before anyone came, no
            // rule could restore).
            let on_time = (0..w.n)
                .filter(|&m| {
                    matches!(w.pods[m as usize].phase, Phase::Init(Stage::WaitFresh | Stage::WaitRestored))
                        || w.vols[m as usize].data.is_some()
                })
                .count() as u8;
            if allow.url_expiry && w.url_ok && on_time > w.n / 2 {
                let mut s = w.clone();
                s.url_ok = false;
                s.faults -= 1;
                out.push(("ENV the presigned URL expires".into(), true, s));
            }
        }
        // The survivor without a quorum (the fixed runbook): `snapshot
        // save` it, restore every member from that one file (same token,
        // same initial cluster), start them.
        if allow.repair {
            let holders: Vec<u8> = (0..w.n).filter(|&m| w.vols[m as usize].data.is_some()).collect();
            let no_quorum = w.clusters.iter().all(|c| !w.serving(c.cid));
            let live = (0..w.n).any(|m| w.pods[m as usize].phase == Phase::Etcd);
            if no_quorum && live {
                let top = holders.iter().filter_map(|&m| w.revision(m)).max().unwrap_or(0);
                let mut s = w.clone();
                let cid = Cid::Manual { inc: w.inc };
                for m in 0..w.n as usize {
                    s.vols[m] = Vol { data: Some(Data { cid, base: top }), ..Vol::default() };
                    s.pods[m].phase = Phase::Down;
                }
                s.clusters.retain(|c| c.cid == cid);
                s.cluster_mut(cid).members = s.all();
                out.push(("RUNBOOK (fixed) restore every member from one snapshot save".into(), false, s));
            }
        }
        // Time passes: etcd's reconfig window closes for serving clusters.
        if w.clusters.iter().any(|c| !c.settled && w.serving(c.cid)) {
            let mut s = w.clone();
            let serving: Vec<bool> = s.clusters.iter().map(|c| w.serving(c.cid)).collect();
            for (c, sv) in s.clusters.iter_mut().zip(serving) {
                c.settled |= sv;
            }
            out.push(("time passes (5 s)".into(), false, s));
        }
        self.reconcile(w, out);
        // A client writes through any Ready member.
        if w.writes > 0 {
            for m in 0..w.n {
                if let Some(cid) = w.ready(m) {
                    let mut s = w.clone();
                    s.cluster_mut(cid).writes += 1;
                    s.writes -= 1;
                    let rev = s.revision(m).unwrap_or(0);
                    s.seen_rev = s.seen_rev.max(rev);
                    out.push((format!("client writes through etcd-{m} (revision {rev})"), true, s));
                }
            }
        }
        // A second restore of the same snapshot: a new HostedCluster.
        if w.restores_left > 0 && self.good(w) {
            let mut s = w.clone();
            s.inc += 1;
            s.restores_left -= 1;
            s.clusters.clear();
            s.vols = [Vol::default(); 3];
            for p in &mut s.pods {
                *p = Pod { phase: Phase::Down, spec: None, init_done: false };
            }
            s.condition = false;
            s.url_ok = true;
            s.template = Some(s.setting);
            out.push(("ENV a new HostedCluster restores the same snapshot".into(), true, s));
        }
        for (_, _, s) in &mut out[start..] {
            s.normalise();
        }
    }

    fn unsafe_in(&self, w: &World) -> Option<String> {
        if let Some(b) = w.broken {
            return Some(b.to_string());
        }
        let serving: Vec<Cid> = w.clusters.iter().map(|c| c.cid).filter(|&c| w.serving(c)).collect();
        if serving.len() > 1 {
            return Some(format!("two clusters take writes for one HostedControlPlane: {serving:?}"));
        }
        for c in &w.clusters {
            let bases: Vec<u32> =
                (0..w.n).filter_map(|m| w.vols[m as usize].data).filter(|d| d.cid == c.cid).map(|d| d.base).collect();
            if bases.windows(2).any(|p| p[0] != p[1]) {
                return Some(format!("one cluster's members disagree on the revision base: {:?} {bases:?}", c.cid));
            }
        }
        None
    }

    fn good(&self, w: &World) -> bool {
        let Some(cid) = w.ready(0) else { return false };
        w.cluster(cid).is_some_and(|c| c.members == w.all())
            && (0..w.n).all(|m| w.ready(m) == Some(cid))
            && w.condition
            && w.template.is_none()
            && w.pods[..w.n as usize].iter().all(|p| p.spec.is_none())
    }
}
