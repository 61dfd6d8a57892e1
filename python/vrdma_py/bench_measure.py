"""Measurements of the evaluation suite (vrdma bench). Each function runs one
program pair (or group) between sandbox containers and returns a plain dict of
numbers; failures raise with the programs' output.

Units: throughput in MB/s = 10^6 bytes/s (perftest and ucx_perftest print MiB/s,
converted here), message rate in millions of messages per second, latency in
microseconds, CPU in seconds (user + system, from wait4() for the programs and
/proc for every vrdmad), memory in KiB."""

import json
import math
import re
import time

from . import bench_proc as bp
from .baselines import PERFTEST_PORT, SOCKPERF_PORT, UCX_PORT, _UCX_FINAL
from .perftest_output import bw_rows, lat_rows

MIB = 1 << 20
IPERF_PORT = 5201
CONN_PORT = 18600
SOCKPERF_MAX = 65507  # sockperf's largest message
IPERF_MAX = 1 << 20  # iperf3's largest write (-l)


class Bench:
    """What every measurement needs: the process runner, vrdmad pids, helper tools."""

    def __init__(self, runner, daemon_pids, tools, run_timeout):
        self.r = runner
        self.daemons = daemon_pids
        self.tools = tools
        self.run_timeout = run_timeout

    def ip(self, container):
        return self.r.ips[container]

    def daemon_cpu(self):
        return bp.daemons_cpu(self.daemons)

    def tool(self, key):
        name = "vrdma-bench-" + key
        if key not in self.tools:
            raise RuntimeError(f"helper program {name} not found: build vrdma (its bench/ "
                               "targets) or set VRDMA_BENCH_TOOLS to their directory")
        return self.tools[key]


class PairRun:
    """What a server/client run left: outputs, timings and CPU seconds. `cpu` covers the
    whole run; `cpu_transfer` (None if the mark was not seen) only what followed the
    client's mark line, which perftest and ucx_perftest print when setup is done."""

    def __init__(self, c, s, cpu, cpu_transfer, setup_s):
        self.out, self.err = c.stdout(), c.stderr()
        self.server_out = s.stdout()
        self.wall = round(c.ended - c.started, 3)
        self.cpu = cpu
        self.cpu_transfer = cpu_transfer
        self.setup_s = setup_s


def _cpu_record(rec, run, nbytes, messages):
    """Adds CPU figures: per GB and per million messages from the transfer phase when
    it is known (cpu_scope says which)."""
    use = run.cpu_transfer or run.cpu
    total = sum(use.values())
    rec["cpu_scope"] = "transfer" if run.cpu_transfer else "whole run"
    rec["cpu_s"] = {k: round(v, 4) for k, v in use.items()}
    rec["cpu_s_total"] = round(total, 4)
    rec["cpu_s_whole_run"] = round(sum(run.cpu.values()), 4)
    if run.setup_s is not None:
        rec["setup_s"] = round(run.setup_s, 3)
    rec["bytes"] = nbytes
    rec["messages"] = messages
    rec["cpu_s_per_gb"] = total / (nbytes / 1e9) if nbytes else None
    rec["cpu_s_per_mmsg"] = total / (messages / 1e6) if messages else None
    return rec


def _pair(b, server, client, srv_argv, cli_argv, port, lib=True, env=None, timeout=None,
          server_exits=True, mark=None):
    """Starts a server, waits for its port, runs the client (line-buffered, to see
    `mark` when it is given); returns a PairRun."""
    timeout = timeout or b.run_timeout
    if mark:
        cli_argv = ["stdbuf", "-oL", *cli_argv]
    s = b.r.start(server, srv_argv, lib=lib, env=env)
    c = None
    try:
        b.r.wait_listening(s, port)
        d0 = b.daemon_cpu()
        c = b.r.start(client, cli_argv, lib=lib, env=env)
        at_mark = None
        if mark:
            m = c.wait_output(mark, timeout)
            if m:
                at_mark = (c.live_cpu_seconds(), s.live_cpu_seconds(), b.daemon_cpu(),
                           time.monotonic() - c.started)
        c.wait(timeout)
        if server_exits:
            s.wait(15)
        else:
            s.stop()
        d1 = b.daemon_cpu()
        if c.rc != 0:
            raise bp.failure(c)
        if server_exits and s.rc != 0:
            raise bp.failure(s)
        cpu = {"client": c.cpu_seconds(), "server": s.cpu_seconds(), "vrdmad": d1 - d0}
        xfer = None
        if at_mark and None not in at_mark:
            xfer = {"client": cpu["client"] - at_mark[0], "server": cpu["server"] - at_mark[1],
                    "vrdmad": d1 - at_mark[2]}
        return PairRun(c, s, cpu, xfer, at_mark[3] if at_mark else None)
    finally:
        b.r.forget(*(j for j in (c, s) if j))


# ---- perftest ----------------------------------------------------------------------

PERFTEST_BW_MARK = r"#bytes\s+#iterations\s+BW peak"


def perftest_bw(b, prog, size, iters, server, client, extra=(), timeout=None, net_of=None):
    """A perftest bandwidth run's figures. With net_of=k (fewer than iters), also a run of k
    iterations between the same containers: what it spends after its mark is what every run
    spends whatever its length (perftest calibrates its clock for 0.2 s of busy CPU before it
    reports, then closes the connection), and is taken out of the CPU figures, which then
    count the transfer itself: cpu_s_per_gb and cpu_s_per_mmsg are (CPU of this run - CPU of
    the short one) / (its bytes or messages - the short one's); the record keeps the gross
    figures (cpu_s_per_gb_gross, cpu_s_per_mmsg_gross) and the short run's CPU (cpu_s_fixed)."""
    rec = _perftest_bw_once(b, prog, size, iters, server, client, extra, timeout)
    if not net_of or net_of >= iters:
        return rec
    short = _perftest_bw_once(b, prog, size, net_of, server, client, extra, timeout)
    net = rec["cpu_s_total"] - short["cpu_s_total"]
    nbytes = rec["bytes"] - short["bytes"]
    messages = rec["messages"] - short["messages"]
    rec.update({"cpu_s_fixed": short["cpu_s_total"], "cpu_net_of": net_of,
                "cpu_s_per_gb_gross": rec["cpu_s_per_gb"],
                "cpu_s_per_mmsg_gross": rec["cpu_s_per_mmsg"]})
    if net <= 0 or nbytes <= 0 or messages <= 0:
        # Noise larger than the transfer's own CPU: no net figure (the gross ones stay).
        rec["cpu_net_error"] = (f"the {net_of}-iteration run spent {short['cpu_s_total']} CPU-s, "
                                f"the full run {rec['cpu_s_total']}")
        return rec
    rec["cpu_s_per_gb"] = net / (nbytes / 1e9)
    rec["cpu_s_per_mmsg"] = net / (messages / 1e6)
    return rec


def _perftest_bw_once(b, prog, size, iters, server, client, extra, timeout):
    args = [prog, "-s", size, "-n", iters, "-F", *extra]
    run = _pair(b, server, client, args, args + [b.ip(server)], PERFTEST_PORT,
                timeout=timeout, mark=PERFTEST_BW_MARK)
    rows = bw_rows(run.out)
    if not rows:
        raise RuntimeError(f"no result row from {prog}:\n{run.out[-2000:]}")
    nbytes_size, n, peak, avg, rate = rows[-1]
    rec = {"size": size, "iterations": n, "mb_s": avg * MIB / 1e6, "peak_mb_s": peak * MIB / 1e6,
           "mmsg_s": rate, "wall_s": run.wall}
    return _cpu_record(rec, run, nbytes_size * n, n)


def perftest_lat(b, prog, size, iters, server, client, extra=(), timeout=None):
    args = [prog, "-s", size, "-n", iters, "-F", *extra]
    run = _pair(b, server, client, args, args + [b.ip(server)], PERFTEST_PORT,
                timeout=timeout)
    rows = lat_rows(run.out)
    if not rows:
        raise RuntimeError(f"no result row from {prog}:\n{run.out[-2000:]}")
    _, n, tmin, tmax, typ, avg, stdev, p99, p999 = rows[-1]
    return {"size": size, "iterations": n, "p50_us": typ, "p99_us": p99, "p999_us": p999,
            "avg_us": avg, "min_us": tmin, "max_us": tmax, "stdev_us": stdev,
            "wall_s": run.wall}


# ---- baselines ---------------------------------------------------------------------

UCX_MARK = r"\|\s+Stage\s+\|\s+# iterations"


def ucx(b, test, size, iters, tls, server, client, timeout=None):
    env = ["env", f"UCX_TLS={tls}"]
    srv = env + ["ucx_perftest", "-p", UCX_PORT]
    cli = env + ["ucx_perftest", "-p", UCX_PORT, b.ip(server), "-t", test, "-s", size,
                 "-n", iters]
    lat = test.endswith("_lat")
    run = _pair(b, server, client, srv, cli, UCX_PORT, lib=False, timeout=timeout,
                mark=None if lat else UCX_MARK)
    m = _UCX_FINAL.search(run.out)
    if not m:
        raise RuntimeError(f"no result from ucx_perftest:\n{run.out[-2000:]}")
    n = int(m.group(1))
    rec = {"size": size, "iterations": n, "wall_s": run.wall}
    if lat:
        # ucx_perftest reports the median (50.0%ile) and average one-way latency only.
        rec.update({"p50_us": float(m.group(2)), "avg_us": float(m.group(3)),
                    "p99_us": None, "p999_us": None})
        return rec
    rec.update({"mb_s": float(m.group(5)) * MIB / 1e6, "mmsg_s": int(m.group(7)) / 1e6})
    return _cpu_record(rec, run, size * n, n)


def _iperf3_received(text):
    """(bytes, seconds) the iperf3 server received, from the client's -J output."""
    try:
        recv = json.loads(text)["end"]["sum_received"]
        return recv["bytes"], recv["seconds"]
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"unexpected iperf3 output ({e}):\n{text[-2000:]}")


def iperf3(b, size, seconds, server, client, timeout=None):
    """TCP throughput with writes of `size` bytes (iperf3 -l, at most 1 MiB). CPU covers
    the whole run (setup is one TCP connection, small against the seconds of transfer)."""
    write = min(size, IPERF_MAX)
    srv = ["iperf3", "-s", "-1", "-p", IPERF_PORT]
    cli = ["iperf3", "-c", b.ip(server), "-p", IPERF_PORT, "-t", seconds, "-l", write, "-J"]
    run = _pair(b, server, client, srv, cli, IPERF_PORT, lib=False,
                timeout=timeout or seconds + 30)
    nbytes, secs = _iperf3_received(run.out)
    msgs = nbytes / write
    rec = {"size": size, "write_size": write, "seconds": secs, "mb_s": nbytes / secs / 1e6,
           "mmsg_s": msgs / secs / 1e6, "wall_s": run.wall}
    return _cpu_record(rec, run, nbytes, msgs)


def sockperf(b, size, seconds, server, client, timeout=None):
    """TCP ping-pong latency (half round trip) with sockperf; its messages are 14 to
    SOCKPERF_MAX bytes: smaller sizes are raised to 14 (msg_size says so), larger ones
    are refused."""
    if size > SOCKPERF_MAX:
        raise RuntimeError(f"sockperf cannot send {size}-byte messages (at most {SOCKPERF_MAX})")
    msg = max(14, size)
    srv = ["sockperf", "sr", "--tcp", "-i", b.ip(server), "-p", SOCKPERF_PORT]
    cli = ["sockperf", "pp", "--tcp", "-i", b.ip(server), "-p", SOCKPERF_PORT, "-m", msg,
           "-t", seconds]
    run = _pair(b, server, client, srv, cli, SOCKPERF_PORT, lib=False,
                timeout=timeout or seconds + 30, server_exits=False)
    text = run.out + run.err
    avg = re.search(r"avg-latency=([\d.]+)", text)
    if not avg:
        raise RuntimeError(f"no result from sockperf:\n{text[-2000:]}")

    def pct(p):
        m = re.search(rf"percentile {p} =\s+([\d.]+)", text)
        return float(m.group(1)) if m else None

    obs = re.search(r"ObservationTime=([\d.]+)", text)
    return {"size": size, "msg_size": msg, "p50_us": pct("50.000"), "p99_us": pct("99.000"),
            "p999_us": pct("99.900"), "avg_us": float(avg.group(1)),
            "seconds": float(obs.group(1)) if obs else None, "wall_s": run.wall}


def memcpy(b, sizes, ms):
    """Single-thread memcpy bandwidth per size, run on the machine itself."""
    job = bp.Job([b.tool("memcpy"), "--ms", ms, *sizes], "vrdma-bench-memcpy")
    try:
        job.wait(30 + len(sizes) * ms / 1000 * 3)
        if job.rc != 0:
            raise bp.failure(job)
        out = []
        for line in job.stdout().splitlines():
            d = json.loads(line)
            out.append({"size": d["size"], "mb_s": d["mb_s"], "seconds": d["seconds"]})
        return out
    finally:
        job.close()


def registration(b, container, sizes, reps):
    """ibv_reg_mr and ibv_dereg_mr per size in `container` (vrdma-bench-reg), against the first
    touch of as many fresh pages (the floor: what any use of new memory costs), medians."""
    job = b.r.start(container, [b.tool("reg"), "--reps", reps, *sizes])
    try:
        job.wait(b.run_timeout)
        if job.rc != 0:
            raise bp.failure(job)
        out = []
        for line in job.stdout().splitlines():
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            d["reg_dereg_us"] = d["reg_us"] + d["dereg_us"]
            d["vs_first_touch"] = d["reg_dereg_us"] / d["first_touch_us"]
            out.append(d)
        if len(out) != len(sizes):
            raise RuntimeError(f"vrdma-bench-reg gave {len(out)} of {len(sizes)} sizes")
        return out
    finally:
        job.kill()


# ---- scalability -------------------------------------------------------------------

def group(b, pairs, server_argv, client_argv, parse, timeout, port=PERFTEST_PORT, lib=True):
    """Runs several server/client pairs at once (servers first, then every client, which gets
    its server's address as its last argument); returns ([parsed client result per pair],
    info)."""
    servers, clients = [], []
    try:
        for srv, _ in pairs:
            servers.append(b.r.start(srv, server_argv, lib=lib))
        for s in servers:
            b.r.wait_listening(s, port, timeout=30)
        d0 = b.daemon_cpu()
        t0 = time.monotonic()
        for srv, cli in pairs:
            clients.append(b.r.start(cli, client_argv + [b.ip(srv)], lib=lib))
        spread = time.monotonic() - t0
        end = time.monotonic() + timeout
        for c in clients:
            c.wait(max(1, end - time.monotonic()))
        for s in servers:
            s.wait(15)
        wall = time.monotonic() - t0
        d1 = b.daemon_cpu()
        results = []
        for c, s in zip(clients, servers):
            if c.rc != 0:
                raise bp.failure(c)
            if s.rc != 0:
                raise bp.failure(s)
            try:
                results.append(parse(c.stdout()))
            except RuntimeError as e:
                raise RuntimeError(f"{c.name}: {e}") from None
        cpu = sum(j.cpu_seconds() for j in clients + servers) + (d1 - d0)
        return results, {"start_spread_s": round(spread, 3), "wall_s": round(wall, 3),
                         "cpu_s_total": round(cpu, 3)}
    finally:
        b.r.forget(*clients, *servers)


def _bw_parse(text):
    rows = bw_rows(text)
    if not rows:
        raise RuntimeError(f"no result row:\n{text[-1500:]}")
    return rows[-1]


def _lat_parse(text):
    rows = lat_rows(text)
    if not rows:
        raise RuntimeError(f"no result row:\n{text[-1500:]}")
    return rows[-1]


def pairs_bw(b, pairs, size, duration, margin, timeout):
    """Aggregate ib_write_bw throughput of concurrent pairs (duration mode: each pair
    measures between `margin` s after its start and `margin` s before its end)."""
    argv = ["ib_write_bw", "-s", size, "-D", duration, "-f", margin, "-F"]
    rows, info = group(b, pairs, argv, argv, _bw_parse, timeout)
    per = [r[3] * MIB / 1e6 for r in rows]
    return {"pairs": len(pairs), "size": size, "aggregate_mb_s": sum(per),
            "per_pair_mb_s_min": min(per), "per_pair_mb_s_max": max(per),
            "aggregate_mmsg_s": sum(r[4] for r in rows), **info}


def pairs_tcp(b, pairs, size, duration, margin, timeout):
    """The same pairs' aggregate TCP throughput (iperf3, writes of `size`, at most 1 MiB), all
    at once for `duration` s, the first `margin` s left out of each pair's figure."""
    write = min(size, IPERF_MAX)
    srv = ["iperf3", "-s", "-1", "-p", IPERF_PORT]
    cli = ["iperf3", "-p", IPERF_PORT, "-t", duration, "-O", margin, "-l", write, "-J", "-c"]

    def parse(text):
        nbytes, secs = _iperf3_received(text)
        if secs <= 0:
            raise RuntimeError(f"iperf3 measured no time:\n{text[-2000:]}")
        return nbytes / secs / 1e6
    per, info = group(b, pairs, srv, cli, parse, timeout, port=IPERF_PORT, lib=False)
    return {"pairs": len(pairs), "size": size, "write_size": write, "aggregate_mb_s": sum(per),
            "per_pair_mb_s_min": min(per), "per_pair_mb_s_max": max(per), **info}


def pairs_lat(b, pairs, size, iters, timeout):
    argv = ["ib_write_lat", "-s", size, "-n", iters, "-F"]
    rows, info = group(b, pairs, argv, argv, _lat_parse, timeout)
    p50 = sorted(r[4] for r in rows)
    p99 = [r[7] for r in rows]
    return {"pairs": len(pairs), "size": size, "iterations": iters,
            "p50_us_median": p50[len(p50) // 2], "p50_us_max": max(p50),
            "p99_us_max": max(p99), "p99_us_median": sorted(p99)[len(p99) // 2], **info}


# ---- connection setup and resources ------------------------------------------------

def setup_rate(b, kind, count, server, client, timeout=None):
    """Connections per second: `verbs` (K RC QPs to RTS, QPNs exchanged over TCP, each
    then proven with one RDMA WRITE) or `rdma_cm` (K connect/accept one after another)."""
    tool = b.tool("conn")
    if kind == "verbs":
        srv = [tool, "verbs-server", "--port", CONN_PORT]
        cli = [tool, "verbs-client", b.ip(server), "--port", CONN_PORT, "--qps", count]
    else:
        srv = [tool, "cm-server", "--port", CONN_PORT, "--count", count]
        cli = [tool, "cm-client", b.ip(server), "--port", CONN_PORT, "--count", count]
    s = b.r.start(server, srv)
    c = None
    try:
        b.r.wait_output(s, r'"listening"')
        c = b.r.start(client, cli)
        c.wait(timeout or b.run_timeout)
        s.wait(15)
        if c.rc != 0:
            raise bp.failure(c)
        if s.rc != 0:
            raise bp.failure(s)
        lines = [ln for ln in c.stdout().splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"no result from {c.name}")
        rec = json.loads(lines[-1])
        rec["count"] = count
        return rec
    finally:
        b.r.forget(*(j for j in (c, s) if j))


def ib_write_bw_qps(b, qps, size, iters_per_qp, server, client, timeout=None):
    t0 = time.monotonic()
    rec = perftest_bw(b, "ib_write_bw", size, iters_per_qp, server, client,
                      extra=("-q", qps), timeout=timeout)
    rec["qps"] = qps
    rec["total_wall_s"] = round(time.monotonic() - t0, 3)
    return rec


def daemon_memory(pid):
    st = bp.proc_status(pid)
    if st is None:
        raise RuntimeError(f"vrdmad (pid {pid}) is gone")
    return {"rss_kib": st.get("VmRSS"), "rss_anon_kib": st.get("RssAnon"),
            "rss_file_kib": st.get("RssFile"), "rss_shmem_kib": st.get("RssShmem"),
            "threads": st.get("Threads"), "fds": bp.proc_fd_count(pid)}


def status_totals(host):
    """Clients (programs, not the status command itself), QPs and MRs vrdmad reports."""
    from .sandbox import vrdma
    data = json.loads(vrdma("status", "--host", host, "--json", timeout=30).stdout)
    clients = [c for c in data.get("clients", []) if c.get("kind") != "cli"]
    return {"clients": len(clients), "qps": sum(len(c.get("qps", [])) for c in clients),
            "mrs": sum(len(c.get("mrs", [])) for c in clients),
            "truncated": bool(data.get("truncated"))}


def hold(b, containers, host, daemon_pid, qps=0, mrs=0, mr_size=4096, idle_window=0.0,
         hold_seconds=120):
    """Starts vrdma-bench-conn hold in each container (device open, `qps` QPs, `mrs` MRs of
    `mr_size` bytes) and measures, while they hold: vrdmad's memory, each program's
    memory, what vrdmad reports, and (idle_window > 0) the CPU everyone uses while idle."""
    argv = [b.tool("conn"), "hold", "--qps", qps, "--mrs", mrs, "--mr-size", mr_size,
            "--seconds", hold_seconds]
    jobs = []
    try:
        for c in containers:
            jobs.append(b.r.start(c, argv))
        for j in jobs:
            b.r.wait_output(j, r'"ready"', timeout=60)
        time.sleep(0.3)  # let vrdmad finish serving the last requests
        rec = {"programs": len(jobs), "qps_per_program": qps, "mrs_per_program": mrs,
               "mr_size": mr_size, "vrdmad": daemon_memory(daemon_pid)}
        progs = []
        for j in jobs:
            st = bp.proc_status(j.pid) or {}
            sm = bp.proc_smaps_rollup(j.pid) or {}
            mf = bp.proc_memfd_kib(j.pid)
            progs.append({"rss_kib": st.get("VmRSS"), "rss_anon_kib": st.get("RssAnon"),
                          "rss_shmem_kib": st.get("RssShmem"), "pss_kib": sm.get("Pss"),
                          "pss_shmem_kib": sm.get("Pss_Shmem"), "memfd_kib": mf["memfd_kib"],
                          "memfds": mf["memfds"]})

        def mean(key):
            vals = [p[key] for p in progs if p.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        rec["program_mean"] = {k: mean(k) for k in ("rss_kib", "rss_anon_kib", "rss_shmem_kib",
                                                     "pss_kib", "pss_shmem_kib", "memfd_kib",
                                                     "memfds")}
        rec["reported"] = status_totals(host)
        if idle_window > 0:
            d0 = bp.proc_cpu_seconds(daemon_pid)
            p0 = [j.live_cpu_seconds() for j in jobs]
            time.sleep(idle_window)
            d1 = bp.proc_cpu_seconds(daemon_pid)
            p1 = [j.live_cpu_seconds() for j in jobs]
            rec["idle"] = {"seconds": idle_window, "vrdmad_cpu_s": d1 - d0,
                           "programs_cpu_s": sum(y - x for x, y in zip(p0, p1))}
        return rec
    finally:
        b.r.forget(*jobs)


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
