"""Runs vrdma (perftest) and the baselines it is compared with (UCX's
ucx_perftest, iperf3, sockperf) between two sandbox containers and parses their
results. Every function returns plain numbers: MB/s, Mmsg/s or microseconds."""

import json
import re

from .perftest_output import bw_rows, lat_rows
from .sandbox import container_ip

PERFTEST_PORT = 18515
UCX_PORT = 13337
SOCKPERF_PORT = 11111


def _pair(sb, server, client, srv_cmd, cli_cmd, port, lib=True, timeout=300, proto="t"):
    s = sb.start(server, *srv_cmd, lib=lib)
    if not sb.wait_listening(server, port, proto=proto):
        s.kill()
        s.wait(5)
        raise RuntimeError(f"{srv_cmd[0]} server did not start:\n{s.out}\n{s.err}")
    rc, out, err = sb.run(client, *cli_cmd, lib=lib, timeout=timeout)
    try:
        s.wait(30)
    except AssertionError:
        s.kill()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cli_cmd)} failed ({rc}):\n{out}\n{err}")
    return out


def _perftest_row(sb, prog, size, iters, parse, server, client, extra):
    """Runs a perftest program between two containers; returns the client's last result row."""
    args = [prog, "-s", str(size), "-n", str(iters), *extra]
    out = _pair(sb, server, client, args, args + [container_ip(server)], PERFTEST_PORT)
    rows = parse(out)
    if not rows:
        raise RuntimeError(f"no result from {prog}:\n{out}")
    return rows[-1]


def perftest_bw(sb, prog, size, iters, server="h0c0", client="h0c1", extra=()):
    """(bw_avg MB/s, msg_rate Mmsg/s) from perftest's client."""
    _, _, _, avg, rate = _perftest_row(sb, prog, size, iters, bw_rows, server, client, extra)
    return avg, rate


def perftest_lat(sb, prog, size, iters, server="h0c0", client="h0c1", extra=()):
    """Latency percentiles in usec: dict(min, typical, avg, p99, p999)."""
    r = _perftest_row(sb, prog, size, iters, lat_rows, server, client, extra)
    return {"min": r[2], "typical": r[4], "avg": r[5], "p99": r[7], "p999": r[8]}


_UCX_FINAL = re.compile(r"^Final:\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                        r"\s+(\d+)\s+(\d+)", re.M)


def ucx(sb, test, size, iters, tls, server="h0c0", client="h0c1"):
    """ucx_perftest: dict(lat_p50 usec, lat_avg usec, bw MB/s, rate Mmsg/s)."""
    env = ["env", f"UCX_TLS={tls}"]
    srv = env + ["ucx_perftest", "-p", str(UCX_PORT)]
    cli = env + ["ucx_perftest", "-p", str(UCX_PORT), container_ip(server), "-t", test,
                 "-s", str(size), "-n", str(iters)]
    out = _pair(sb, server, client, srv, cli, UCX_PORT, lib=False)
    m = _UCX_FINAL.search(out)
    if not m:
        raise RuntimeError(f"no result from ucx_perftest:\n{out}")
    return {"lat_p50": float(m.group(2)), "lat_avg": float(m.group(3)),
            "bw": float(m.group(5)), "rate": int(m.group(7)) / 1e6}


def iperf3(sb, seconds=3, server="h0c0", client="h0c1", streams=1):
    """TCP throughput in MB/s (10^6 bytes/s, as perftest reports)."""
    out = _pair(sb, server, client, ["iperf3", "-s", "-1"],
                ["iperf3", "-c", container_ip(server), "-t", str(seconds), "-P", str(streams), "-J"],
                5201, lib=False)
    data = json.loads(out)
    return data["end"]["sum_received"]["bits_per_second"] / 8 / 1e6


def sockperf_lat(sb, size=8, seconds=3, server="h0c0", client="h0c1"):
    """TCP one-way latency (half round trip) in usec: dict(p50, avg, p99, p999).
    sockperf's smallest message is 14 bytes; smaller sizes are raised to it."""
    size = max(size, 14)
    s = sb.start(server, "sockperf", "sr", "--tcp", "-i", container_ip(server),
                 "-p", str(SOCKPERF_PORT), lib=False)
    try:
        if not sb.wait_listening(server, SOCKPERF_PORT):
            raise RuntimeError(f"sockperf server did not start:\n{s.err}")
        rc, out, err = sb.run(client, "sockperf", "pp", "--tcp", "-i", container_ip(server),
                              "-p", str(SOCKPERF_PORT), "-m", str(size), "-t", str(seconds),
                              lib=False, timeout=seconds + 30)
    finally:
        s.kill()
    text = out + err
    avg = re.search(r"avg-latency=([\d.]+)", text)
    if rc != 0 or not avg:
        raise RuntimeError(f"sockperf failed ({rc}):\n{text}")

    def pct(p):
        m = re.search(rf"percentile {p} =\s+([\d.]+)", text)
        return float(m.group(1)) if m else float("nan")

    return {"avg": float(avg.group(1)), "p50": pct("50.000"), "p99": pct("99.000"),
            "p999": pct("99.900")}
