#!/usr/bin/env python3
"""Cross-host benchmark: vrdma (unmodified perftest, through the hosts' routers) against TCP
between the same two containers (iperf3, sockperf) and UCX over TCP (ucx_perftest,
UCX_TLS=tcp), in one run. The containers are h0c0 and h1c0 of a two-host sandbox; each
measurement is repeated --rounds times, interleaved, and the median is reported with its
ratio to the baselines.

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

SERVER, CLIENT = "h1c0", "h0c0"


def measure(sb, rounds, quick):
    n_bw = 2000 if quick else 10000
    n_lat = 2000 if quick else 10000
    secs = 2 if quick else 4
    pair = {"server": SERVER, "client": CLIENT}
    samples = {k: [] for k in (
        "vrdma_write_bw_64k", "ucx_tcp_bw_64k", "tcp_bw",
        "vrdma_write_lat_8", "vrdma_send_lat_8", "ucx_tcp_lat_8", "tcp_lat_8")}
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
        samples["vrdma_write_bw_64k"].append(
            b.perftest_bw(sb, "ib_write_bw", 65536, n_bw, **pair)[0])
        samples["ucx_tcp_bw_64k"].append(b.ucx(sb, "tag_bw", 65536, n_bw, "tcp", **pair)["bw"])
        samples["tcp_bw"].append(b.iperf3(sb, secs, **pair))
        samples["vrdma_write_lat_8"].append(
            b.perftest_lat(sb, "ib_write_lat", 8, n_lat, **pair)["typical"])
        samples["vrdma_send_lat_8"].append(
            b.perftest_lat(sb, "ib_send_lat", 8, n_lat, **pair)["typical"])
        samples["ucx_tcp_lat_8"].append(
            b.ucx(sb, "tag_lat", 8, n_lat, "tcp", **pair)["lat_p50"])
        samples["tcp_lat_8"].append(b.sockperf_lat(sb, 8, secs, **pair)["p50"])
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="repetitions per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    ap.add_argument("--router-cpus", metavar="LIST",
                    help="run both hosts' router threads on these CPUs (vrdmad --router-cpus): "
                         "in the sandbox, where both hosts share the machine's cores, routers "
                         "on one CPU wake each other without an interrupt between CPUs")
    ap.add_argument("--router-poll-us", type=int, metavar="US",
                    help="routers poll on this long after work before they sleep (vrdmad "
                         "--router-poll-us)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cross_host.py: run as root (it creates network namespaces)")

    extra = [f"--daemon-arg=--router-cpus={args.router_cpus}"] if args.router_cpus else []
    if args.router_poll_us is not None:
        extra.append(f"--daemon-arg=--router-poll-us={args.router_poll_us}")
    with Sandbox(hosts=2, containers=1, extra_args=extra) as sb:
        samples = measure(sb, args.rounds, args.quick)
    med = {k: statistics.median(v) for k, v in samples.items()}

    rows = [
        ("Throughput 64 KiB (MB/s)", "vrdma ib_write_bw", med["vrdma_write_bw_64k"],
         [("TCP iperf3", med["tcp_bw"]), ("UCX tcp tag_bw", med["ucx_tcp_bw_64k"])], "higher"),
        ("Latency 8 B (us, one way, p50)", "vrdma ib_write_lat", med["vrdma_write_lat_8"],
         [("TCP sockperf 14B", med["tcp_lat_8"]), ("UCX tcp tag_lat", med["ucx_tcp_lat_8"])],
         "lower"),
        ("Latency 8 B (us, one way, p50)", "vrdma ib_send_lat", med["vrdma_send_lat_8"],
         [("TCP sockperf 14B", med["tcp_lat_8"]), ("UCX tcp tag_lat", med["ucx_tcp_lat_8"])],
         "lower"),
    ]
    print(f"\nvrdma cross-host benchmark: median of {args.rounds} rounds, "
          f"containers {CLIENT} (host 0) <-> {SERVER} (host 1)" +
          (f", routers on CPUs {args.router_cpus}" if args.router_cpus else "") +
          (f", routers poll {args.router_poll_us} us after work"
           if args.router_poll_us is not None else "") + "\n")
    print(f"{'metric':32} {'vrdma':>20} {'value':>10}   vs baseline (ratio; >1 means vrdma is better)")
    for metric, name, val, bases, better in rows:
        parts = []
        for bname, bval in bases:
            ratio = val / bval if better == "higher" else bval / val
            parts.append(f"{bname} {bval:.3g} -> {ratio:.2f}x")
        print(f"{metric:32} {name:>20} {val:10.3g}   " + "; ".join(parts))

    targets = [
        ("ib_write_bw 64 KiB >= 1.0x container TCP throughput (iperf3)",
         med["vrdma_write_bw_64k"] / med["tcp_bw"], 1.0),
        ("ib_write_bw 64 KiB >= 0.8x UCX over TCP (tag_bw)",
         med["vrdma_write_bw_64k"] / med["ucx_tcp_bw_64k"], 0.8),
        ("ib_write_lat 8 B <= 1.0x container TCP latency (sockperf p50 / vrdma p50)",
         med["tcp_lat_8"] / med["vrdma_write_lat_8"], 1.0),
        ("ib_send_lat 8 B p50 <= 2x UCX over TCP (tag_lat p50; ratio 2 x UCX / vrdma)",
         2 * med["ucx_tcp_lat_8"] / med["vrdma_send_lat_8"], 1.0),
    ]
    print("\ntargets:")
    for name, ratio, goal in targets:
        print(f"  {'met    ' if ratio >= goal else 'NOT met'}  {name}: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
