#!/usr/bin/env python3
"""QoS fairness benchmark: per-container throughput over time on one link between two hosts.

Four senders in containers of host 0 (h0c0..h0c3) run ib_write_bw -D to receivers on host 1,
with rules set by `vrdma qos set`: h0c0 weight 1, h0c1 weight 3, h0c2 limited to 100 MB/s,
h0c3 weight 1 starting late and stopping early (python/vrdma_py/bench_fairness.py); then the
latency class's ib_write_lat p99 idle and while a bulk pair sends on the same link. Writes
fairness.json (samples, rules, shares), fairness.png (the plot) and fairness.md (shares over the
window when all four sent) to --out. `vrdma bench` runs the same measurement in its suite.

Needs root (it creates the sandbox). Run from a build tree or an installed vrdma.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from vrdma_py import bench_fairness  # noqa: E402
from vrdma_py.sandbox import Sandbox  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-qos", help="directory for the results")
    ap.add_argument("--seconds", type=int, default=24, help="how long the first senders run")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--plot-only", action="store_true",
                    help="plot the fairness.json already in --out")
    args = ap.parse_args()
    path = os.path.join(args.out, "fairness.json")
    if args.plot_only:
        with open(path) as f:
            rec = json.load(f)
    else:
        if os.geteuid() != 0:
            sys.exit("qos_fairness.py: run as root (it creates network namespaces)")
        os.makedirs(args.out, exist_ok=True)
        with Sandbox(hosts=2, containers=6) as sb:
            rec = bench_fairness.measure(sb, args.seconds, args.interval)
            rec["latency_class"] = bench_fairness.latency_class(sb)
        with open(path, "w") as f:
            json.dump(rec, f, indent=1)
    md = ["## QoS: per-container throughput on one link (ib_write_bw -D, 64 KiB)", "",
          *bench_fairness.report_md(rec), "", "![per-container throughput](fairness.png)"]
    if rec.get("latency_class"):
        md += ["", *bench_fairness.latency_md(rec["latency_class"])]
    with open(os.path.join(args.out, "fairness.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    try:
        bench_fairness.plot(rec, os.path.join(args.out, "fairness.png"))
    except ImportError:
        # Debian's python3-matplotlib is in /usr/bin/python3's path: plot from the JSON there.
        if not args.plot_only and os.path.exists("/usr/bin/python3"):
            subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--out", args.out,
                            "--plot-only"], check=False, timeout=120)
        else:
            print("matplotlib missing: no plot", file=sys.stderr)
    print("\n".join(md))


if __name__ == "__main__":
    main()
