#!/usr/bin/env python3
"""vrdma bench: the evaluation suite. Builds its own sandbox (two hosts, network
namespaces, one vrdmad each) and measures, in one run, with unmodified programs:

  throughput and message rate against message size (RDMA WRITE, READ, SEND;
  perftest), same host and across hosts; latency p50/p99/p99.9 against size;
  CPU-seconds of every process (programs and vrdmad) per GB and per million
  messages, and vrdmad's CPU when idle; vrdmad and shared memory per container,
  per QP and per MR; aggregate throughput and latency with 1..32 container pairs
  (across hosts, 8 pairs also against 8 iperf3 pairs between the same containers),
  throughput with up to 1024 QPs, connection setup rate through verbs and rdma_cm;
  what encrypting the links between routers costs (mutual TLS against --router-plaintext,
  across hosts, ib_write_bw 64 KiB and ib_write_lat 8 B, and 8 pairs at once); and the
  baselines: memcpy, UCX shared memory and tcp (ucx_perftest), TCP (iperf3, sockperf)
  between the same containers;
  real clients: UCX over vrdma against UCX posix and tcp, Open MPI ping-pong over vrdma
  (pml ucx) against Open MPI over TCP; QoS: per-container throughput over time of four
  senders sharing one link between hosts, with weights 1 and 3, a 100 MB/s limit and a
  late sender (fairness.png), and the latency class's p99 idle and under a bulk pair.

Writes results.json (every figure and the machine), report.md (tables with vrdma's
ratio to each baseline; >1 means vrdma is better) and PNG plots to --out. A part
that fails is recorded as an error and the run goes on. Needs root.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def _ensure_matplotlib():
    """Debian's python3-matplotlib lives in /usr/bin/python3's path; when another python3
    comes first on PATH (pyenv, a venv) without it, run this script with Debian's."""
    import importlib.util
    if importlib.util.find_spec("matplotlib"):
        return
    system = "/usr/bin/python3"
    if os.environ.get("VRDMA_BENCH_REEXEC") or os.path.realpath(sys.executable) == \
            os.path.realpath(system) or not os.access(system, os.X_OK):
        return
    probe = subprocess.run([system, "-c", "import matplotlib"], capture_output=True, timeout=60)
    if probe.returncode == 0:
        os.environ["VRDMA_BENCH_REEXEC"] = "1"
        os.execv(system, [system, os.path.abspath(__file__), *sys.argv[1:]])


_ensure_matplotlib()

from vrdma_py import bench_clients  # noqa: E402
from vrdma_py import bench_fairness  # noqa: E402
from vrdma_py import bench_measure as m  # noqa: E402
from vrdma_py import bench_proc as bp  # noqa: E402
from vrdma_py import bench_report  # noqa: E402
from vrdma_py.sandbox import ROUTED, VRDMA, Sandbox, vrdma  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
# The QoS runs' senders and receivers (h0cN -> h1cN): the fairness rules and the latency class.
QOS_CONTAINERS = max(len(bench_fairness.RULES), bench_fairness.LAT_PAIR + 1,
                     bench_fairness.BULK_PAIR + 1)

# Everything that differs between a full run (at most 15 minutes on a 2-core machine)
# and --quick (at most 2 minutes): sizes, iterations, pair and QP counts, and how long
# each part may take before its remaining steps are skipped (recorded as errors).
MODES = {
    "full": {
        "sizes": [8, 64, 512, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB],
        "bw_bytes": 4 << 30, "bw_iters": (1000, 200_000),
        "lat_bytes": 256 << 20, "lat_iters": (100, 10_000),
        "cross_host_div": 8,  # fewer bytes across hosts (unknown speed)
        "tcp_seconds": 1, "memcpy_ms": 200,
        "reg_sizes": [4 * KIB, 64 * KIB, MIB, 8 * MIB, 64 * MIB], "reg_reps": 9,
        "pairs": [1, 2, 4, 8, 16, 32], "pair_duration": 4, "pair_margin": 1,
        "tcp_pairs": [8],  # pair counts also measured with iperf3 (across hosts)
        "pair_lat_iters": 4000,  # divided among pairs (each waits for the CPU)
        "qps": [1, 8, 64, 256, 1024], "qp_size": 4 * KIB, "qp_messages": 200_000,
        "qps_timeout": 30,
        "setup_verbs": 1024, "setup_cm": 256,
        "mem_containers": 32, "mem_qps": 1024, "mem_mrs": 1024,
        "idle_seconds": 5, "run_timeout": 60, "probe_timeout": 20,
        "tls_reps": 2,  # TLS / plaintext alternations (each a sandbox of its own)
        "tls_pairs": 8,  # pairs also measured at once in each mode (as many as tcp_pairs)
        "budget": {"idle": 10, "memory": 45, "memcpy": 10, "registration": 30, "probe": 30, "same_host": 200,
                   "cross_host": 200, "scalability": 290, "connections": 90, "tls": 120,
                   "clients": 240, "qos": 120},
        "qos_seconds": 24,  # the fairness run: the first senders' duration
    },
    "quick": {
        "sizes": [8, 64 * KIB, 4 * MIB],
        "bw_bytes": 2 << 30, "bw_iters": (100, 100_000),
        "lat_bytes": 16 << 20, "lat_iters": (50, 1000),
        "cross_host_div": 32,
        "tcp_seconds": 1, "memcpy_ms": 50,
        "reg_sizes": [4 * KIB, 8 * MIB], "reg_reps": 5,
        "pairs": [1, 4], "pair_duration": 1, "pair_margin": 0, "tcp_pairs": [4],
        "pair_lat_iters": 200,
        "qps": [1, 1024], "qp_size": 4 * KIB, "qp_messages": 20_000, "qps_timeout": 20,
        "setup_verbs": 256, "setup_cm": 64,
        "mem_containers": 8, "mem_qps": 1024, "mem_mrs": 1024,
        "idle_seconds": 2, "run_timeout": 40, "probe_timeout": 8,
        "tls_reps": 1,
        "tls_pairs": 4,
        "budget": {"idle": 4, "memory": 10, "memcpy": 4, "registration": 10, "probe": 10, "same_host": 36,
                   "cross_host": 46, "scalability": 20, "connections": 14, "tls": 60,
                   "clients": 90, "qos": 60},
        "qos_seconds": 15,
    },
}

# The sizes and programs the headline figures use (in every mode's size list).
REF_BW_SIZE = 64 * KIB
REF_LAT_SIZE = 8
# The short perftest run whose CPU (perftest's clock calibration, the connection's end) the
# CPU figures at those sizes leave out (bench_measure.perftest_bw, net_of).
PERFTEST_FIXED_ITERS = 10


def human_size(n):
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def clamp_iters(budget_bytes, size, bounds):
    lo, hi = bounds
    return int(max(lo, min(hi, budget_bytes // size)))


# ---- machine --------------------------------------------------------------------

def _cmd(*argv, timeout=10):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def machine_info():
    info = {"hostname": platform.node(), "kernel": platform.release(),
            "arch": platform.machine(), "python": platform.python_version(),
            "logical_cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0))}
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_kib"] = int(line.split()[1])
    except OSError:
        pass
    info["virtualization"] = _cmd("systemd-detect-virt") or "unknown"
    gov = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    if os.path.exists(gov):
        with open(gov) as f:
            info["cpu_governor"] = f.read().strip()
    info["load_average_at_start"] = list(os.getloadavg())
    versions = {}
    for pkg in ("perftest", "ucx-utils", "iperf3", "sockperf", "ibverbs-utils"):
        versions[pkg] = _cmd("dpkg-query", "-W", "-f=${Version}", pkg)
    versions["vrdma"] = _cmd(VRDMA, "--version")
    src = os.path.join(HERE, "..")
    if os.path.isdir(os.path.join(src, ".git")):
        commit = _cmd("git", "-C", src, "rev-parse", "--short", "HEAD")
        dirty = _cmd("git", "--no-optional-locks", "-C", src, "status", "--porcelain",
                     "--untracked-files=no")
        if commit:
            versions["vrdma_git"] = commit + ("-dirty" if dirty else "")
    info["software"] = versions
    return info


def find_tools():
    """The helper programs (built in <build>/bench, installed in libexec/vrdma)."""
    dirs = []
    if os.environ.get("VRDMA_BENCH_TOOLS"):
        dirs.append(os.environ["VRDMA_BENCH_TOOLS"])
    exe = os.path.realpath(shutil.which(VRDMA) or VRDMA)
    d = os.path.dirname(exe)
    dirs += [os.path.join(d, "..", "..", "bench"), os.path.join(d, "..", "libexec", "vrdma"),
             "/usr/local/libexec/vrdma"]
    tools = {}
    for key, name in (("memcpy", "vrdma-bench-memcpy"), ("conn", "vrdma-bench-conn"),
                      ("reg", "vrdma-bench-reg")):
        for dd in dirs:
            p = os.path.join(dd, name)
            if os.access(p, os.X_OK):
                tools[key] = os.path.realpath(p)
                break
    return tools


# ---- progress ---------------------------------------------------------------------

class Progress:
    def __init__(self, total):
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty()

    def elapsed(self):
        return time.monotonic() - self.t0

    def _stamp(self):
        s = int(self.elapsed())
        return f"[{s // 60:2d}:{s % 60:02d}]"

    def start(self, section, label):
        if self.tty:
            sys.stderr.write(f"\r\033[K{self._stamp()} {self.done + 1}/{self.total} "
                             f"{section}: {label} ...")
            sys.stderr.flush()

    def end(self, section, label, outcome):
        self.done += 1
        line = f"{self._stamp()} {self.done}/{self.total} {section}: {label}: {outcome}"
        sys.stderr.write(("\r\033[K" if self.tty else "") + line + "\n")
        sys.stderr.flush()

    def note(self, text):
        sys.stderr.write(("\r\033[K" if self.tty else "") + f"{self._stamp()} {text}\n")
        sys.stderr.flush()


# ---- the plan ---------------------------------------------------------------------

class Step:
    def __init__(self, section, budget, label, path, fn, meta=None, summary=None, gate=None):
        self.section = section  # progress display name
        self.budget = budget  # key into the mode's time budgets
        self.label = label
        self.path = path  # where the record goes in results["sections"]; "[]" = append
        self.fn = fn
        self.meta = meta or {}
        self.summary = summary or (lambda rec: "ok")
        self.gate = gate  # returns an error text to skip this step, or None


def put(root, path, value):
    node = root
    for key in path[:-1]:
        node = node.setdefault(key, {})
    last = path[-1]
    if last == "[]":
        raise ValueError("path must name a list")
    if last.endswith("[]"):
        node.setdefault(last[:-2], []).append(value)
    else:
        node[last] = value


def bw_summary(rec):
    return f"{rec['mb_s'] / 1000:.2f} GB/s, {rec['mmsg_s']:.3f} Mmsg/s"


def lat_summary(rec):
    if rec.get("p99_us") is None:
        return f"p50 {rec['p50_us']:.2f} us"
    return f"p50 {rec['p50_us']:.2f} / p99 {rec['p99_us']:.2f} / p99.9 {rec['p999_us']:.2f} us"


class Suite:
    def __init__(self, args, cfg):
        self.args = args
        self.cfg = cfg
        self.mode = "quick" if args.quick else "full"
        self.results = {"schema": "vrdma-bench/1", "mode": self.mode, "sections": {},
                        "errors": []}
        self.sb = None
        self.runner = None
        self.bench = None
        self.cross_host_error = None  # why cross-host RDMA is not measured, if it is not
        self.section_time = {}
        self.tools = find_tools()

    # -- topology
    def same_pair(self):
        return "h0c0", "h0c1"  # server, client

    def cross_pair(self):
        return "h1c0", "h0c0"

    def cross_gate(self):
        if self.cross_host_error:
            return "skipped: cross-host RDMA failed its probe (see cross_host_probe)"
        return None

    # -- steps
    def plan(self):
        c = self.cfg
        steps = []
        S = Step
        steps.append(S("cpu", "idle", f"vrdmad CPU while idle ({c['idle_seconds']} s)",
                       ("cpu", "idle"), self.idle_cpu,
                       summary=lambda r: f"{r['vrdmad_cpu_percent']:.2f} % of a CPU"))
        steps.append(S("memory", "memory", "vrdmad with no clients", ("memory", "daemon_baseline"),
                       lambda: m.daemon_memory(self.daemon_pid("h0")),
                       summary=lambda r: f"RSS {r['rss_kib']} KiB"))
        steps.append(S("memory", "memory",
                       f"{c['mem_containers']} containers with a program each, idle",
                       ("memory", "per_container"), self.mem_per_container,
                       summary=lambda r: f"vrdmad +{r['vrdmad_kib_per_container']:.1f} KiB, "
                       f"shared {r['shared_kib_per_container']:.0f} KiB per container"))
        steps.append(S("memory", "memory", f"{c['mem_qps']} QPs in one container",
                       ("memory", "per_qp"), lambda: self.mem_delta(qps=c["mem_qps"]),
                       summary=lambda r: f"vrdmad +{r['vrdmad_kib_per_item']:.2f} KiB, "
                       f"shared +{r['shared_kib_per_item']:.2f} KiB per QP"))
        steps.append(S("memory", "memory", f"{c['mem_mrs']} MRs of 4 KiB in one container",
                       ("memory", "per_mr"), lambda: self.mem_delta(mrs=c["mem_mrs"]),
                       summary=lambda r: f"vrdmad +{r['vrdmad_kib_per_item']:.2f} KiB, "
                       f"shared +{r['shared_kib_per_item']:.2f} KiB per MR"))
        steps.append(S("memcpy", "memcpy", f"{len(c['sizes'])} sizes", ("memcpy", "results"),
                       self.memcpy,
                       summary=lambda r: ", ".join(f"{human_size(x['size'])} "
                                                   f"{x['mb_s'] / 1000:.1f} GB/s" for x in r)))
        steps.append(S("registration", "registration",
                       f"ibv_reg_mr + ibv_dereg_mr, {len(c['reg_sizes'])} sizes, in h0c0",
                       ("registration", "results"), self.registration,
                       summary=lambda r: ", ".join(
                           f"{human_size(x['size'])} {x['reg_dereg_us']:.0f} us "
                           f"({x['vs_first_touch']:.2f}x first touch)" for x in r)))
        steps.append(S("cross-host probe", "probe", "ib_write_bw 8 B between h0c0 and h1c0",
                       ("cross_host_probe", "result"), self.probe,
                       summary=lambda r: "cross-host RDMA works"))
        for topo in ("same_host", "cross_host"):
            steps += self.plan_size_sweep(topo)
        for topo in ("same_host", "cross_host"):
            steps += self.plan_clients(topo)
        steps += self.plan_scalability()
        # Last: they replace the sandbox with routed ones (routers with and without TLS; then
        # vrdmad's QoS, which applies on the routed path, in the last of them).
        steps += self.plan_router_security()
        steps.append(S("qos", "qos",
                       f"4 senders across hosts (routed path), weights 1 and 3, a 100 MB/s limit "
                       f"({c['qos_seconds']} s)", ("qos", "fairness"), self.fairness,
                       summary=lambda r: f"weights 1:{r['weight_ratio'] or 0:.2f}, limit "
                       f"{r['limited_mb_s']:.1f} MB/s", gate=self.cross_gate))
        steps.append(S("qos", "qos", "latency class p99 idle and under a bulk pair (3 rounds each)",
                       ("qos", "latency_class"), self.latency_class,
                       summary=lambda r: f"p99 ratio {r['ratio']:.2f}x (target <= "
                       f"{bench_fairness.LAT_BAR:g}x)", gate=self.cross_gate))
        return steps

    def plan_clients(self, topo):
        """UCX over vrdma against UCX posix and tcp, Open MPI over vrdma against Open MPI over
        TCP, between the same two containers (bench_clients)."""
        cross = topo == "cross_host"
        server, client = self.cross_pair() if cross else self.same_pair()
        steps = bench_clients.plan(self, Step, topo, server, client, self.mode == "quick")
        if cross:
            for st in steps:
                st.gate = self.cross_gate
        return steps

    def plan_router_security(self):
        """ib_write_bw 64 KiB, ib_write_lat 8 B and tls_pairs pairs of ib_write_bw at once
        across hosts with the routers linked over mutual TLS and in plaintext, alternating,
        each in a two-host sandbox of its own."""
        c = self.cfg
        server, client = self.cross_pair()
        n_bw = clamp_iters(c["bw_bytes"] // c["cross_host_div"], REF_BW_SIZE, c["bw_iters"])
        n_lat = clamp_iters(c["lat_bytes"] // c["cross_host_div"], REF_LAT_SIZE, c["lat_iters"])
        steps = []
        for rep in range(c["tls_reps"]):
            for mode in ("plaintext", "tls"):  # the default (TLS) last: QoS runs in it
                what = "mutual TLS" if mode == "tls" else "plaintext (--router-plaintext)"
                steps.append(Step("router security", "tls", f"sandbox: routers over {what}",
                                  ("router_security", "sandboxes[]"),
                                  lambda m=mode: self.switch_sandbox(m),
                                  {"mode": mode, "rep": rep},
                                  lambda r: f"up in {r['up_s']} s"))
                gate = (lambda m=mode: self.security_gate(m))
                steps.append(Step("router security", "tls",
                                  f"ib_write_bw {human_size(REF_BW_SIZE)} across hosts, {mode}",
                                  ("router_security", mode, "write_bw[]"),
                                  lambda n=n_bw: self.with_link_security(lambda: m.perftest_bw(
                                      self.bench, "ib_write_bw", REF_BW_SIZE, n, server,
                                      client)),
                                  {"size": REF_BW_SIZE, "rep": rep}, bw_summary, gate))
                steps.append(Step("router security", "tls",
                                  f"ib_write_lat {human_size(REF_LAT_SIZE)} across hosts, {mode}",
                                  ("router_security", mode, "write_lat[]"),
                                  lambda n=n_lat: m.perftest_lat(self.bench, "ib_write_lat",
                                                                 REF_LAT_SIZE, n, server, client),
                                  {"size": REF_LAT_SIZE, "rep": rep}, lat_summary, gate))
                p = c["tls_pairs"]
                steps.append(Step("router security", "tls",
                                  f"{p} pairs ib_write_bw {human_size(REF_BW_SIZE)} across "
                                  f"hosts at once, {mode}, {c['pair_duration']} s",
                                  ("router_security", mode, "pairs_bw[]"),
                                  lambda p=p: m.pairs_bw(
                                      self.bench, self.pairs("cross_host", p), REF_BW_SIZE,
                                      c["pair_duration"], c["pair_margin"], c["run_timeout"] + 30),
                                  {"pairs": p, "rep": rep},
                                  lambda r: f"aggregate {r['aggregate_mb_s'] / 1000:.2f} GB/s",
                                  gate))
        return steps

    def with_link_security(self, fn):
        """fn's record, with how h0's links were secured while it ran (plaintext, tls: user
        space, ktls: the kernel encrypts)."""
        rec = fn()
        st = json.loads(vrdma("status", "--host", "h0", "--json").stdout)
        rec["link_security"] = sorted({str(l.get("security"))
                                       for l in st["daemon"]["router"]["links"]})
        return rec

    def security_gate(self, mode):
        if self.state.get("router_security") != mode:
            return f"skipped: the sandbox's routers are not in {mode} mode"
        return None

    def switch_sandbox(self, mode):
        """A fresh two-host sandbox whose routers link in `mode` ("tls" or "plaintext")."""
        t = time.monotonic()
        if self.runner:
            self.runner.kill_all()
        if self.sb:
            self.sb.down()
            self.sb = None
        # The routed path, where the routers carry every byte between hosts.
        extra = [*ROUTED, *(["--router-plaintext"] if mode == "plaintext" else [])]
        self.sb = Sandbox(hosts=2, containers=max(self.cfg["tls_pairs"], QOS_CONTAINERS),
                          extra_args=extra)
        self.sb.up()
        self.state = json.loads(vrdma("sandbox", "list", "--json").stdout)
        self.runner = bp.Runner(self.state)
        self.bench = m.Bench(self.runner, [h["pid"] for h in self.state["hosts"]], self.tools,
                             self.cfg["run_timeout"])
        got = self.state.get("router_security")
        if got != mode:
            raise RuntimeError(f"the sandbox's routers are in {got!r} mode, not {mode!r}")
        return {"up_s": round(time.monotonic() - t, 2), "router_security": got}

    def plan_size_sweep(self, topo):
        c = self.cfg
        cross = topo == "cross_host"
        server, client = self.cross_pair() if cross else self.same_pair()
        div = c["cross_host_div"] if cross else 1
        section = "cross host" if cross else "same host"
        gate = self.cross_gate if cross else None
        steps = []
        for size in c["sizes"]:
            hs = human_size(size)
            n_bw = clamp_iters(c["bw_bytes"] // div, size, c["bw_iters"])
            n_lat = clamp_iters(c["lat_bytes"] // div, size, c["lat_iters"])
            meta = {"size": size}
            for op in ("write", "read", "send"):
                prog = f"ib_{op}_bw"
                steps.append(Step(section, topo, f"{prog} {hs}",
                                  ("throughput", topo, f"vrdma_{op}[]"),
                                  lambda p=prog, s=size, n=n_bw: m.perftest_bw(
                                      self.bench, p, s, n, server, client,
                                      net_of=PERFTEST_FIXED_ITERS
                                      if s in (REF_BW_SIZE, REF_LAT_SIZE) else None),
                                  meta, bw_summary, gate))
            for op in ("write", "read", "send"):
                prog = f"ib_{op}_lat"
                steps.append(Step(section, topo, f"{prog} {hs}",
                                  ("latency", topo, f"vrdma_{op}[]"),
                                  lambda p=prog, s=size, n=n_lat: m.perftest_lat(
                                      self.bench, p, s, n, server, client),
                                  meta, lat_summary, gate))
            tls_list = [("ucx_tcp", "tcp")] if cross else [("ucx_posix", "posix,self"),
                                                            ("ucx_tcp", "tcp")]
            for key, tls in tls_list:
                # UCX over tcp is far slower than shared memory: fewer iterations.
                nb = n_bw if tls != "tcp" else max(c["bw_iters"][0] // 4, n_bw // 8)
                nl = n_lat if tls != "tcp" else max(c["lat_iters"][0], n_lat // 4)
                steps.append(Step(section, topo, f"ucx_perftest tag_bw {hs} UCX_TLS={tls}",
                                  ("throughput", topo, f"{key}[]"),
                                  lambda s=size, n=nb, t=tls: m.ucx(
                                      self.bench, "tag_bw", s, n, t, server, client),
                                  meta, bw_summary))
                steps.append(Step(section, topo, f"ucx_perftest tag_lat {hs} UCX_TLS={tls}",
                                  ("latency", topo, f"{key}[]"),
                                  lambda s=size, n=nl, t=tls: m.ucx(
                                      self.bench, "tag_lat", s, n, t, server, client),
                                  meta, lat_summary))
            steps.append(Step(section, topo, f"iperf3 {hs} writes", ("throughput", topo, "tcp[]"),
                              lambda s=size: m.iperf3(self.bench, s, c["tcp_seconds"], server,
                                                      client),
                              meta, bw_summary))
            if size > m.SOCKPERF_MAX:
                continue  # sockperf's messages end there; UCX tcp covers larger ones
            steps.append(Step(section, topo, f"sockperf ping-pong {hs}",
                              ("latency", topo, "tcp[]"),
                              lambda s=size: m.sockperf(self.bench, s, c["tcp_seconds"], server,
                                                        client),
                              meta, lat_summary))
        return steps

    def plan_scalability(self):
        c = self.cfg
        steps = []
        for topo in ("same_host", "cross_host"):
            gate = self.cross_gate if topo == "cross_host" else None
            where = "same host" if topo == "same_host" else "cross host"
            for p in c["pairs"]:
                pairs = self.pairs(topo, p)
                throughputs = [("ib_write_bw 64 KiB", "pairs_bw", m.pairs_bw)]
                if topo == "cross_host" and p in c["tcp_pairs"]:
                    # The baseline: TCP between the same containers, as many pairs at once.
                    throughputs.append(("iperf3 64 KiB writes", "pairs_tcp", m.pairs_tcp))
                for what, key, measure in throughputs:
                    steps.append(Step("scalability", "scalability",
                                      f"{p} pair(s) {where}: {what}, {c['pair_duration']} s",
                                      ("scalability", key, f"{topo}[]"),
                                      lambda pr=pairs, fn=measure: fn(
                                          self.bench, pr, REF_BW_SIZE, c["pair_duration"],
                                          c["pair_margin"], c["run_timeout"] + 30),
                                      {"pairs": p},
                                      lambda r: f"aggregate {r['aggregate_mb_s'] / 1000:.2f} GB/s",
                                      gate))
                iters = max(50, c["pair_lat_iters"] // p)
                steps.append(Step("scalability", "scalability",
                                  f"{p} pair(s) {where}: ib_write_lat 8 B x {iters}",
                                  ("scalability", "pairs_lat", f"{topo}[]"),
                                  lambda pr=pairs, n=iters: m.pairs_lat(
                                      self.bench, pr, REF_LAT_SIZE, n, c["run_timeout"] + 30),
                                  {"pairs": p},
                                  lambda r: f"p50 {r['p50_us_median']:.2f} us (median of "
                                  f"pairs), p99 up to {r['p99_us_max']:.1f} us",
                                  gate))
        for topo in ("same_host", "cross_host"):
            gate = self.cross_gate if topo == "cross_host" else None
            server, client = self.cross_pair() if topo == "cross_host" else self.same_pair()
            where = "same host" if topo == "same_host" else "cross host"
            for kind, count in (("verbs", c["setup_verbs"]), ("rdma_cm", c["setup_cm"])):
                steps.append(Step("connections", "connections",
                                  f"connection setup through {kind}, {count} connections, {where}",
                                  ("scalability", "setup_rate", kind, topo),
                                  lambda k=kind, n=count, s=server, cl=client: m.setup_rate(
                                      self.bench, k, n, s, cl),
                                  {"count": count},
                                  lambda r: f"{r['per_second']:.0f} connections/s",
                                  gate))
        for topo in ("same_host", "cross_host"):
            gate = self.cross_gate if topo == "cross_host" else None
            server, client = self.cross_pair() if topo == "cross_host" else self.same_pair()
            where = "same host" if topo == "same_host" else "cross host"
            for q in c["qps"]:
                n = max(20, c["qp_messages"] // q)
                steps.append(Step("connections", "connections",
                                  f"ib_write_bw -q {q} {human_size(c['qp_size'])} {where}",
                                  ("scalability", "qps", f"{topo}[]"),
                                  lambda q=q, n=n, s=server, cl=client: m.ib_write_bw_qps(
                                      self.bench, q, c["qp_size"], n, s, cl,
                                      timeout=c["qps_timeout"]),
                                  {"qps": q},
                                  lambda r: f"{r['mb_s'] / 1000:.2f} GB/s, "
                                  f"run {r['total_wall_s']} s",
                                  gate))
        return steps

    def pairs(self, topo, p):
        if topo == "same_host":
            return [(f"h0c{2 * k}", f"h0c{2 * k + 1}") for k in range(p)]
        return [(f"h1c{k}", f"h0c{k}") for k in range(p)]

    # -- step bodies
    def daemon_pid(self, host):
        for h in self.state["hosts"]:
            if h["name"] == host:
                return h["pid"]
        raise RuntimeError(f"no host {host} in the sandbox")

    def idle_cpu(self):
        secs = self.cfg["idle_seconds"]
        pids = [h["pid"] for h in self.state["hosts"]]
        t0 = time.monotonic()
        before = [bp.proc_cpu_seconds(p) for p in pids]
        time.sleep(secs)
        after = [bp.proc_cpu_seconds(p) for p in pids]
        wall = time.monotonic() - t0
        per = [{"host": h["name"], "cpu_s": b - a}
               for h, a, b in zip(self.state["hosts"], before, after)]
        total = sum(x["cpu_s"] for x in per)
        return {"seconds": round(wall, 3), "daemons": per, "vrdmad_cpu_s": total,
                "vrdmad_cpu_percent": 100 * total / wall / len(pids)}

    def mem_per_container(self):
        n = self.cfg["mem_containers"]
        pid = self.daemon_pid("h0")
        base = m.daemon_memory(pid)
        rec = m.hold(self.bench, [f"h0c{j}" for j in range(n)], "h0", pid,
                     idle_window=self.cfg["idle_seconds"])
        if rec["reported"]["clients"] != n:
            raise RuntimeError(f"vrdmad reports {rec['reported']['clients']} clients, "
                               f"expected {n}")
        d = rec["vrdmad"]
        rec["vrdmad_before"] = base
        # vrdmad's own (anonymous) memory; its RSS also grows by code pages met for the
        # first time and by the arena pages it maps, both reported apart.
        rec["vrdmad_kib_per_container"] = (d["rss_anon_kib"] - base["rss_anon_kib"]) / n
        rec["resolution_kib"] = 4 / n  # resident memory grows by pages
        rec["vrdmad_rss_kib_per_container"] = (d["rss_kib"] - base["rss_kib"]) / n
        rec["vrdmad_shmem_kib_per_container"] = (d["rss_shmem_kib"] - base["rss_shmem_kib"]) / n
        rec["vrdmad_fds_per_container"] = (d["fds"] - base["fds"]) / n
        rec["shared_kib_per_container"] = rec["program_mean"]["memfd_kib"]
        rec["program_private_kib"] = rec["program_mean"]["rss_anon_kib"]
        # Also the CPU that idle but connected programs and vrdmad use.
        idle = rec["idle"]
        self.results["sections"].setdefault("cpu", {})["idle_with_clients"] = {
            "programs": n, "seconds": idle["seconds"], "vrdmad_cpu_s": idle["vrdmad_cpu_s"],
            "programs_cpu_s": idle["programs_cpu_s"],
            "vrdmad_cpu_percent": 100 * idle["vrdmad_cpu_s"] / idle["seconds"]}
        return rec

    def mem_delta(self, qps=0, mrs=0):
        """One program with nothing, then one with `qps` QPs or `mrs` MRs, in h0c0."""
        pid = self.daemon_pid("h0")
        empty = m.hold(self.bench, ["h0c0"], "h0", pid)
        full = m.hold(self.bench, ["h0c0"], "h0", pid, qps=qps, mrs=mrs, mr_size=4096)
        items = qps or mrs
        got = full["reported"]["qps" if qps else "mrs"]
        if got != items and not full["reported"]["truncated"]:
            raise RuntimeError(f"vrdmad reports {got} {'QPs' if qps else 'MRs'}, expected {items}")
        dv = {k: full["vrdmad"][k] - empty["vrdmad"][k]
              for k in ("rss_kib", "rss_anon_kib", "rss_shmem_kib", "fds")}
        dp = {k: full["program_mean"][k] - empty["program_mean"][k]
              for k in ("memfd_kib", "rss_anon_kib", "rss_shmem_kib")}
        rec = {"items": items, "empty": empty, "with_items": full,
               "vrdmad_kib_per_item": dv["rss_anon_kib"] / items,
               "vrdmad_rss_kib_per_item": dv["rss_kib"] / items,
               "vrdmad_fds_per_item": dv["fds"] / items,
               "shared_kib_per_item": dp["memfd_kib"] / items,
               "program_private_kib_per_item": dp["rss_anon_kib"] / items}
        if mrs:
            rec["note"] = ("an MR's pages move into shared memory (memfds), so 4 KiB of each "
                           "MR's shared growth is the registered buffer itself")
        return rec

    def fairness(self):
        if self.runner:
            self.runner.kill_all()
        return bench_fairness.measure(self.sb, self.cfg["qos_seconds"])

    def latency_class(self):
        if self.runner:
            self.runner.kill_all()
        return bench_fairness.latency_class(self.sb)

    def memcpy(self):
        return m.memcpy(self.bench, self.cfg["sizes"], self.cfg["memcpy_ms"])

    def registration(self):
        return m.registration(self.bench, "h0c0", self.cfg["reg_sizes"], self.cfg["reg_reps"])

    def probe(self):
        server, client = self.cross_pair()
        try:
            rec = m.perftest_bw(self.bench, "ib_write_bw", 8, 100, server, client,
                                timeout=self.cfg["probe_timeout"])
        except Exception as e:  # noqa: BLE001 - recorded, then every cross-host RDMA step skips
            text = str(e).strip()
            self.cross_host_error = text.splitlines()[0] if text else type(e).__name__
            raise
        return rec

    # -- running
    def run_steps(self, steps, progress):
        budgets = {k: v * self.args.budget_scale for k, v in self.cfg["budget"].items()}
        for st in steps:
            spent = self.section_time.get(st.budget, 0.0)
            progress.start(st.section, st.label)
            t0 = time.monotonic()
            skip = st.gate() if st.gate else None
            if skip is None and spent > budgets[st.budget]:
                skip = (f"skipped: this part's time budget ({budgets[st.budget]:.0f} s in "
                        f"{self.mode} mode) was used up")
            if skip:
                rec = {**st.meta, "error": skip}
                outcome = skip
            else:
                try:
                    rec = st.fn()
                    if isinstance(rec, dict):
                        rec = {**st.meta, **rec}
                    outcome = st.summary(rec)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # noqa: BLE001 - every failure becomes an error entry
                    text = str(e).strip() or type(e).__name__
                    if not isinstance(e, (RuntimeError, bp.JobTimeout)):
                        text = f"{type(e).__name__}: {text}\n{traceback.format_exc(limit=3)}"
                    rec = {**st.meta, "error": text}
                    outcome = "ERROR " + text.splitlines()[0]
            self.section_time[st.budget] = spent + time.monotonic() - t0
            put(self.results["sections"], st.path, rec)
            if isinstance(rec, dict) and "error" in rec:
                self.results["errors"].append({
                    "part": "/".join(p.rstrip("[]") for p in st.path), "step": st.label,
                    "error": rec["error"]})
            progress.end(st.section, st.label, outcome)

    def containers_needed(self):
        c = self.cfg
        return max(len(bench_fairness.RULES), 2 * max(c["pairs"]), c["mem_containers"],
                   max(c["pairs"]))

    def run(self):
        c = self.cfg
        wall0 = time.monotonic()
        self.results["started_at"] = datetime.datetime.now().astimezone().isoformat(
            timespec="seconds")
        self.results["machine"] = machine_info()
        self.results["config"] = {k: v for k, v in c.items() if k != "budget"}
        self.results["config"]["time_budgets_s"] = {
            k: v * self.args.budget_scale for k, v in c["budget"].items()}
        self.results["config"]["reference_sizes"] = {"throughput": REF_BW_SIZE,
                                                     "latency": REF_LAT_SIZE}
        self.results["config"]["tools"] = self.tools
        hosts, per_host = 2, self.containers_needed()
        self.results["config"]["sandbox"] = {"hosts": hosts, "containers_per_host": per_host}
        steps = self.plan()
        progress = Progress(len(steps))
        progress.note(f"vrdma bench ({self.mode}): {len(steps)} steps; sandbox of {hosts} "
                      f"hosts x {per_host} containers; results in {self.args.out}")
        self.sb = Sandbox(hosts=hosts, containers=per_host)
        t = time.monotonic()
        self.sb.up()
        self.state = json.loads(vrdma("sandbox", "list", "--json").stdout)
        self.results["config"]["sandbox"]["up_s"] = round(time.monotonic() - t, 2)
        self.runner = bp.Runner(self.state)
        self.bench = m.Bench(self.runner, [h["pid"] for h in self.state["hosts"]],
                             self.tools, c["run_timeout"])
        progress.note(f"sandbox up in {time.monotonic() - t:.1f} s")
        try:
            self.run_steps(steps, progress)
        finally:
            self.teardown()
        self.results["finished_at"] = datetime.datetime.now().astimezone().isoformat(
            timespec="seconds")
        self.results["wall_s"] = round(time.monotonic() - wall0, 1)
        self.results["machine"]["load_average_at_end"] = list(os.getloadavg())
        self.results["config"]["time_spent_s"] = {k: round(v, 1)
                                                  for k, v in self.section_time.items()}
        self.results["cross_host_rdma"] = (
            {"available": True} if not self.cross_host_error
            else {"available": False, "reason": self.cross_host_error})

    def teardown(self):
        if self.runner:
            self.runner.kill_all()
        if self.sb:
            self.sb.down()
            self.sb = None


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="vrdma bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="\n\n".join(__doc__.strip().split("\n\n")[:2]),
        epilog="Files written to --out: results.json (every figure, the machine, errors), "
               "report.md (headline ratios first; ratio > 1 means vrdma is better), "
               "throughput.png, latency.png, cpu.png, scalability.png, memory.png, fairness.png.\n\n"
               "The sandbox (namespaces vrdma-*) replaces any sandbox that is up and is "
               "taken down at the end, also on errors and Ctrl-C. Cross-host RDMA parts are "
               "recorded as errors when a short probe across hosts fails.\n\n"
               "Environment: VRDMA_BIN, VRDMA_DAEMON, VRDMA_LIBDIR (which vrdma, vrdmad and "
               "drop-in libraries to use), VRDMA_BENCH_TOOLS (directory of vrdma-bench-conn "
               "and vrdma-bench-memcpy).\n\n"
               "vrdma bench --mediated [--rounds N] [--quick] [--json FILE]: the mediated "
               "path between tenants on one host against the direct path and TCP "
               "(bench/mediated.py).\n\n"
               "Docs: docs/performance.md (how to measure, what the report means, the current "
               "figures; installed in share/doc/vrdma/docs).")
    ap.add_argument("--quick", action="store_true",
                    help="fewer sizes, pairs and iterations: about 3 minutes "
                         "(a full run takes up to 15)")
    ap.add_argument("--out", metavar="DIR",
                    help="output directory (default ./vrdma-bench-YYYYmmdd-HHMMSS)")
    ap.add_argument("--budget-scale", type=float, default=1.0, metavar="X",
                    help="multiply every part's time budget by X (default 1; a part that "
                         "exceeds its budget skips its remaining steps, recorded as errors)")
    ap.add_argument("--no-plots", action="store_true", help="write JSON and report only")
    ap.add_argument("--markdown", metavar="FILE",
                    help="also write the headline table with the run's date, machine and "
                         "command to FILE (between the markers '%s' and '%s' when FILE has "
                         "them, the rest of FILE kept; docs/performance.md has them)"
                         % (bench_report.MARKDOWN_BEGIN, bench_report.MARKDOWN_END))
    ap.add_argument("--from", dest="from_results", metavar="RESULTS_JSON",
                    help="with --markdown: take the figures from the results.json of an "
                         "earlier run instead of measuring")
    args = ap.parse_args(argv)
    if args.from_results and not args.markdown:
        ap.error("--from needs --markdown")
    if not args.out:
        args.out = os.path.abspath(datetime.datetime.now().strftime("vrdma-bench-%Y%m%d-%H%M%S"))
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--mediated" in argv:  # the mediated path between tenants on one host (mediated.py)
        import mediated
        mediated.main([a for a in argv if a != "--mediated"])
        return 0
    args = parse_args(argv)
    if args.from_results:  # the table of an earlier run: nothing is measured
        try:
            with open(args.from_results) as f:
                earlier = json.load(f)
            bench_report.write_markdown(earlier, args.markdown)
        except (OSError, ValueError) as e:
            sys.exit(f"vrdma bench: {e}")
        sys.stderr.write(f"vrdma bench: wrote {args.markdown} from {args.from_results}\n")
        return 0
    if os.geteuid() != 0:
        sys.exit("vrdma bench: run as root (it creates network namespaces)")
    for prog in ("ib_write_bw", "ucx_perftest", "iperf3", "sockperf"):
        if not shutil.which(prog):
            sys.exit(f"vrdma bench: {prog} not found (scripts/setup.sh --deps installs it)")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        sys.exit(f"vrdma bench: cannot create {args.out}: {e}")

    received = []

    def on_term(signum, frame):
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    suite = Suite(args, MODES["quick" if args.quick else "full"])
    suite.results["command"] = shlex.join(["vrdma", "bench", *argv])
    status = 0
    t0 = time.monotonic()
    try:
        suite.run()
    except KeyboardInterrupt:
        suite.teardown()
        suite.results["interrupted"] = received[0] if received else "SIGINT"
        suite.results["finished_at"] = datetime.datetime.now().astimezone().isoformat(
            timespec="seconds")
        suite.results["wall_s"] = round(time.monotonic() - t0, 1)
        sys.stderr.write(f"\nvrdma bench: interrupted ({suite.results['interrupted']}); the "
                         "sandbox is down; writing what was measured\n")
        status = 130
    except Exception as e:  # noqa: BLE001 - e.g. the sandbox could not be built
        suite.teardown()
        suite.results["fatal_error"] = f"{type(e).__name__}: {e}"
        sys.stderr.write(f"vrdma bench: {e}\n")
        status = 1
    bench_report.finish(suite.results, args.out, plots=not args.no_plots)
    if args.markdown:
        try:
            bench_report.write_markdown(suite.results, args.markdown)
        except OSError as e:
            sys.stderr.write(f"vrdma bench: cannot write {args.markdown}: {e}\n")
            status = status or 1
    sys.stderr.write(f"vrdma bench: wrote {os.path.join(args.out, 'results.json')}, "
                     f"report.md{'' if args.no_plots else ' and plots'}"
                     f"{', ' + args.markdown if args.markdown else ''} "
                     f"({len(suite.results['errors'])} parts with errors)\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
