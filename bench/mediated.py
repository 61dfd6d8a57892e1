#!/usr/bin/env python3
"""The mediated path's cost on one host: ib_write_bw 64 KiB and ib_send_lat 8 B between
containers of two tenants that `--allow red->blue` pairs (through vrdmad's router), against the
direct same-tenant path (shared memory) and against TCP (iperf3, sockperf) between the same
containers, in one run. Rounds alternate the three paths so that each sees the same machine;
each figure is the median of its rounds.

    vrdma bench --mediated [--rounds 3] [--quick] [--json FILE]
    bench/mediated.py [--rounds 3] [--quick] [--json FILE]

Containers: h0c0 red (the client everywhere), h0c1 blue (mediated server, TCP server), h0c2
red (direct server). Needs root (it creates the sandbox); honours VRDMA_NETNS_PREFIX and
VRDMA_RUN_DIR; any sandbox that is up is replaced, and this one is taken down at the end.
"""

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from vrdma_py import baselines as b  # noqa: E402
from vrdma_py.sandbox import Sandbox  # noqa: E402

CLIENT, MEDIATED, DIRECT = "h0c0", "h0c1", "h0c2"
TENANTS = ["--tenant", "red=10.77.0.10/32", "--tenant", "blue=10.77.0.11/32",
           "--tenant", "red=10.77.0.12/32", "--daemon-arg=--allow=red->blue"]


def one_round(sb, quick):
    n_bw = 5000 if quick else 20000
    n_lat = 5000 if quick else 20000
    secs = 2 if quick else 4
    r = {}
    for name, server in (("mediated", MEDIATED), ("direct", DIRECT)):
        r[f"{name}_write_bw"] = b.perftest_bw(sb, "ib_write_bw", 65536, n_bw, server=server,
                                              client=CLIENT)[0]
        r[f"{name}_send_lat"] = b.perftest_lat(sb, "ib_send_lat", 8, n_lat, server=server,
                                               client=CLIENT)["typical"]
    r["tcp_bw"] = b.iperf3(sb, seconds=secs, server=MEDIATED, client=CLIENT)
    r["tcp_lat"] = b.sockperf_lat(sb, size=8, seconds=secs, server=MEDIATED, client=CLIENT)["p50"]
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(prog="vrdma bench --mediated",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds (median; default 3)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("vrdma bench --mediated: run as root (it creates network namespaces)")
    samples = {}
    with Sandbox(hosts=1, containers=3, extra_args=TENANTS) as sb:
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
            for k, v in one_round(sb, args.quick).items():
                samples.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"\none host, median of {args.rounds} rounds; client {CLIENT} (red), mediated server "
          f"{MEDIATED} (blue), direct server {DIRECT} (red)\n")
    print(f"{'figure':34} {'mediated':>10} {'direct':>10} {'TCP':>10}   "
          "mediated/direct  mediated/TCP (>1: mediated is better)")
    bw = (med["mediated_write_bw"], med["direct_write_bw"], med["tcp_bw"])
    lat = (med["mediated_send_lat"], med["direct_send_lat"], med["tcp_lat"])
    print(f"{'64 KiB throughput (MB/s)':34} {bw[0]:10.1f} {bw[1]:10.1f} {bw[2]:10.1f}   "
          f"{bw[0] / bw[1]:14.2f}x {bw[0] / bw[2]:12.2f}x")
    print(f"{'8 B latency, typical/p50 (us)':34} {lat[0]:10.2f} {lat[1]:10.2f} {lat[2]:10.2f}   "
          f"{lat[1] / lat[0]:14.2f}x {lat[2] / lat[0]:12.2f}x")
    print("\nthroughput: ib_write_bw / iperf3; latency: ib_send_lat (typical) / sockperf "
          "ping-pong (p50, 14 B, its smallest); both one-way")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
