"""Running Debian's UCX tools (ucx-utils 1.13) between the test bed's containers over vrdma:
the environment that confines UCX to the vrdma device, ucx_perftest pairs, their "Final:" rows
and the transports UCX reports it chose. Shared by the UCX and Open MPI suites and the
benchmark."""

import re
import threading
import time

# The vrdma device's port, as UCX names it.
DEVICE = "vrdma0:1"


def ucx_env(tls, log_info=True):
    """UCX's own settings, as a user of an RDMA device would give them: the transports `tls`
    (None: UCX's defaults), and UCP's report of the transports each endpoint uses. UCX picks
    the devices itself: nothing names vrdma."""
    env = {"UCX_WARN_UNUSED_ENV_VARS": "n"}
    if tls:
        env["UCX_TLS"] = tls
    if log_info:
        env["UCX_LOG_LEVEL"] = "info"
    return env


# ucx_perftest's last row: iterations, then latency (50th percentile, average, overall, in us),
# bandwidth (average, overall, MB/s) and message rate (average, overall).
FINAL = re.compile(r"^Final:\s+(\d+)" + r"\s+([\d.]+)" * 7 + r"\s*$", re.M)
# UCP's "ep_cfg[N]: tag(rc_verbs/vrdma0:1) rma(...)" lines (UCX_LOG_LEVEL=info).
EP_CFG = re.compile(r"ep_cfg\[\d+\]:(.*)$", re.M)
LANE = re.compile(r"([a-z_0-9]+)/([A-Za-z0-9_.:]+)")


def final_row(text):
    """The Final row as a dict, or None."""
    m = FINAL.search(text)
    if not m:
        return None
    v = [float(x) for x in m.groups()]
    return {"iters": int(v[0]), "lat_p50_us": v[1], "lat_avg_us": v[2], "lat_overall_us": v[3],
            "bw_avg_MBps": v[4], "bw_overall_MBps": v[5], "rate_avg": v[6], "rate_overall": v[7]}


def lanes(text):
    """The set of (transport, device) pairs that UCP reported for its endpoints."""
    out = set()
    for m in EP_CFG.finditer(text):
        out.update(LANE.findall(m.group(1)))
    return out


def wait_tcp_listening(sb, container, port, proc, timeout=30):
    """Waits until `port` listens in the container, or the process ended, or time ran out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.popen.poll() is not None:
            return False
        rc, out, _ = sb.run(container, "ss", "-lntH", lib=False, timeout=10)
        if re.search(rf":{port}\b", out):
            return True
        time.sleep(0.1)
    return False


def perftest_pair(sb, server, client, server_ip, tls, test, size, iters, port, warmup=None,
                  timeout=300, extra=()):
    """ucx_perftest server in `server`, client in `client`; returns (server, client) as
    (rc, out) each. The server serves one test and exits."""
    env = ucx_env(tls)
    opts = ["-p", str(port)]
    s = sb.start(server, "ucx_perftest", *opts, env=env)
    try:
        if not wait_tcp_listening(sb, server, port, s):
            s.kill()
            s.wait(10)
            raise AssertionError(f"ucx_perftest server never listened on {port}:\n{s.out}\n{s.err}")
        args = [server_ip, *opts, "-t", test, "-s", str(size), "-n", str(iters)]
        if warmup is not None:
            args += ["-w", str(warmup)]
        c = sb.start(client, "ucx_perftest", *args, *extra, env=env)
        crc = c.wait(timeout)
        src = s.wait(60)
    finally:
        s.kill()
    return (src, s.out + s.err), (crc, c.out + c.err)


class StatusSampler:
    """Samples `vrdma status` of a host while something runs, and keeps what the QPs of the
    programs in `containers` showed: {(container, qp type): highest tx_ops seen}."""

    def __init__(self, sb, host, containers, period=0.2):
        self.sb, self.host, self.containers, self.period = sb, host, set(containers), period
        self.seen = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                st = self.sb.status(self.host)
            except Exception:  # the daemon busy or a client leaving mid-read: sample again
                st = {"clients": []}
            for c in st.get("clients", []):
                if c.get("container") not in self.containers:
                    continue
                for q in c.get("qps", []):
                    key = (c["container"], q.get("type"))
                    self.seen[key] = max(self.seen.get(key, 0), q.get("tx_ops", 0))
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
