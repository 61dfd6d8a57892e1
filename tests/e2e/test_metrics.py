"""vrdmad's Prometheus endpoint, scraped by a real Prometheus (Debian's), while unmodified
ib_write_bw runs between two containers of one host; the Grafana dashboard's queries against
that scrape; `vrdma top` under tmux.

vrdmad runs in the sandbox host's namespace with --metrics-listen on that namespace's loopback;
Prometheus runs in the same namespace (its own temporary directory, scraping every second), and
every HTTP request of the test is made from inside it. Everything is stopped and removed at the
end, also on failure."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.parse

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows
from vrdma_py.sandbox import VRDMA, Sandbox, container_ip

METRICS_PORT = 19464
PROM_PORT = 19090
SERVER, CLIENT = "h0c0", "h0c1"
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "vrdma-dashboard.json")
TOOLS = os.path.join(os.path.dirname(os.path.realpath(VRDMA)), "..", "..", "tests", "tools")
BAD_RKEY = os.environ.get("VRDMA_BAD_RKEY") or os.path.join(TOOLS, "vrdma_bad_rkey")

SB = Sandbox(hosts=1, containers=2,
             extra_args=[f"--daemon-arg=--metrics-listen=127.0.0.1:{METRICS_PORT}"])
PROM = {}


def host_netns():
    return SB.state()["hosts"][0]["netns"]


def http_get(url, timeout=10):
    """GET from inside the sandbox host's namespace (where vrdmad and Prometheus listen)."""
    code = ("import sys, urllib.request\n"
            "r = urllib.request.urlopen(sys.argv[1], timeout=5)\n"
            "sys.stdout.write(r.headers.get('Content-Type', '') + '\\n')\n"
            "sys.stdout.write(r.read().decode())\n")
    p = subprocess.run(["ip", "netns", "exec", host_netns(), "python3", "-c", code, url],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"GET {url} failed:\n{p.stderr}")
    ctype, _, body = p.stdout.partition("\n")
    return ctype, body


def scrape():
    return http_get(f"http://127.0.0.1:{METRICS_PORT}/metrics")


def samples(text, name):
    """{frozenset(labels): value} of one metric in an exposition text."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
            out[labels] = float(m.group(2))
    return out


def value(text, name, **labels):
    want = set(labels.items())
    return sum(v for k, v in samples(text, name).items() if want <= set(k))


def promql(query, at=None):
    params = {"query": query}
    if at is not None:
        params["time"] = f"{at:.3f}"
    _, body = http_get(f"http://127.0.0.1:{PROM_PORT}/api/v1/query?"
                       + urllib.parse.urlencode(params))
    r = json.loads(body)
    if r.get("status") != "success":
        raise AssertionError(f"{query}: {r}")
    return r["data"]["result"]


def start_prometheus():
    tmp = tempfile.mkdtemp(prefix="vrdma-prom-")
    PROM["dir"] = tmp
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: vrdmad\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{METRICS_PORT}']\n")
    with open(os.path.join(tmp, "prometheus.log"), "w") as log:
        PROM["proc"] = subprocess.Popen(
            ["ip", "netns", "exec", host_netns(), "prometheus", f"--config.file={cfg}",
             f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
             f"--web.listen-address=127.0.0.1:{PROM_PORT}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # Ready, and the target scraped at least once.
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if PROM["proc"].poll() is not None:
            break
        try:
            if promql('up{job="vrdmad"} == 1'):
                return
        except (AssertionError, json.JSONDecodeError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.5)
    with open(os.path.join(tmp, "prometheus.log")) as f:
        raise AssertionError(f"Prometheus did not scrape vrdmad within 60 s:\n{f.read()[-3000:]}")


def stop_prometheus():
    p = PROM.pop("proc", None)
    if p and p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
    d = PROM.pop("dir", None)
    if d:
        shutil.rmtree(d, ignore_errors=True)


def setUpModule():
    SB.up()
    try:
        start_prometheus()
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():
    stop_prometheus()
    SB.down()


class Endpoint(unittest.TestCase):
    def test_scrape_passes_promtool_and_has_the_families(self):
        ctype, text = scrape()
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, f"promtool:\n{p.stdout}\n{p.stderr}")
        self.assertEqual((p.stdout + p.stderr).strip(), "", "promtool found problems")
        for name in ("vrdma_build_info", "vrdma_daemon_clients", "vrdma_daemon_cpu_seconds_total",
                     "vrdma_daemon_resident_memory_bytes", "vrdma_directory_up"):
            self.assertTrue(samples(text, name), f"{name} missing:\n{text[:2000]}")
        self.assertGreater(value(text, "vrdma_daemon_resident_memory_bytes"), 0)

    def test_bad_requests_get_errors_and_vrdmad_keeps_serving(self):
        code = ("import socket, sys\n"
                "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5)\n"
                "s.sendall(bytes.fromhex(sys.argv[2]))\n"
                "s.settimeout(10)\n"
                "print(s.recv(100).decode().split('\\r\\n')[0])\n")
        for req, want in (("POST /metrics HTTP/1.1\r\n\r\n", "405"),
                          ("GET /nope HTTP/1.1\r\n\r\n", "404"),
                          ("\x00\x01garbage\r\n\r\n", "400"),
                          ("GET /metrics HTTP/1.1\r\nX: " + "a" * 9000 + "\r\n\r\n", "431")):
            p = subprocess.run(["ip", "netns", "exec", host_netns(), "python3", "-c", code,
                                str(METRICS_PORT), req.encode().hex()], capture_output=True,
                               text=True,
                               timeout=30)
            self.assertIn(f"HTTP/1.1 {want}", p.stdout, p.stderr)
        self.assertTrue(samples(scrape()[1], "vrdma_build_info"))

    def test_metrics_address_on_a_container_network_is_refused(self):
        daemon = os.environ.get("VRDMA_DAEMON") or "vrdmad"
        p = subprocess.run([daemon, "--socket", "/nonexistent/x.sock", "--tenant",
                            "t=10.99.0.0/24", "--metrics-listen", "10.99.0.1:9464"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("container", p.stderr)
        self.assertIn("--metrics-on-pod-network", p.stderr)


class Traffic(unittest.TestCase):
    def test_prometheus_rate_matches_ib_write_bw(self):
        secs = 16
        t0 = time.time()
        (src, sout, serr), (crc, cout, cerr) = SB.pair(
            ["ib_write_bw", "-D", str(secs)], ["ib_write_bw", "-D", str(secs),
                                               container_ip(SERVER)],
            SERVER, CLIENT, timeout=120)
        t1 = time.time()
        self.assertEqual(crc, 0, f"client:\n{cout}\n{cerr}")
        self.assertEqual(src, 0, f"server:\n{sout}\n{serr}")
        rows = bw_rows(cout)
        self.assertTrue(rows, cout)
        reported = rows[0][3] * 1024 * 1024  # BW average, MB/s (perftest's MB: 2^20 bytes)
        time.sleep(3)  # the last scrapes
        # Inside the run, away from its start and end (perftest measures its middle too).
        at = t1 - 3
        window = max(4, int(t1 - t0 - 7))
        ip = container_ip(CLIENT)
        r = promql(f'sum(rate(vrdma_tx_bytes_total{{ip="{ip}",op="write"}}[{window}s]))', at)
        self.assertTrue(r, "no series for the client container")
        measured = float(r[0]["value"][1])
        rx = promql(f'sum(rate(vrdma_rx_bytes_total{{ip="{container_ip(SERVER)}"}}[{window}s]))',
                    at)
        received = float(rx[0]["value"][1]) if rx else 0.0
        print(f"\nib_write_bw: {reported / 1e6:.1f} MB/s (10^6 B); Prometheus rate of "
              f"vrdma_tx_bytes_total (client): {measured / 1e6:.1f} MB/s, of "
              f"vrdma_rx_bytes_total (server): {received / 1e6:.1f} MB/s, window {window} s")
        self.assertLess(abs(measured - reported) / reported, 0.10)
        self.assertLess(abs(received - reported) / reported, 0.10)
        # Message rate and completions follow the same counters.
        self.assertGreater(value(scrape()[1], "vrdma_tx_requests_total", ip=ip, op="write"), 0)

    def test_rem_access_errors_are_counted(self):
        ip = container_ip(CLIENT)
        name = "vrdma_completions_total"
        labels = dict(ip=ip, queue="send", status="IBV_WC_REM_ACCESS_ERR")
        before = value(scrape()[1], name, **labels)
        runs = 3
        for i in range(runs):
            (src, sout, serr), (crc, cout, cerr) = SB.pair(
                [BAD_RKEY, "--port", "18620"], [BAD_RKEY, container_ip(SERVER), "--port", "18620"],
                SERVER, CLIENT, timeout=60, port=18620)
            self.assertEqual(crc, 0, f"client:\n{cout}\n{cerr}")
            self.assertIn("remote access error", cout)
        after = value(scrape()[1], name, **labels)
        self.assertEqual(after - before, runs)
        # Prometheus sees the same rise.
        time.sleep(3)
        r = promql(f'sum(increase({name}{{ip="{ip}",status="IBV_WC_REM_ACCESS_ERR"}}[2m]))')
        self.assertTrue(r and float(r[0]["value"][1]) > 0, r)


class Dashboard(unittest.TestCase):
    def test_every_query_names_exported_metrics(self):
        with open(DASHBOARD) as f:
            board = json.load(f)
        exprs = []

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("expr"), str):
                    exprs.append(node["expr"])
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(board)
        self.assertGreaterEqual(len(exprs), 8)
        # Names the scrape exports (links exist only with a router: their families are there,
        # with HELP and TYPE, even without samples).
        _, text = scrape()
        exported = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
        functions = {"sum", "rate", "increase", "by", "without", "topk", "max", "min", "avg",
                     "irate", "count", "on", "ignoring", "group_left", "bool", "and", "or",
                     "unless", "offset", "clamp_min", "label_replace", "sort_desc", "delta"}
        for e in exprs:
            # Label matchers, strings and ranges aside, every identifier is a metric, a
            # function, a keyword or a grouping label.
            bare = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]', " ", e)
            bare = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", bare)
            names = [n for n in re.findall(r"(?<![\w.])[a-zA-Z_:][\w:]*", bare) if n not in functions]
            self.assertTrue(names, e)
            for n in names:
                self.assertIn(n, exported, f"{e}: {n} is not exported by vrdmad")
            # And Prometheus accepts the query.
            promql(e.replace("$__rate_interval", "1m").replace("$container", ".*")
                   .replace("$host", ".*"))


class Top(unittest.TestCase):
    def test_moving_figures_under_tmux_and_q_quits(self):
        if not shutil.which("tmux"):
            self.fail("tmux is not installed (scripts/setup.sh --deps)")
        # A tmux server of our own (its own socket), started with this test's environment.
        session = "top"
        tmux = ["tmux", "-L", f"vrdma-top-{os.getpid()}"]
        env = dict(os.environ)
        env.pop("TMUX", None)
        rc_file = tempfile.mktemp(prefix="vrdma-top-rc-")
        cmd = f"{VRDMA} top --host h0; echo $? > {rc_file}"
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd],
                       check=True, env=env, timeout=30)
        server = client = None
        try:
            server = SB.start(SERVER, "ib_write_bw", "-D", "20")
            self.assertTrue(SB.wait_listening(SERVER, 18515))
            client = SB.start(CLIENT, "ib_write_bw", "-D", "20", container_ip(SERVER))

            def capture():
                return subprocess.run([*tmux, "capture-pane", "-p", "-t", session],
                                      capture_output=True, text=True, timeout=10).stdout

            def client_rates(screen):
                """The rate columns (TX, RX, TX MSG, RX MSG) of the client container's row."""
                for line in screen.splitlines():
                    if line.startswith(CLIENT + " "):
                        return re.findall(r"\d+\.\d [kMGT]?(?:B/s|/s)", line)
                return None
            seen = []
            end = time.monotonic() + 30
            while time.monotonic() < end and len(seen) < 2:
                time.sleep(1.5)
                rates = client_rates(capture())
                # Throughput in MB/s or GB/s in the TX column, and figures that changed.
                if rates and re.match(r"\d+\.\d [MG]B/s", rates[0]) and rates not in seen:
                    seen.append(rates)
            self.assertEqual(len(seen), 2, f"no moving figures; last screen:\n{capture()}")
            self.assertNotEqual(seen[0], seen[1])
            subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True, timeout=10)
            end = time.monotonic() + 10
            while time.monotonic() < end and not os.path.exists(rc_file):
                time.sleep(0.2)
            with open(rc_file) as f:
                self.assertEqual(f.read().strip(), "0")
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=10)
            for p in (client, server):
                if p:
                    p.kill()
                    p.popen.communicate(timeout=10)
            if os.path.exists(rc_file):
                os.unlink(rc_file)


if __name__ == "__main__":
    unittest.main()
