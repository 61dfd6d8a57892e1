#!/usr/bin/env python3
"""Same-host figures of two vrdma builds side by side, in one run: ib_write_bw and ib_send_bw
with 64 KiB messages, ib_send_lat and ib_write_lat with 8 B, between two sandbox containers.
Rounds alternate between the builds (before, after, before, after, ...) so that both see the
same machine; each figure is the median of its rounds, and the ratios compare after to before.

    bench/sharing_ab.py --before /path/to/main/build --after build [--rounds 3] [--quick]

A build directory is one configured with CMake and built (src/ctl/vrdma, src/daemon/vrdmad,
lib/). Needs root (it creates the sandbox); honours VRDMA_NETNS_PREFIX and VRDMA_RUN_DIR.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

METRICS = [
    # key, label, better
    ("write_bw_64k", "ib_write_bw 64 KiB (MB/s)", "higher"),
    ("send_bw_64k", "ib_send_bw 64 KiB (MB/s)", "higher"),
    ("send_lat_8", "ib_send_lat 8 B (us, typical)", "lower"),
    ("write_lat_8", "ib_write_lat 8 B (us, typical)", "lower"),
]


def build_env(build):
    build = os.path.abspath(build)
    env = dict(os.environ)
    env["VRDMA_BIN"] = os.path.join(build, "src", "ctl", "vrdma")
    env["VRDMA_DAEMON"] = os.path.join(build, "src", "daemon", "vrdmad")
    env["VRDMA_LIBDIR"] = os.path.join(build, "lib")
    for path in (env["VRDMA_BIN"], env["VRDMA_DAEMON"], env["VRDMA_LIBDIR"]):
        if not os.path.exists(path):
            sys.exit(f"sharing_ab.py: {path} does not exist (is {build} a built build directory?)")
    return env


def measure_one(quick):
    """In a child process whose environment names one build: one round of every metric."""
    from vrdma_py import baselines as b
    from vrdma_py.sandbox import Sandbox

    n_bw = 5000 if quick else 20000
    n_lat = 5000 if quick else 20000
    out = {}
    with Sandbox(hosts=1, containers=2) as sb:
        out["write_bw_64k"] = b.perftest_bw(sb, "ib_write_bw", 65536, n_bw)[0]
        out["send_bw_64k"] = b.perftest_bw(sb, "ib_send_bw", 65536, n_bw)[0]
        out["send_lat_8"] = b.perftest_lat(sb, "ib_send_lat", 8, n_lat)["typical"]
        out["write_lat_8"] = b.perftest_lat(sb, "ib_write_lat", 8, n_lat)["typical"]
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="build directory measured first in each round (baseline)")
    ap.add_argument("--after", help="build directory compared with it")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per build (median)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    ap.add_argument("--measure-one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure_one:
        return measure_one(args.quick)
    if not args.before or not args.after:
        ap.error("--before and --after are required")
    if os.geteuid() != 0:
        sys.exit("sharing_ab.py: run as root (it creates network namespaces)")
    builds = {"before": build_env(args.before), "after": build_env(args.after)}
    samples = {name: {k: [] for k, _, _ in METRICS} for name in builds}
    for r in range(args.rounds):
        for name, env in builds.items():
            print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr)
            cmd = [sys.executable, os.path.abspath(__file__), "--measure-one"]
            if args.quick:
                cmd.append("--quick")
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if p.returncode != 0:
                sys.exit(f"{name} round {r + 1} failed:\n{p.stdout}\n{p.stderr}")
            row = json.loads(p.stdout.strip().splitlines()[-1])
            for k in row:
                samples[name][k].append(row[k])
    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    print(f"\nsame host, median of {args.rounds} rounds each, containers h0c0 <-> h0c1")
    print(f"  before: {os.path.abspath(args.before)}\n  after:  {os.path.abspath(args.after)}\n")
    print(f"{'metric':32} {'before':>10} {'after':>10}   after/before (>1: after is better)")
    for k, label, better in METRICS:
        b, a = med["before"][k], med["after"][k]
        ratio = a / b if better == "higher" else b / a
        print(f"{label:32} {b:10.3g} {a:10.3g}   {ratio:.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
