#!/usr/bin/env python3
"""vrdma demo: two containers on one host run unmodified RDMA programs from
Debian's perftest against each other through vrdma, and the same two containers
then measure their own TCP (iperf3, sockperf). Results are printed side by side.

Needs root (the containers are network namespaces). Takes about a minute.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from vrdma_py import baselines as b  # noqa: E402
from vrdma_py.sandbox import Sandbox, container_ip  # noqa: E402


def say(msg):
    print(msg, flush=True)


def main():
    ap = argparse.ArgumentParser(prog="vrdma demo", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3, help="duration of each TCP run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("vrdma demo: run as root (it creates network namespaces)")

    say("vrdma demo: RDMA between two containers, no RNIC, no kernel RDMA module\n")
    with Sandbox(hosts=1, containers=2) as sb:
        say(f"containers: h0c0 {container_ip('h0c0')}   h0c1 {container_ip('h0c1')}"
            "   (network namespaces, one vrdmad)")
        rc, out, err = sb.run("h0c0", "ibv_devinfo", "-v", timeout=30)
        dev = re.search(r"hca_id:\s+(\S+)", out)
        state = re.search(r"state:\s+(\S+)", out)
        gid = re.search(r"GID\[\s*0\]:\s+(.*)", out)
        say(f"ibv_devinfo in h0c0: device {dev.group(1) if dev else '?'}, port "
            f"{state.group(1) if state else '?'}, GID[0] {gid.group(1) if gid else '?'}\n")

        say("running ib_write_bw (64 KiB) h0c1 -> h0c0 ...")
        bw, _ = b.perftest_bw(sb, "ib_write_bw", 65536, 20000)
        say("running ib_send_lat (8 B) ...")
        lat = b.perftest_lat(sb, "ib_send_lat", 8, 20000)
        say(f"running iperf3 for {args.seconds} s between the same containers ...")
        tcp_bw = b.iperf3(sb, args.seconds)
        say(f"running sockperf ping-pong for {args.seconds} s ...")
        tcp_lat = b.sockperf_lat(sb, 8, args.seconds)

    say("")
    say(f"{'':28}{'vrdma (perftest)':>20}{'TCP (same containers)':>26}{'vrdma / TCP':>14}")
    say(f"{'throughput, 64 KiB':28}{bw:>15.0f} MB/s{tcp_bw:>21.0f} MB/s{bw / tcp_bw:>13.1f}x")
    say(f"{'latency p50, one way':28}{lat['typical']:>12.2f} us 8 B"
        f"{tcp_lat['p50']:>17.2f} us 14 B{tcp_lat['p50'] / lat['typical']:>12.1f}x")
    say(f"{'latency p99.9, one way':28}{lat['p999']:>17.2f} us{tcp_lat['p999']:>22.2f} us"
        f"{tcp_lat['p999'] / lat['p999']:>13.1f}x")
    say("\n(programs: Debian's ib_write_bw, ib_send_lat, iperf3, sockperf, unmodified; "
        "TCP latency uses sockperf's smallest message, 14 B)")


if __name__ == "__main__":
    main()
