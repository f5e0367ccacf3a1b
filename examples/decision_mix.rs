//! The decision cost of the load benchmark alone: the four recorded reviews
//! (backup CREATE, backup UPDATE, HostedCluster with a presigned URL, etcd
//! StatefulSet mutation) parsed, decided and serialised on one thread.
//!
//! Small enough to profile with instruction counts, which do not depend on the
//! machine's load:
//!
//! ```sh
//! CARGO_PROFILE_RELEASE_DEBUG=true cargo build --release --example decision_mix
//! valgrind --tool=callgrind target/release/examples/decision_mix 20 200
//! ```
//!
//! `decision_mix [warmup-rounds] [timed-rounds] [review]` (default 200 and
//! 2000, as in `bench_load`; `review` 0-3 keeps one review of the mix, to
//! profile it alone); prints the mean µs per request.

#[path = "support/mix.rs"]
mod mix;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>().ok());
    let warmup = args.next().flatten().unwrap_or(200);
    let rounds = args.next().flatten().unwrap_or(2000);
    let mut reqs = mix::recorded();
    if let Some(only) = args.next().flatten() {
        reqs = reqs.into_iter().skip(only as usize).take(1).collect();
    }
    let cost = mix::decision_cost(&reqs, &mix::fixture("statefulset.yaml", "hcp"), warmup, rounds);
    println!(
        "decision cost (parse + review + serialise, 4-review mix, one thread): {:.1} µs per request",
        cost.as_secs_f64() * 1e6
    );
}
