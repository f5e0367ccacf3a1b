//! The restore protocol, checked over every interleaving (issue #28).
//!
//! The model (`world.rs`, `moves.rs`) holds 1 or 3 members, etcd-init's
//! decisions, the beacon and barrier, the kubelet retrying each init
//! container from the top, upstream's reset-member as its script runs,
//! etcd's bootstrap and strict-reconfig refusal, the StatefulSet
//! controller, the control-plane-operator's reconcile with the webhook's
//! inject/remove decision, time, clients, faults and the runbooks' steps.
//!
//! Invariants (safety, every reachable state):
//! * never two clusters for one HostedControlPlane that both take writes;
//! * never a restore while another member holds data the snapshot may lack;
//! * one cluster's members agree on the revision base;
//! * a restore never lands at or below a revision clients saw.
//!
//! Liveness: from every reachable state the good end (one cluster of every
//! member, all Ready, `EtcdSnapshotRestored` set, etcd-init out of the
//! template) is reachable without a further fault: no permanent wedge. In
//! two tiers: after crashes, any start order, a late member past the URL's
//! expiry or a settings change, with no operator at all; after a lost
//! volume or an operator's mistake, by the steps of docs/restore.md (the
//! runbook moves in `moves.rs`) — a lost volume can leave the restore's
//! only running copy without a quorum, which no rule can decide alone.
//!
//! The model of the rules the turn-4 review ran (`Rules::OLD`) must break
//! them, and each finding must come back when only its own fix is off:
//! the checker can fail. The fixed rules break none, in every scenario.

mod checker;
mod moves;
mod world;

use checker::{check, Report};
use moves::{Allow, Protocol, Rules, Scenario, Start};

/// Far above what the scenarios reach; a model that grows past it fails
/// loudly rather than running for an hour.
const MAX_STATES: usize = 3_000_000;

fn run(name: &str, rules: Rules, scenario: Scenario) -> Report {
    let started = std::time::Instant::now();
    let report = check(&Protocol { rules, scenario }, MAX_STATES).unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!(
        "{name}: {} states, {} transitions explored in {:.1?}",
        report.states,
        report.transitions,
        started.elapsed()
    );
    report
}

/// Every scenario, by name. Faults are budgeted; each scenario allows the
/// environment moves its name says.
fn scenarios() -> Vec<(&'static str, Scenario)> {
    let none = Allow::default();
    vec![
        (
            "first restore, 3 members, any start order, one crash",
            Scenario {
                n: 3,
                start: Start::FirstRestore,
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { crash: true, ..none },
            },
        ),
        (
            "first restore, 3 members, a lost volume (the runbooks may be needed)",
            Scenario {
                n: 3,
                start: Start::FirstRestore,
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { lose_volume: true, repair: true, ..none },
            },
        ),
        (
            "first restore, a bump setting change mid-restore (M1)",
            Scenario {
                n: 3,
                start: Start::FirstRestore,
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { settings_change: true, ..none },
            },
        ),
        (
            "first restore, a member late past the URL's expiry (M6)",
            Scenario {
                n: 3,
                start: Start::FirstRestore,
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { url_expiry: true, ..none },
            },
        ),
        (
            "first restore, the condition and the template (M4)",
            Scenario { n: 3, start: Start::FirstRestore, faults: 0, writes: 0, restores: 0, allow: none },
        ),
        (
            "a full stop with one lost volume, etcd-init in the template (M2)",
            Scenario {
                n: 3,
                start: Start::StoppedWithLostVolumes { lost: 0b100 },
                faults: 0,
                writes: 0,
                restores: 0,
                allow: none,
            },
        ),
        (
            "runbook: member remove, then hand off (M3)",
            Scenario {
                n: 3,
                start: Start::Restored { pending: true },
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { member_remove: true, repair: true, ..none },
            },
        ),
        (
            "runbook: two lost volumes, the survivor forced into a new cluster (C1)",
            Scenario {
                n: 3,
                start: Start::StoppedWithLostVolumes { lost: 0b110 },
                faults: 1,
                writes: 0,
                restores: 0,
                allow: Allow { force_new_cluster: true, repair: true, ..none },
            },
        ),
        (
            "a second restore of the same snapshot after writes (M5)",
            Scenario { n: 3, start: Start::FirstRestore, faults: 0, writes: 2, restores: 1, allow: none },
        ),
        (
            "one member: crash or lost volume, a second restore",
            Scenario {
                n: 1,
                start: Start::FirstRestore,
                faults: 2,
                writes: 1,
                restores: 1,
                allow: Allow { crash: true, lose_volume: true, ..none },
            },
        ),
    ]
}

fn scenario(name_part: &str) -> (&'static str, Scenario) {
    scenarios().into_iter().find(|(n, _)| n.contains(name_part)).unwrap_or_else(|| panic!("no scenario {name_part}"))
}

#[test]
fn the_fixed_rules_break_no_invariant_in_any_scenario() {
    let mut total = 0;
    for (name, sc) in scenarios() {
        let r = run(name, Rules::FIXED, sc);
        total += r.states;
        if let Some(c) = &r.safety {
            panic!("{name}: the fixed rules break safety:\n{c}");
        }
        if let Some(c) = &r.wedge {
            panic!("{name}: the fixed rules wedge:\n{c}");
        }
    }
    eprintln!("fixed rules: {total} states over every scenario, no counterexample");
}

/// One finding: its scenario, the fix that is off, and what must break.
fn finding(id: &str, scenario_part: &str, off: fn(&mut Rules), expect: &str) {
    let (name, sc) = scenario(scenario_part);
    let mut rules = Rules::FIXED;
    off(&mut rules);
    for (which, rules) in [("only its fix off", rules), ("the old rules", Rules::OLD)] {
        let r = run(&format!("{id} ({which}): {name}"), rules, sc);
        let found = [&r.safety, &r.wedge].into_iter().flatten().find(|c| c.property.contains(expect));
        match found {
            Some(c) => eprintln!("{id} found ({which}):\n{c}"),
            None => panic!(
                "{id} ({which}): no counterexample containing {expect:?}; safety: {:?}; wedge: {:?}",
                r.safety.map(|c| c.property),
                r.wedge.map(|c| c.property)
            ),
        }
    }
}

#[test]
fn c1_force_new_cluster_splits_the_cluster() {
    // Joining itself refuses a cluster that does not list the member too:
    // the hand-off path's own rule is what is shown here.
    finding(
        "C1",
        "forced into a new cluster",
        |r| (r.handoff_named, r.join_itself) = (false, false),
        "two clusters take writes",
    );
}

#[test]
fn m1_a_bump_change_mid_restore_splits_the_revision_base() {
    finding("M1", "bump setting change", |r| r.bump_identity = false, "disagree on the revision base");
}

#[test]
fn m2_a_hand_off_inside_the_reconfig_window_wedges_the_member() {
    finding("M2", "one lost volume", |r| r.join_itself = false, "permanent wedge");
}

/// M3 is a runbook's: under the old rules and the old runbook (remove,
/// wipe, let etcd-init hand off) the member is outside for good; the fixed
/// runbook (`member add` it first) is in the scenario the fixed rules pass.
#[test]
fn m3_member_remove_then_hand_off_wedges_the_member() {
    let (name, mut sc) = scenario("member remove");
    sc.allow.repair = false;
    let r = run(&format!("M3 (old rules, old runbook): {name}"), Rules::OLD, sc);
    let c = r.wedge.expect("M3: the old runbook wedges the member");
    eprintln!("M3 found:\n{c}");
    assert!(c.trace.iter().any(|s| s.contains("member remove etcd-")), "{c}");
}

/// The model's own finding, past the review: a quorum lost between the
/// hand-off and reset-member (one crash) made reset-member write `new`;
/// the member stayed outside for good. Fixed by etcd-init joining itself.
#[test]
fn a_crash_between_hand_off_and_reset_member_wedged_the_member() {
    finding("hand-off crash", "one crash", |r| r.join_itself = false, "permanent wedge");
}

/// A fault schedule's finding on real etcd 3.5 (`restore_etcd`, seed
/// 4768727747090039492), past the model that had the first sync as one
/// step: the join's local etcd exited after it had opened its db and
/// before its WAL (its node went down); the retry resumed from the db
/// without `--initial-cluster-state existing`, and the member ran a
/// one-member cluster of its own. No further fault is needed: a sync that
/// fails part-way is an ordinary retry. (The old rules never join
/// themselves, so only the fix's own switch shows it.)
#[test]
fn a_join_resumed_from_a_db_without_its_wal_starts_a_cluster_of_its_own() {
    let (name, sc) = scenario("full stop with one lost volume");
    let mut rules = Rules::FIXED;
    rules.resume_needs_wal = false;
    let r = run(&format!("resume without a WAL (only its fix off): {name}"), rules, sc);
    let c = r.safety.expect("a staged db without a WAL resumed: two clusters");
    eprintln!("found:\n{c}");
    assert!(c.property.contains("two clusters take writes"), "{c}");
    assert!(c.trace.iter().any(|s| s.contains("resumes a staged db without a WAL")), "{c}");
}

#[test]
fn m4_removal_at_a_quorum_keeps_the_condition_unset() {
    finding("M4", "the condition and the template", |r| r.remove_when_all_ready = false, "permanent wedge");
}

#[test]
fn m5_a_second_restore_lands_below_what_clients_saw() {
    finding("M5", "second restore", |r| r.revision_floor = false, "below a revision clients already saw");
}

#[test]
fn m6_a_member_late_past_the_urls_expiry_blocks_the_restore() {
    finding("M6", "late past the URL", |r| r.download_first = false, "permanent wedge");
}
