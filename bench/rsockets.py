#!/usr/bin/env python3
"""rsockets benchmark: Debian's rstream over vrdma's rsockets against the same rstream over
the containers' TCP (rstream -T s), and iperf3 under LD_PRELOAD=librspreload.so against
iperf3 over TCP, between the same two containers, on one host (h0c0, h0c1) and across two
hosts (h1c0 serves, h0c0 connects). Each measurement is repeated --rounds times, interleaved;
the median is printed with its ratio (> 1 means rsockets are better), and next to it what
the same path gives to verbs (perftest ib_write_bw, ib_write_lat): rsockets ride on it.

rstream's figures are its own: usec/xfer is the time of one transfer (half a round trip in
its latency shape), Gb/sec counts the bytes of both directions.

Needs root (it creates the sandbox). Run from a build tree or an installed vrdma.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from vrdma_py import baselines as b  # noqa: E402
from vrdma_py.sandbox import Sandbox, container_ip  # noqa: E402

PRELOAD = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"
ROW = re.compile(r"^custom\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)\s*$", re.M)


def pair(sb, server, client, server_cmd, client_cmd, lib=True, timeout=300):
    """Runs a server and its client (started again while the server does not listen yet);
    returns the client's output."""
    s = sb.start(server, *server_cmd, lib=lib)
    try:
        for _ in range(200):
            c = sb.start(client, *client_cmd, lib=lib)
            rc = c.wait(timeout)
            # iperf3 -J exits 0 when it cannot connect; its JSON says so.
            if rc == 0 and '"error":' not in c.out:
                if s.wait(60) != 0:
                    raise RuntimeError(f"{' '.join(server_cmd)} failed:\n{s.out}\n{s.err}")
                return c.out
            if s.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"{' '.join(client_cmd)} failed:\n{c.out}\n{c.err}\n{s.out}\n{s.err}")
    finally:
        s.kill()


def rstream(sb, server, client, size, count, iters, tcp, port):
    args = ["-S", str(size), "-C", str(count), "-I", str(iters), "-p", str(port)]
    if tcp:
        args += ["-T", "s"]
    out = pair(sb, server, client, ["rstream", *args],
               ["rstream", "-s", container_ip(server), *args], lib=not tcp)
    m = ROW.search(out)
    if not m:
        raise RuntimeError(f"no result in rstream output:\n{out}")
    return {"gbps": float(m.group(2)), "usec": float(m.group(3))}


def iperf3(sb, server, client, secs, preload, port):
    env = ["env", f"LD_PRELOAD={PRELOAD}"] if preload else []
    out = pair(sb, server, client, [*env, "iperf3", "-s", "-1", "-p", str(port)],
               [*env, "iperf3", "-c", container_ip(server), "-p", str(port), "-t", str(secs),
                "-J"], lib=preload)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9


METRICS = [
    # name, unit, better, function(sb, server, client, quick, tcp, port)
    ("rstream 64 B latency", "us/xfer", "lower",
     lambda sb, s, c, q, tcp, p: rstream(sb, s, c, 64, 1, 2000 if q else 20000, tcp, p)["usec"]),
    ("rstream 4 KiB latency", "us/xfer", "lower",
     lambda sb, s, c, q, tcp, p: rstream(sb, s, c, 4096, 1, 1000 if q else 5000, tcp, p)["usec"]),
    ("rstream 64 KiB bandwidth", "Gb/s", "higher",
     lambda sb, s, c, q, tcp, p: rstream(sb, s, c, 65536, 200 if q else 2000, 1, tcp, p)["gbps"]),
    ("rstream 1 MiB bandwidth", "Gb/s", "higher",
     lambda sb, s, c, q, tcp, p: rstream(sb, s, c, 1 << 20, 20 if q else 100, 1, tcp, p)["gbps"]),
    ("iperf3 (librspreload vs TCP)", "Gb/s", "higher",
     lambda sb, s, c, q, tcp, p: iperf3(sb, s, c, 2 if q else 4, not tcp, p)),
]


def measure(sb, server, client, rounds, quick):
    samples = {m[0]: {"rsocket": [], "tcp": []} for m in METRICS}
    samples["verbs"] = {"write_bw_64k_gbps": [], "write_lat_us": []}
    port = 7800
    n = 2000 if quick else 10000
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
        for name, _, _, fn in METRICS:
            for kind in ("rsocket", "tcp"):
                port += 1
                samples[name][kind].append(fn(sb, server, client, quick, kind == "tcp", port))
        mbps = b.perftest_bw(sb, "ib_write_bw", 65536, n, server=server, client=client)[0]
        samples["verbs"]["write_bw_64k_gbps"].append(mbps * 8 / 1000)
        samples["verbs"]["write_lat_us"].append(
            b.perftest_lat(sb, "ib_write_lat", 8, n, server=server, client=client)["avg"])
    return samples


def report(title, samples):
    print(f"\n{title}\n")
    print(f"| metric | rsockets | TCP | ratio |\n| --- | --- | --- | --- |")
    for name, unit, better, _ in METRICS:
        rs = statistics.median(samples[name]["rsocket"])
        tcp = statistics.median(samples[name]["tcp"])
        ratio = rs / tcp if better == "higher" else tcp / rs
        print(f"| {name} ({unit}) | {rs:.3g} | {tcp:.3g} | {ratio:.2f}x |")
    v = samples["verbs"]
    print(f"\nverbs on the same path: ib_write_bw 64 KiB "
          f"{statistics.median(v['write_bw_64k_gbps']):.3g} Gb/s, ib_write_lat 8 B "
          f"{statistics.median(v['write_lat_us']):.3g} us (one way, mean, as rstream's)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="repetitions per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="fewer transfers")
    ap.add_argument("--where", choices=["one", "cross", "both"], default="both",
                    help="one host, across two hosts, or both (default)")
    ap.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("rsockets.py: run as root (it creates network namespaces)")
    results = {}
    if args.where in ("one", "both"):
        with Sandbox(hosts=1, containers=2) as sb:
            results["one_host"] = measure(sb, "h0c0", "h0c1", args.rounds, args.quick)
        report(f"rsockets on one host (h0c1 -> h0c0), median of {args.rounds} rounds",
               results["one_host"])
    if args.where in ("cross", "both"):
        with Sandbox(hosts=2, containers=1) as sb:
            results["cross_host"] = measure(sb, "h1c0", "h0c0", args.rounds, args.quick)
        report(f"rsockets across hosts (h0c0 -> h1c0), median of {args.rounds} rounds",
               results["cross_host"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
