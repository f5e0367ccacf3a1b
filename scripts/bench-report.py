#!/usr/bin/env python3
"""Medians of the last `cargo bench --bench decision` run, and the Wasm/native ratios.

Reads $CARGO_TARGET_DIR/criterion/<scenario>/<runner>/new/estimates.json and
prints a Markdown table (microseconds; 95 % confidence interval of the median).
"""
import json
import os
import pathlib
import sys

target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", pathlib.Path.home() / ".cache/hcp-etcd-admission/target"))
root = target / "criterion"
if not root.is_dir():
    sys.exit(f"no criterion results under {root}: run cargo bench --bench decision first")

def median(scenario, runner):
    p = root / scenario / runner / "new" / "estimates.json"
    if not p.exists():
        return None
    m = json.loads(p.read_text())["median"]
    return m["point_estimate"] / 1e3, m["confidence_interval"]["lower_bound"] / 1e3, m["confidence_interval"]["upper_bound"] / 1e3

scenarios = ["backup_create_s3_kms", "backup_update_immutable", "hostedcluster_presigned", "statefulset_mutation_3"]
cell = lambda v: f"{v[0]:.1f} ({v[1]:.1f}–{v[2]:.1f})" if v else "–"

print("| scenario | native µs | wasm warm µs | wasm fresh instance, before µs | wasm fresh instance, shipped µs | yardstick fresh µs | yardstick warm µs | shipped fresh / yardstick fresh | warm / native |")
print("|---|---|---|---|---|---|---|---|---|")
for s in scenarios:
    n, w, f, b, yf, yw = (median(s, r) for r in ("native", "wasm_warm", "wasm_fresh", "wasm_fresh_uninitialised", "yardstick_fresh", "yardstick_warm"))
    if not n:
        continue
    ratio = lambda a, z: f"{a[0] / z[0]:.1f}×" if a and z else "–"
    print(f"| {s} | {cell(n)} | {cell(w)} | {cell(b)} | {cell(f)} | {cell(yf)} | {cell(yw)} | {ratio(f, yf)} | {ratio(w, n)} |")

p = root / "percentiles.json"
if p.exists():
    rows = json.loads(p.read_text())
    print()
    print("| scenario | native p50 / p90 / p99 / max µs | wasm warm p50 / p90 / p99 / max µs | wasm fresh (shipped) p50 / p90 / p99 / max µs | yardstick fresh p50 / p90 / p99 / max µs |")
    print("|---|---|---|---|---|")
    f = lambda d: " / ".join(f"{d[k]:.1f}" for k in ("p50", "p90", "p99", "max")) if d else "–"
    for row in rows:
        print(f"| {row['scenario']} | {f(row['native'])} | {f(row['wasm_warm'])} | {f(row.get('wasm_fresh'))} | {f(row.get('yardstick_fresh'))} |")
    print(f"\n(single calls: {rows[0]['calls']} per runner and scenario, {rows[0].get('fresh_calls', '–')} for fresh instances)")
    faults = [(r["scenario"], r.get("faults_per_fresh_call")) for r in rows if r.get("faults_per_fresh_call")]
    if faults:
        print()
        print("| scenario | page faults per fresh instance + validate, shipped | yardstick |")
        print("|---|---|---|")
        for name, f in faults:
            print(f"| {name} | {f['shipped']:.0f} | {f['yardstick']:.0f} |")

inst = [(r, median("instantiate_only", r)) for r in ("wasm_shipped", "wasm_before", "yardstick")]
if any(v for _, v in inst):
    print()
    print("| fresh instance + wapc_init, no call | µs |")
    print("|---|---|")
    for r, v in inst:
        print(f"| {r} | {cell(v)} |")

