#!/usr/bin/env python3
"""Same-host benchmark: vrdma (unmodified perftest) against UCX shared memory
(ucx_perftest, UCX_TLS=posix,self) and TCP (iperf3, sockperf), between the same
two sandbox containers, in one run. Each measurement is repeated --rounds times,
interleaved, and the median is reported with its ratio to the baselines.

Needs root (it creates the sandbox). Run from a build tree or an installed vrdma.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from vrdma_py import baselines as b  # noqa: E402
from vrdma_py.sandbox import Sandbox  # noqa: E402


def measure(sb, rounds, quick):
    n_bw = 5000 if quick else 20000
    n_rate = 100000 if quick else 500000
    n_lat = 5000 if quick else 20000
    secs = 2 if quick else 4
    samples = {k: [] for k in (
        "vrdma_write_bw_64k", "ucx_tag_bw_64k", "tcp_bw",
        "vrdma_send_lat_8", "vrdma_write_lat_8", "ucx_tag_lat_8", "tcp_lat_8",
        "vrdma_send_rate_8", "vrdma_write_rate_8", "ucx_tag_rate_8")}
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
        samples["vrdma_write_bw_64k"].append(b.perftest_bw(sb, "ib_write_bw", 65536, n_bw)[0])
        samples["ucx_tag_bw_64k"].append(b.ucx(sb, "tag_bw", 65536, n_bw, "posix,self")["bw"])
        samples["tcp_bw"].append(b.iperf3(sb, secs))
        samples["vrdma_send_lat_8"].append(b.perftest_lat(sb, "ib_send_lat", 8, n_lat)["typical"])
        samples["vrdma_write_lat_8"].append(b.perftest_lat(sb, "ib_write_lat", 8, n_lat)["typical"])
        samples["ucx_tag_lat_8"].append(b.ucx(sb, "tag_lat", 8, n_lat, "posix,self")["lat_p50"])
        samples["tcp_lat_8"].append(b.sockperf_lat(sb, 8, secs)["p50"])
        samples["vrdma_send_rate_8"].append(b.perftest_bw(sb, "ib_send_bw", 8, n_rate)[1])
        samples["vrdma_write_rate_8"].append(b.perftest_bw(sb, "ib_write_bw", 8, n_rate)[1])
        samples["ucx_tag_rate_8"].append(b.ucx(sb, "tag_bw", 8, n_rate, "posix,self")["rate"])
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="repetitions per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations (about a minute)")
    ap.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("same_host.py: run as root (it creates network namespaces)")

    with Sandbox(hosts=1, containers=2) as sb:
        samples = measure(sb, args.rounds, args.quick)
    med = {k: statistics.median(v) for k, v in samples.items()}

    rows = [
        ("Throughput 64 KiB (MB/s)", "vrdma ib_write_bw", med["vrdma_write_bw_64k"],
         [("UCX posix tag_bw", med["ucx_tag_bw_64k"]), ("TCP iperf3", med["tcp_bw"])], "higher"),
        ("Latency 8 B (us, one way, p50)", "vrdma ib_send_lat", med["vrdma_send_lat_8"],
         [("UCX posix tag_lat", med["ucx_tag_lat_8"]), ("TCP sockperf 14B", med["tcp_lat_8"])],
         "lower"),
        ("Latency 8 B (us, one way, p50)", "vrdma ib_write_lat", med["vrdma_write_lat_8"],
         [("UCX posix tag_lat", med["ucx_tag_lat_8"]), ("TCP sockperf 14B", med["tcp_lat_8"])],
         "lower"),
        ("Message rate 8 B (Mmsg/s)", "vrdma ib_send_bw", med["vrdma_send_rate_8"],
         [("UCX posix tag_bw", med["ucx_tag_rate_8"])], "higher"),
        ("Message rate 8 B (Mmsg/s)", "vrdma ib_write_bw", med["vrdma_write_rate_8"],
         [("UCX posix tag_bw", med["ucx_tag_rate_8"])], "higher"),
    ]
    print(f"\nvrdma same-host benchmark: median of {args.rounds} rounds, containers h0c0 <-> h0c1\n")
    print(f"{'metric':32} {'vrdma':>22} {'value':>10}   vs baseline (ratio; >1 means vrdma is better)")
    for metric, name, val, bases, better in rows:
        parts = []
        for bname, bval in bases:
            ratio = val / bval if better == "higher" else bval / val
            parts.append(f"{bname} {bval:.3g} -> {ratio:.2f}x")
        print(f"{metric:32} {name:>22} {val:10.3g}   " + "; ".join(parts))

    targets = [
        ("ib_write_bw 64 KiB >= 1.5x UCX tag_bw 64 KiB",
         med["vrdma_write_bw_64k"] / med["ucx_tag_bw_64k"], 1.5),
        ("ib_send_lat 8 B <= UCX tag_lat 8 B (ratio UCX/vrdma >= 1)",
         med["ucx_tag_lat_8"] / med["vrdma_send_lat_8"], 1.0),
        ("8 B message rate >= UCX (ib_send_bw / tag_bw)",
         med["vrdma_send_rate_8"] / med["ucx_tag_rate_8"], 1.0),
    ]
    print("\ntargets:")
    for name, ratio, goal in targets:
        print(f"  {'met    ' if ratio >= goal else 'NOT met'}  {name}: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
