//! An explicit-state model checker: breadth-first over every interleaving,
//! each state kept once (hashed), with the path that first reached it, so a
//! violation comes with its shortest counterexample.
//!
//! Why hand-written rather than `stateright`: what the restore model needs
//! is BFS, a safety check per state and one liveness check (no reachable
//! state from which the good end cannot be reached without faults: no
//! permanent wedge), over a few hundred thousand states. That is the 120
//! lines below, deterministic and without a dependency tree in a CI that is
//! already near its time budget; stateright's actor framework, explorer UI
//! and symmetry reduction would go unused.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// What a model must say: its initial states, the labelled moves from a
/// state (with whether the move is a fault: a crash, a lost volume, an
/// operator's mistake), the safety properties and the good end.
pub trait Model {
    type State: Clone + Eq + Hash + std::fmt::Debug;
    fn init(&self) -> Vec<Self::State>;
    /// Every move from `s`: (label, whether it is a fault, next state).
    fn next(&self, s: &Self::State, out: &mut Vec<(String, bool, Self::State)>);
    /// The first safety property `s` breaks, if any.
    fn unsafe_in(&self, s: &Self::State) -> Option<String>;
    /// Whether `s` is the good end (the restore completed, the cluster whole).
    fn good(&self, s: &Self::State) -> bool;
}

/// A broken property and the moves that lead there from an initial state.
#[derive(Debug)]
pub struct Counterexample {
    pub property: String,
    pub trace: Vec<String>,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.property)?;
        for (i, step) in self.trace.iter().enumerate() {
            writeln!(f, "  {:>2}. {step}", i + 1)?;
        }
        Ok(())
    }
}

/// What one exhaustive run found.
#[derive(Debug)]
pub struct Report {
    pub states: usize,
    pub transitions: usize,
    pub safety: Option<Counterexample>,
    pub wedge: Option<Counterexample>,
}

/// Explores every state reachable from `model.init()` (at most
/// `max_states`: past that the run is refused, never silently cut short).
/// Safety: the shortest path to the first state that breaks a property.
/// Liveness: a state from which no sequence of non-fault moves reaches
/// [`Model::good`]: a permanent wedge (faults may be what led there; what
/// must always remain is a way out without one).
pub fn check<M: Model>(model: &M, max_states: usize) -> Result<Report, String> {
    let mut index: HashMap<M::State, usize> = HashMap::new();
    let mut states: Vec<M::State> = Vec::new();
    // For each state: the state and move that first reached it.
    let mut parent: Vec<Option<(usize, String)>> = Vec::new();
    // Non-fault edges, reversed (for the backward search from good states).
    let mut calm_into: Vec<Vec<usize>> = Vec::new();
    let mut queue = VecDeque::new();
    for s in model.init() {
        if !index.contains_key(&s) {
            index.insert(s.clone(), states.len());
            states.push(s);
            parent.push(None);
            calm_into.push(Vec::new());
            queue.push_back(states.len() - 1);
        }
    }
    let mut safety = None;
    let mut transitions = 0;
    let mut moves = Vec::new();
    while let Some(at) = queue.pop_front() {
        if safety.is_none() {
            if let Some(property) = model.unsafe_in(&states[at]) {
                safety = Some(Counterexample { property, trace: trace(&parent, at) });
            }
        }
        moves.clear();
        model.next(&states[at], &mut moves);
        for (label, fault, next) in moves.drain(..) {
            transitions += 1;
            let to = match index.get(&next) {
                Some(&to) => to,
                None => {
                    if states.len() >= max_states {
                        return Err(format!("more than {max_states} states: the model's bounds are too wide"));
                    }
                    index.insert(next.clone(), states.len());
                    states.push(next);
                    parent.push(Some((at, label)));
                    calm_into.push(Vec::new());
                    queue.push_back(states.len() - 1);
                    states.len() - 1
                }
            };
            if !fault {
                calm_into[to].push(at);
            }
        }
    }
    // Every state that can reach a good one without a fault.
    let mut rescued = vec![false; states.len()];
    let mut back: Vec<usize> = (0..states.len()).filter(|&i| model.good(&states[i])).collect();
    for &g in &back {
        rescued[g] = true;
    }
    while let Some(s) = back.pop() {
        for &p in &calm_into[s] {
            if !rescued[p] {
                rescued[p] = true;
                back.push(p);
            }
        }
    }
    // The wedged state reached first (BFS order: the shortest trace).
    let wedge = (0..states.len()).find(|&i| !rescued[i]).map(|i| Counterexample {
        property: format!("permanent wedge: no way to the good end without a fault from\n  {:?}", states[i]),
        trace: trace(&parent, i),
    });
    Ok(Report { states: states.len(), transitions, safety, wedge })
}

fn trace(parent: &[Option<(usize, String)>], mut at: usize) -> Vec<String> {
    let mut steps = Vec::new();
    while let Some(Some((p, label))) = parent.get(at) {
        steps.push(label.clone());
        at = *p;
    }
    steps.reverse();
    steps
}
