"""vrdma bench, real clients: UCX over vrdma against UCX over its own shared memory (one host)
and over TCP, and Open MPI ping-pong over vrdma (pml ucx) against Open MPI over TCP (ob1, TCP
BTL), between the same two containers, on one host and across hosts. Ratios > 1 mean vrdma is
better (bandwidth: vrdma ÷ baseline; latency: baseline ÷ vrdma)."""

import os
import re
import shutil

from . import bench_measure as m
from .mpi_job import mpirun
from .sandbox import VRDMA
from .ucx_run import ucx_env

UCX_VRDMA_TLS = "rc_verbs,ud_verbs,self"  # RC for data; UCX needs UD (or a socket) to wire up
PINGPONG = re.compile(r"pingpong size=(\d+) iters=(\d+) lat_us=([\d.]+) bw_MBps=([\d.]+)"
                      r" p50_us=([\d.]+) p99_us=([\d.]+)")


def ucx(b, test, size, iters, tls, server, client, timeout=None):
    """ucx_perftest between two containers; over vrdma (tls names verbs transports) with the
    drop-in libraries and UCX confined to vrdma0:1, else UCX's own transports."""
    verbs = "verbs" in tls
    env = ucx_env(tls, log_info=False) if verbs else {"UCX_TLS": tls}
    srv = ["ucx_perftest", "-p", m.UCX_PORT]
    cli = ["ucx_perftest", "-p", m.UCX_PORT, b.ip(server), "-t", test, "-s", size, "-n", iters]
    run = m._pair(b, server, client, srv, cli, m.UCX_PORT, lib=verbs, env=env, timeout=timeout)
    f = m._UCX_FINAL.search(run.out)
    if not f:
        raise RuntimeError(f"no result from ucx_perftest:\n{run.out[-2000:]}")
    rec = {"size": size, "iterations": int(f.group(1)), "tls": tls}
    if test.endswith("_lat"):
        rec.update({"p50_us": float(f.group(2)), "avg_us": float(f.group(3))})
    else:
        rec["mb_s"] = float(f.group(5)) * m.MIB / 1e6
    return rec


def find_mpi_check():
    """mpi_check (bench/CMakeLists.txt, built when mpicc is present): $VRDMA_MPI_CHECK, PATH,
    next to the vrdma binary in use as a source install puts it (<prefix>/libexec/vrdma), or in
    its build tree (<build>/bench)."""
    cands = [os.environ.get("VRDMA_MPI_CHECK"), shutil.which("mpi_check")]
    vr = os.path.realpath(shutil.which(VRDMA) or VRDMA)
    cands.append(os.path.join(os.path.dirname(os.path.dirname(vr)), "libexec", "vrdma", "mpi_check"))
    build = os.path.dirname(os.path.dirname(os.path.dirname(vr)))
    cands.append(os.path.join(build, "bench", "mpi_check"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    return None


def mpi_pingpong(state, server, client, size, iters, pml):
    """mpi_check pingpong, rank 0 in `client`, rank 1 in `server`: pml "ucx" (over vrdma) or
    "ob1" (Open MPI's TCP BTL)."""
    prog = find_mpi_check()
    if not prog:
        raise RuntimeError("mpi_check not found (a source install puts it in "
                           "<prefix>/libexec/vrdma when Open MPI's compiler is present; or set "
                           "VRDMA_MPI_CHECK)")
    rc, out = mpirun(None, state, [client, server], [prog, "pingpong", str(size), str(iters)],
                     tls=UCX_VRDMA_TLS, pml=pml, timeout=300)
    f = PINGPONG.search(out)
    if rc != 0 or not f:
        raise RuntimeError(f"mpirun failed ({rc}):\n{out[-2000:]}")
    return {"size": size, "iterations": int(f.group(2)), "lat_us": float(f.group(3)),
            "mb_s": float(f.group(4)), "p50_us": float(f.group(5)), "p99_us": float(f.group(6)),
            "pml": pml}


def plan(suite, Step, topo, server, client, quick):
    """The steps of one topology: records under sections.clients.<topo>.<key>."""
    nb, nl = (300, 2000) if quick else (2000, 20000)
    if topo == "cross_host":
        # Round trips take ~100 times longer than on one host, but a run of a few hundred is
        # still mostly its first messages (UCX's wire-up lane, its pools' first registrations):
        # half as many as on one host.
        nb, nl = nb // 2, nl // 2
    b = lambda: suite.bench  # noqa: E731 - the Bench exists once the sandbox is up
    ucx_cases = [("ucx_vrdma", UCX_VRDMA_TLS)]
    if topo == "same_host":
        ucx_cases.append(("ucx_posix", "posix,self"))
    ucx_cases.append(("ucx_tcp", "tcp"))
    steps = []
    for key, tls in ucx_cases:
        steps.append(Step("clients", "clients", f"{topo}: ucx_perftest tag_bw 64 KiB {tls}",
                          ("clients", topo, f"{key}_tag_bw_64k"),
                          lambda t=tls: ucx(b(), "tag_bw", 64 * 1024, nb, t, server, client),
                          summary=lambda r: f"{r['mb_s']:.0f} MB/s"))
        steps.append(Step("clients", "clients", f"{topo}: ucx_perftest tag_lat 8 B {tls}",
                          ("clients", topo, f"{key}_tag_lat_8"),
                          lambda t=tls: ucx(b(), "tag_lat", 8, nl, t, server, client),
                          summary=lambda r: f"p50 {r['p50_us']:.2f} us, avg {r['avg_us']:.2f} us"))
    for key, pml in (("mpi_vrdma", "ucx"), ("mpi_tcp", "ob1")):
        for size, iters in ((8, nl // 4), (64 * 1024, nb)):
            steps.append(Step("clients", "clients", f"{topo}: MPI ping-pong {size} B pml {pml}",
                              ("clients", topo, f"{key}_pingpong_{size}"),
                              lambda s=size, n=iters, p=pml: mpi_pingpong(
                                  suite.state, server, client, s, n, p),
                              summary=lambda r: f"p50 {r['p50_us']:.2f} us, mean "
                                                f"{r['lat_us']:.2f} us, {r['mb_s']:.0f} MB/s"))
    return steps


def _get(node, key, field):
    rec = (node or {}).get(key)
    if not isinstance(rec, dict) or "error" in rec:
        return None
    return rec.get(field)


def ratios(results):
    """{topo: [(what, vrdma, baseline, unit, ratio)]} from sections.clients."""
    out = {}
    clients = results.get("sections", {}).get("clients", {})
    for topo in ("same_host", "cross_host"):
        node = clients.get(topo)
        if not node:
            continue
        rows = []
        bases = (["ucx_posix"] if topo == "same_host" else []) + ["ucx_tcp"]
        for base in bases:
            v, x = _get(node, "ucx_vrdma_tag_bw_64k", "mb_s"), _get(node, f"{base}_tag_bw_64k", "mb_s")
            rows.append((f"UCX tag_bw 64 KiB: vrdma vs {base[4:]}", v, x, "MB/s",
                         v / x if v and x else None))
            v, x = _get(node, "ucx_vrdma_tag_lat_8", "p50_us"), _get(node, f"{base}_tag_lat_8", "p50_us")
            rows.append((f"UCX tag_lat 8 B (p50): vrdma vs {base[4:]}", v, x, "us",
                         x / v if v and x else None))
        for size in (8, 64 * 1024):
            v = _get(node, f"mpi_vrdma_pingpong_{size}", "p50_us")
            x = _get(node, f"mpi_tcp_pingpong_{size}", "p50_us")
            rows.append((f"Open MPI ping-pong {size} B latency (p50): pml ucx (vrdma) vs TCP", v, x,
                         "us", x / v if v and x else None))
        out[topo] = rows
    return out


def report_md(results):
    """The report's section (markdown lines); empty when nothing was measured."""
    r = ratios(results)
    if not r:
        return []
    L = ["## Real clients: UCX and Open MPI over vrdma", "",
         "ucx_perftest (UCX 1.13) with UCX_TLS=rc_verbs,ud_verbs,self on vrdma0:1 against "
         "UCX's shared memory (posix, one host) and tcp; Open MPI 4.1 ping-pong (mpi_check, "
         "one rank per container) with --mca pml ucx over vrdma against --mca pml ob1 with the "
         "TCP BTL: the median of its timed round trips, after a warm-up of at least half a "
         "second (UCX connects an endpoint's RC QP while its first messages go on, and those "
         "take its UD wire-up lane). Ratio > 1: vrdma is better.", ""]
    for topo, rows in r.items():
        L += [f"### {topo.replace('_', ' ')}", "", "| comparison | vrdma | baseline | ratio |",
              "| --- | --- | --- | --- |"]
        for what, v, x, unit, ratio in rows:
            fmt = (lambda y: f"{y:.3g} {unit}" if y is not None else "error")
            L.append(f"| {what} | {fmt(v)} | {fmt(x)} | "
                     f"{f'{ratio:.2f}x' if ratio is not None else '-'} |")
        L.append("")
    return L
