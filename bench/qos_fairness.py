#!/usr/bin/env python3
"""QoS fairness benchmark: per-container throughput over time on one link between two hosts.

Four senders in containers of host 0 (h0c0..h0c3) run ib_write_bw -D to receivers on host 1,
with rules set by `vrdma qos set`: h0c0 weight 1, h0c1 weight 3, h0c2 limited to 100 MB/s,
h0c3 weight 1 starting late and stopping early. h0's `vrdma status` is sampled every
--interval seconds; the bytes each container's flows sent give its throughput. Writes
fairness.json (samples and rules), fairness.png (the plot) and fairness.md (shares over the
window when all four sent) to --out.

Needs root (it creates the sandbox). Run from a build tree or an installed vrdma.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from vrdma_py.sandbox import Sandbox, container_ip, vrdma  # noqa: E402

RULES = {0: "weight=1", 1: "weight=3", 2: "rate=100M", 3: "weight=1"}


def sample():
    st = json.loads(vrdma("status", "--host", "h0", "--json").stdout)
    out = {}
    for f in st.get("qos", []):
        out[f["container"]] = out.get(f["container"], 0) + f["bytes"]
    return time.monotonic(), out


def start_pair(sb, i, seconds):
    srv = sb.start(f"h1c{i}", "ib_write_bw", "-F", "-D", str(seconds))
    if not sb.wait_listening(f"h1c{i}", 18515, timeout=20):
        raise RuntimeError(f"ib_write_bw server on h1c{i} never listened")
    cli = sb.start(f"h0c{i}", "ib_write_bw", "-F", "-D", str(seconds), container_ip(f"h1c{i}"))
    return srv, cli


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-qos", help="directory for the results")
    ap.add_argument("--seconds", type=int, default=24, help="how long the first senders run")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--plot-only", action="store_true",
                    help="plot the fairness.json already in --out")
    args = ap.parse_args()
    if args.plot_only:
        with open(os.path.join(args.out, "fairness.json")) as f:
            samples = json.load(f)["samples"]
        return report(args, samples, args.seconds // 3, args.seconds // 3)
    if os.geteuid() != 0:
        sys.exit("qos_fairness.py: run as root (it creates network namespaces)")
    os.makedirs(args.out, exist_ok=True)
    late_start, late_len = args.seconds // 3, args.seconds // 3
    samples = []
    with Sandbox(hosts=2, containers=4) as sb:
        ips = {i: container_ip(f"h0c{i}") for i in RULES}
        for i, rule in RULES.items():
            vrdma("qos", "set", "--host", "h0", f"container={ips[i]}:{rule}")
        procs = []
        for i in (0, 1, 2):
            procs += start_pair(sb, i, args.seconds)
        t_start = time.monotonic()
        late = None
        while time.monotonic() - t_start < args.seconds + 2:
            if late is None and time.monotonic() - t_start >= late_start:
                late = start_pair(sb, 3, late_len)
                procs += late
            t, b = sample()
            samples.append({"t": t - t_start, "bytes": {str(i): b.get(ips[i], 0) for i in RULES}})
            time.sleep(args.interval)
        for p in procs:
            p.wait(60)
    report(args, samples, late_start, late_len)


def report(args, samples, late_start, late_len):
    # Throughput between consecutive samples.
    series = {i: [] for i in RULES}
    times = []
    for a, b in zip(samples, samples[1:]):
        dt = b["t"] - a["t"]
        times.append(b["t"])
        for i in RULES:
            series[i].append((b["bytes"][str(i)] - a["bytes"][str(i)]) / dt / 1e6)
    # Shares while all four sent (the middle third, trimmed by a second each side).
    lo, hi = late_start + 1, late_start + late_len - 1
    window = [k for k, t in enumerate(times) if lo <= t <= hi]
    mean = {i: sum(series[i][k] for k in window) / max(1, len(window)) for i in RULES}
    with open(os.path.join(args.out, "fairness.json"), "w") as f:
        json.dump({"rules": {f"h0c{i}": r for i, r in RULES.items()}, "samples": samples,
                   "mean_MBps_all_four": {f"h0c{i}": mean[i] for i in RULES}}, f, indent=2)
    with open(os.path.join(args.out, "fairness.md"), "w") as f:
        f.write("## QoS: per-container throughput on one link (ib_write_bw -D, 64 KiB)\n\n")
        f.write("| container | rule | MB/s while all four send |\n|---|---|---|\n")
        for i in RULES:
            f.write(f"| h0c{i} | {RULES[i]} | {mean[i]:.1f} |\n")
        if mean[0] > 0:
            f.write(f"\nweights 1:3 measured 1:{mean[1] / mean[0]:.2f}; "
                    f"limit 100 MB/s measured {mean[2]:.1f} MB/s\n")
        f.write("\n![per-container throughput](fairness.png)\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for i in RULES:
            ax.plot(times, series[i], label=f"h0c{i} ({RULES[i]})")
        ax.axhline(100, color="grey", linestyle=":", linewidth=1, label="100 MB/s limit")
        ax.set_xlabel("seconds")
        ax.set_ylabel("MB/s (10^6 bytes/s)")
        ax.set_title("vrdma QoS: per-container throughput on one link between two hosts")
        ax.legend(loc="upper right", fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "fairness.png"), dpi=110)
    except ImportError:
        # Debian's python3-matplotlib is in /usr/bin/python3's path: plot from the JSON there.
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--out", args.out,
                            "--plot-only"], check=False, timeout=120)
        else:
            print("matplotlib missing: no plot", file=sys.stderr)
    with open(os.path.join(args.out, "fairness.md")) as f:
        print(f.read())


if __name__ == "__main__":
    main()
