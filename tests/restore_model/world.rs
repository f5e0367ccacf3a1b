//! The restore as a state machine: the members' pods and volumes, the etcd
//! clusters they form, the StatefulSet template, the HostedControlPlane's
//! `EtcdSnapshotRestored` condition, and what clients have seen.
//!
//! Abstractions (each one sound for the properties checked):
//! * revisions are small numbers: the snapshot is at revision `SNAPSHOT_REV`,
//!   the two bump settings are `BUMPS`, a client write adds one;
//! * a cluster is named by its ID: a restore's (`Restore`), the one etcd
//!   derives from the default token and the initial cluster when
//!   reset-member writes `new` (`Default`: deterministic, so every member
//!   that starts that way joins the same one), or an operator's manual one;
//! * "settled" is etcd's strict-reconfig window: a cluster that has served
//!   continuously since the last tick of time (5 s) accepts `member add`.

/// The snapshot's revision.
pub const SNAPSHOT_REV: u32 = 5;
/// `restoreRevisionBump` for setting 0 and setting 1 (10^10 and 10^12, scaled).
pub const BUMPS: [u32; 2] = [10, 100];
/// The revision floor of incarnation `k` of the HostedCluster is
/// `FLOOR_STEP * k` (its creation time × 10^7, scaled: incarnation 0 stands
/// for a floor below the bump). The assumption the fixed rule rests on, as
/// the model states it: floors of two incarnations differ by more than the
/// largest bump plus everything an incarnation writes (`writes` is bounded
/// far below it); docs/restore.md states it in seconds.
pub const FLOOR_STEP: u32 = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Cid {
    /// Made by a restore of incarnation `inc`; `bump` is in the identity
    /// only under the fixed rules (the old token held the generation and
    /// the snapshot's hash alone).
    Restore { inc: u8, bump: Option<u8> },
    /// reset-member wrote `new`: etcd's default token, the initial cluster.
    Default { inc: u8 },
    /// The survivor's cluster after `--force-new-cluster` keeps its ID; an
    /// operator's restore of every member from one `snapshot save` makes a
    /// new one.
    Manual { inc: u8 },
    /// A local etcd of etcd-init's join started on a staged db without its
    /// WAL and without `--initial-cluster-state existing`: it bootstraps a
    /// one-member cluster of its own (its ID from its name and peer URL).
    Own { inc: u8, member: u8 },
}

/// What a join's first sync left staged next to the data dir: etcd writes
/// member/snap/db when it opens its backend, before it reads the cluster
/// from the peers and writes its WAL.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Staged {
    #[default]
    Nothing,
    /// A db, no WAL: the local etcd exited before it joined.
    Db,
    /// The WAL of the added member: a sync to resume.
    Wal,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Data {
    pub cid: Cid,
    /// The revision base this member's copy started from.
    pub base: u32,
}

/// A member's volume: its etcd data and what etcd-init keeps next to it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Vol {
    pub data: Option<Data>,
    /// etcd-init restored it and has not released it yet (`$STATE/restored`).
    pub pending: bool,
    /// A complete, verified download is kept for the retry.
    pub downloaded: bool,
    /// Peers seen in this restore's etcd-init, and seen restored (bit masks).
    pub seen: u8,
    pub restored_peers: u8,
    /// etcd-init is joining this member to that cluster itself (fixed
    /// rules): its stamp, kept across retries, set before `member remove`.
    pub joining: Option<Cid>,
    /// The join's first sync, as far as it got.
    pub staged: Staged,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Stage {
    Start,
    /// The beacon says "fresh"; waiting for every other member.
    WaitFresh,
    /// Restored; the beacon says "restored"; waiting for the others.
    WaitRestored,
    /// Fixed rules: joining a healthy cluster that lists this member
    /// (`member remove`, `member add`, a first sync by a local etcd).
    Join,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Phase {
    Down,
    Init(Stage),
    /// reset-member: from the top, or after its `member remove` went through.
    Reset {
        removed_from: Option<Cid>,
    },
    /// etcd runs (its data is on the volume from the moment it starts).
    Etcd,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Pod {
    pub phase: Phase,
    /// The template it was made from: its etcd-init's bump setting, if any.
    pub spec: Option<u8>,
    /// Its etcd-init exited 0 (the status the CPO's condition reads).
    pub init_done: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Cluster {
    pub cid: Cid,
    /// Its member list (bit mask).
    pub members: u8,
    pub writes: u32,
    /// Served continuously since the last tick: `member add` is accepted.
    pub settled: bool,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct World {
    pub n: u8,
    pub pods: [Pod; 3],
    pub vols: [Vol; 3],
    /// Sorted by ID.
    pub clusters: Vec<Cluster>,
    /// etcd-init in the StatefulSet template, with its bump setting.
    pub template: Option<u8>,
    /// The webhook's `restoreRevisionBump` setting now.
    pub setting: u8,
    pub condition: bool,
    pub url_ok: bool,
    pub inc: u8,
    /// The highest revision a client saw.
    pub seen_rev: u32,
    /// Restores a single member made (its wall clock moved on between them).
    pub epoch: u8,
    /// Budgets of the environment's moves.
    pub faults: u8,
    pub writes: u8,
    pub restores_left: u8,
    /// A safety property a move broke (kept: the state is a counterexample).
    pub broken: Option<&'static str>,
}

impl World {
    pub fn all(&self) -> u8 {
        (1u8 << self.n) - 1
    }

    pub fn cluster(&self, cid: Cid) -> Option<&Cluster> {
        self.clusters.iter().find(|c| c.cid == cid)
    }

    pub fn cluster_mut(&mut self, cid: Cid) -> &mut Cluster {
        if let Some(i) = self.clusters.iter().position(|c| c.cid == cid) {
            return &mut self.clusters[i];
        }
        let members = self.all();
        self.clusters.push(Cluster { cid, members, writes: 0, settled: false });
        self.clusters.sort_by_key(|c| c.cid);
        let i = self.clusters.iter().position(|c| c.cid == cid).unwrap_or(0);
        &mut self.clusters[i]
    }

    /// Members of `cid`'s member list that run etcd on its data.
    pub fn running(&self, cid: Cid) -> u8 {
        let Some(c) = self.cluster(cid) else { return 0 };
        (0..self.n)
            .filter(|&m| {
                c.members & (1 << m) != 0
                    && self.pods[m as usize].phase == Phase::Etcd
                    && self.vols[m as usize].data.map(|d| d.cid) == Some(cid)
            })
            .fold(0, |acc, m| acc | (1 << m))
    }

    /// A quorum of its member list runs: it answers healthy and takes writes.
    pub fn serving(&self, cid: Cid) -> bool {
        let Some(c) = self.cluster(cid) else { return false };
        let size = c.members.count_ones();
        size > 0 && self.running(cid).count_ones() > size / 2
    }

    /// Member `m` is Ready (its readyz passes): it runs etcd of a serving
    /// cluster that lists it. The `etcd-client` Service routes only here.
    pub fn ready(&self, m: u8) -> Option<Cid> {
        let d = self.vols[m as usize].data?;
        (self.running(d.cid) & (1 << m) != 0 && self.serving(d.cid)).then_some(d.cid)
    }

    pub fn ready_count(&self) -> u8 {
        (0..self.n).filter(|&m| self.ready(m).is_some()).count() as u8
    }

    /// After every move: a cluster that does not serve is not settled, and
    /// a cluster nobody's volume refers to any more is gone.
    pub fn normalise(&mut self) {
        let serving: Vec<bool> = self.clusters.iter().map(|c| self.serving(c.cid)).collect();
        for (c, s) in self.clusters.iter_mut().zip(serving) {
            if !s {
                c.settled = false;
            }
        }
        let vols = self.vols;
        let n = self.n as usize;
        self.clusters.retain(|c| vols[..n].iter().any(|v| v.data.map(|d| d.cid) == Some(c.cid)));
    }

    /// The revision member `m` serves now.
    pub fn revision(&self, m: u8) -> Option<u32> {
        let d = self.vols[m as usize].data?;
        Some(d.base + self.cluster(d.cid).map_or(0, |c| c.writes))
    }
}
