"""vrdmad's configuration file, with the real vrdmad (root).

Table-driven: every key of vrdmad's file (the keys of `vrdmad --print-config-template`, so a new
option without a row here fails the test) is set through a file alone; `vrdmad --print-config`
must show the value, and for every key whose effect can be seen from outside, vrdmad is started
with the file and the effect is observed: its status, its socket, what a client in a container
(a network namespace of this test) gets, its log, its router port, its system calls. Bad files
(unknown key, wrong type, bad value, YAML syntax error) make vrdmad exit with the file, line and
key, and it never serves. A running vrdmad re-reads its file on SIGHUP.

Environment (set by CTest): VRDMA_DAEMON, VRDMA_BIN, VRDMA_LIBDIR; VRDMA_NETNS_PREFIX names the
test's namespace.
"""

import grp
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

DAEMON = os.environ.get("VRDMA_DAEMON", "")
VRDMA = os.environ.get("VRDMA_BIN", "")
LIBDIR = os.environ.get("VRDMA_LIBDIR", "")
PREFIX = os.environ.get("VRDMA_NETNS_PREFIX") or "vrdma-"
NETNS = PREFIX + "cfgc"
# Its container name in vrdmad: without vrdmad's default --netns-prefix ("vrdma-").
CONTAINER = NETNS.removeprefix("vrdma-")
NETNS_IP = "10.99.8.10"
ROUTER_PORT = 17483
# getsockopt(SO_PEERPIDFD) as strace writes it (older strace: the number, 77).
PEERPIDFD = r"SO_PEERPIDFD|0x4d /\* SO_\?\?\? \*/"
TMP = None


def sh(*cmd, timeout=30, check=True, **kw):
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "\n" + "".join(f"  - {json.dumps(x)}\n" for x in v)
    return json.dumps(v) if isinstance(v, str) else str(v)


def write_config(name, settings):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        for k, v in settings.items():
            text = yaml_value(v)
            f.write(f"{k}:{text}" if text.startswith("\n") else f"{k}: {text}\n")
    return path


def make_pki(d):
    """A CA and host 0's certificate (CN vrdma-host-0, IP 127.0.0.1), as the cluster's PKI."""
    os.makedirs(d, exist_ok=True)
    ca, ca_key = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
    cert, key = os.path.join(d, "host.pem"), os.path.join(d, "host.key")
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
       "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=vrdma test CA",
       "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign")
    csr = os.path.join(d, "host.csr")
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", key, "-out", csr, "-subj", "/CN=vrdma-host-0")
    ext = os.path.join(d, "host.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
                "basicConstraints=CA:FALSE\n")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
       "-out", cert, "-days", "1", "-extfile", ext)
    return {"tls-ca": ca, "tls-cert": cert, "tls-key": key}


class Daemon:
    """vrdmad started with `--config FILE` and nothing else."""

    def __init__(self, config, trace=None):
        self.log_path = config + ".log"
        self.socket = None
        with open(config) as f:
            for line in f:
                if line.startswith("socket:"):
                    self.socket = json.loads(line.split(":", 1)[1].strip())
        cmd = [DAEMON, "--config", config]
        if trace:
            cmd = ["strace", "-f", "-qq", "-e", "trace=getsockopt", "-o", trace, *cmd]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid  # vrdmad's own; under strace, found by wait_serving()
        self.traced = bool(trace)

    def wait_serving(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"vrdmad exited ({self.proc.returncode}):\n{self.text()}")
            if os.path.exists(self.socket) and self.status(check=False) is not None:
                if self.traced:
                    self.pid = self.traced_pid()
                return
            time.sleep(0.05)
        raise AssertionError(f"vrdmad does not serve {self.socket}:\n{self.text()}")

    def traced_pid(self):
        """The vrdmad that strace (self.proc) runs: its child running DAEMON."""
        program = os.path.realpath(DAEMON)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid == self.proc.pid and os.readlink(f"/proc/{entry}/exe") == program:
                    return int(entry)
            except (OSError, ValueError, IndexError):
                continue
        raise AssertionError("the traced vrdmad is not a child of strace")

    def status(self, netns=None, check=True):
        cmd = [VRDMA, "status", "--socket", self.socket, "--json"]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        p = sh(*cmd, check=False)
        if p.returncode != 0:
            if check:
                raise AssertionError(f"vrdma status failed: {p.stderr}\n{self.text()}")
            return None
        return json.loads(p.stdout)

    def devinfo(self, netns=None, unshare_ip=None):
        """ibv_devinfo through the drop-in library: in `netns`, in a namespace of its own
        (unnamed) with address `unshare_ip`, or in vrdmad's own. Its output (no device: "")."""
        env = f"env LD_LIBRARY_PATH={LIBDIR} VRDMA_SOCKET={self.socket} VRDMA_QUIET=1"
        script = f"{env} ibv_devinfo"
        if unshare_ip:
            script = (f"ip link add eth0 type veth peer name eth1 && "
                      f"ip addr add {unshare_ip}/24 dev eth0 && "
                      f"ip link set eth0 up && {script}")
        cmd = ["sh", "-c", script]
        if unshare_ip:
            cmd = ["unshare", "--net", "--", *cmd]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        p = sh(*cmd, check=False)
        return p.stdout if p.returncode == 0 and "hca_id" in p.stdout else ""

    def text(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)  # under strace, strace ends with it
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                for pid in {self.pid, self.proc.pid}:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.wait(timeout=10)
        self.log.close()


def own_client(status):
    """The status reply's entry of the client that asked (the `vrdma status` process)."""
    mine = [c for c in status.get("clients", []) if c.get("kind") == "cli"]
    if len(mine) != 1:
        raise AssertionError(f"not one status client in {status}")
    return mine[0]


# ---- what each key does, observed ----
# Each row: the key, the value set through the file, other keys the row needs, and a check
# (daemon, test) of the running vrdmad, or None where the effect cannot be seen from outside
# cheaply (then --print-config and config_test's equality with the command line cover it).

def check_socket(d, t):
    t.assertEqual(d.status()["daemon"]["socket"], os.path.join(TMP, "other.sock"))


def check_host_id(d, t):
    t.assertEqual(d.status()["daemon"]["host_id"], 5)


def check_socket_group(d, t):
    t.assertEqual(os.stat(d.socket).st_gid, grp.getgrnam("nogroup").gr_gid)
    t.assertEqual(os.stat(d.socket).st_mode & 0o777, 0o660)


def check_tenant(d, t):
    t.assertEqual(own_client(d.status(NETNS))["tenant"], "red")


def check_allow(d, t):
    t.assertEqual(d.status()["daemon"].get("allow"), ["red->blue"])


def check_platform_tenants(d, t):
    t.assertEqual(own_client(d.status(NETNS))["tenant"], "green")


def check_allow_host_clients(d, t):
    t.assertIn("vrdma", d.devinfo())


def check_log_level(d, t):
    d.devinfo()  # a host client without a device: its refused request is logged at debug
    deadline = time.time() + 5
    while "DEBUG" not in d.text() and time.time() < deadline:
        time.sleep(0.05)
    t.assertIn("DEBUG", d.text())


def check_netns_dir(d, t):
    # The container's namespace is not pinned in the empty directory: it is anonymous.
    t.assertEqual(d.devinfo(NETNS), "")
    t.assertRegex(d.text(), r"no device")


def check_netns_prefix(d, t):
    t.assertEqual(own_client(d.status(NETNS))["container"], "gc")


def check_trust_unnamed(d, t):
    t.assertIn("vrdma", d.devinfo(unshare_ip="10.99.8.20"))


def check_no_peer_pidfd(d, t):
    pass  # checked by the trace (see test_every_key_takes_effect)


def check_quota(resource, value):
    def check(d, t):
        status = d.status(NETNS)
        mine = [c for c in status.get("containers", []) if c.get("container") == CONTAINER]
        t.assertEqual(len(mine), 1, status)
        t.assertEqual(mine[0]["quota"][resource][1], value, mine[0])
    return check


def check_router(d, t):
    t.assertTrue(d.status()["daemon"]["router"]["enabled"])
    with socket.create_connection(("127.0.0.1", ROUTER_PORT), timeout=5):
        pass


def check_router_links(d, t):
    check_router(d, t)
    t.assertEqual(d.status()["daemon"]["router"]["bulk_links_per_host"], 3)


def check_router_threads(d, t):
    check_router(d, t)
    t.assertEqual(d.status()["daemon"]["router"]["threads"], 2)


def check_router_cpus(d, t):
    """Status names the CPUs, and each router thread runs only there (the kernel's view)."""
    check_router(d, t)
    t.assertEqual(d.status()["daemon"]["router"]["cpus"], "0")
    tasks = f"/proc/{d.pid}/task"
    lists = {}
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"{tasks}/{tid}/status") as f:
                allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)", f.read(), re.M).group(1)
        except FileNotFoundError:
            continue
        if name.startswith("vrdmad-router"):
            lists[name] = allowed
    t.assertEqual(lists, {"vrdmad-router0": "0", "vrdmad-router1": "0"})


def check_router_poll(d, t):
    check_router(d, t)
    t.assertEqual(d.status()["daemon"]["router"]["poll_us"], 250)


def check_no_direct_path(d, t):
    t.assertFalse(d.status()["daemon"]["direct"]["enabled"])


def check_direct_port(d, t):
    t.assertTrue(d.status()["daemon"]["direct"]["enabled"])
    t.assertEqual(d.status()["daemon"]["direct"]["port"], 4792)


def check_qos(d, t):
    out = subprocess.run([VRDMA, "qos", "show", "--socket", d.socket, "--json"],
                         capture_output=True, text=True, timeout=30)
    t.assertEqual(out.returncode, 0, out.stderr)
    t.assertIn("container=10.99.8.5:weight=3,rate=100M", json.loads(out.stdout)["rules"])


def check_directory(d, t):
    t.assertIn("etcd https://127.0.0.1:1", d.status()["daemon"]["directory"]["backend"])


def check_peer(d, t):
    t.assertEqual(d.status()["daemon"]["directory"]["hosts"], 2)


METRICS_PORT = 19464


def check_metrics_listen(d, t):
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as r:
            body = r.read().decode()
    except OSError as e:
        raise AssertionError(f"no metrics page: {e}")
    t.assertIn("vrdma_build_info", body)


QUOTAS = {"connections": 11, "qps": 12, "mrs": 13, "registered-bytes": 1 << 20, "fds": 15,
          "cm-listeners": 16, "cm-connections": 17, "directory-entries": 18}
ROUTER = {"router-listen": f"127.0.0.1:{ROUTER_PORT}", "router-plaintext": True}

ROWS = [
    ("socket", "@TMP@/other.sock", {}, check_socket),
    ("host-id", 5, {}, check_host_id),
    ("socket-group", "nogroup", {}, check_socket_group),
    ("tenant", ["red=10.99.8.0/24"], {}, check_tenant),
    ("platform-tenants", "@TMP@/tenants", {}, check_platform_tenants),
    ("allow", ["red->blue"], {}, check_allow),
    ("allow-host-clients", True, {}, check_allow_host_clients),
    ("log-level", "debug", {}, check_log_level),
    ("netns-dir", "@TMP@/empty", {}, check_netns_dir),
    ("netns-prefix", NETNS[:-2], {}, check_netns_prefix),
    ("trust-unnamed-netns", True, {}, check_trust_unnamed),
    ("no-peer-pidfd", True, {}, check_no_peer_pidfd),
    *[(f"max-{k}-per-container", v, {}, check_quota(k.replace("-", "_"), v))
      for k, v in QUOTAS.items()],
    ("router-listen", ROUTER["router-listen"], {"router-plaintext": True}, check_router),
    ("router-plaintext", True, {"router-listen": ROUTER["router-listen"]}, check_router),
    ("tls-ca", "@PKI@", {"router-listen": ROUTER["router-listen"]}, check_router),
    ("tls-cert", "@PKI@", {"router-listen": ROUTER["router-listen"]}, check_router),
    ("tls-key", "@PKI@", {"router-listen": ROUTER["router-listen"]}, check_router),
    ("router-links", 3, dict(ROUTER), check_router_links),
    ("router-threads", 2, dict(ROUTER), check_router_threads),
    ("router-cpus", "0", dict(ROUTER), check_router_cpus),
    ("router-poll-us", 250, dict(ROUTER), check_router_poll),
    ("no-direct-path", True, {}, check_no_direct_path),
    ("direct-port", 4792, {}, check_direct_port),
    ("pod-cidr", ["10.99.8.0/24"], dict(ROUTER), None),
    ("qos", ["container=10.99.8.5:weight=3,rate=100M"], dict(ROUTER), check_qos),
    ("directory", "etcd://127.0.0.1:1", {"@PKI@": True}, check_directory),
    ("peer", ["1=127.0.0.2:7999=10.99.9.0/24"], {}, check_peer),
    ("cm-remote-timeout", 9, {}, None),
    ("directory-lease", 9, {}, None),
    ("metrics-listen", f"127.0.0.1:{METRICS_PORT}", {}, check_metrics_listen),
    # On every address (0.0.0.0), which vrdmad refuses without this key.
    ("metrics-on-pod-network", True, {"metrics-listen": f"0.0.0.0:{METRICS_PORT}"},
     check_metrics_listen),
]

# A key that stops vrdmad from starting without another (e.g. router-listen without TLS or
# router-plaintext) shows that it is read: vrdmad refuses the file without the companion.
REFUSED_ALONE = {
    "router-listen": "give --tls-ca, --tls-cert and --tls-key",
    "tls-ca": "go together",
    "tls-cert": "go together",
    "tls-key": "go together",
}
# Refused with another key's value, unless this key is given too.
REFUSED_WITH = {
    "metrics-on-pod-network": ({"metrics-listen": f"0.0.0.0:{METRICS_PORT}"},
                               "--metrics-on-pod-network"),
}


def setUpModule():
    global TMP
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (network namespaces)")
    for name, value in (("VRDMA_DAEMON", DAEMON), ("VRDMA_BIN", VRDMA), ("VRDMA_LIBDIR", LIBDIR)):
        if not value:
            raise AssertionError(f"{name} must be set (ctest sets it)")
    TMP = tempfile.mkdtemp(prefix="vrdma-config-test-")
    os.chmod(TMP, 0o755)
    os.makedirs(os.path.join(TMP, "empty"))
    with open(os.path.join(TMP, "tenants"), "w") as f:  # as the device plugin writes it
        f.write(f"green /run/netns/{NETNS}\n")
    sh("ip", "netns", "del", NETNS, check=False)
    sh("ip", "netns", "add", NETNS)
    sh("ip", "-n", NETNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
    sh("ip", "-n", NETNS, "addr", "add", f"{NETNS_IP}/24", "dev", "eth0")
    sh("ip", "-n", NETNS, "link", "set", "eth0", "up")


def tearDownModule():
    if TMP:
        sh("ip", "netns", "del", NETNS, check=False)
        shutil.rmtree(TMP, ignore_errors=True)


class ConfigFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = make_pki(os.path.join(TMP, "pki"))

    def settings_of(self, key, value, extra):
        """The file's settings for a row: its key and companions, and a socket of the test."""
        settings = {"socket": os.path.join(TMP, "vrdmad.sock")}
        for k, v in extra.items():
            if k == "@PKI@":
                settings.update(self.pki)
            else:
                settings[k] = v
        if value == "@PKI@":
            settings.update(self.pki)
        elif isinstance(value, str):
            settings[key] = value.replace("@TMP@", TMP)
        else:
            settings[key] = value
        return settings

    def test_every_key_has_a_row(self):
        template = sh(DAEMON, "--print-config-template").stdout
        keys = set()
        for line in template.splitlines():
            if line.startswith("#") and not line.startswith("# ") and ":" in line:
                keys.add(line[1:].split(":", 1)[0])
        keys.discard("config")
        self.assertEqual(keys, {r[0] for r in ROWS},
                         "keys of vrdmad's file and rows of this test differ")

    def test_every_key_takes_effect(self):
        observed, printed_only = [], []
        for key, value, extra, check in ROWS:
            with self.subTest(key=key):
                settings = self.settings_of(key, value, extra)
                path = write_config(f"{key}.yaml", settings)
                # --print-config: the file's value, as vrdmad read it.
                shown = sh(DAEMON, "--config", path, "--print-config").stdout
                expected = settings[key]
                if isinstance(expected, list):
                    for item in expected:
                        self.assertIn(item, shown)
                else:
                    line = [l for l in shown.splitlines() if l.startswith(key + ":")]
                    self.assertEqual(len(line), 1, shown)
                    self.assertEqual(line[0].split(":", 1)[1].strip().strip('"'),
                                     yaml_value(expected).strip('"'), shown)
                if check is None:
                    printed_only.append(key)
                    continue
                # Without the key, vrdmad does something else (so the check can fail).
                trace = os.path.join(TMP, f"{key}.trace") if key == "no-peer-pidfd" else None
                d = Daemon(path, trace=trace)
                try:
                    d.wait_serving()
                    check(d, self)
                    if key == "no-peer-pidfd":
                        d.status(NETNS)
                finally:
                    d.stop()
                if trace:
                    with open(trace) as f:
                        calls = f.read()
                    self.assertIn("SO_PEERCRED", calls)
                    self.assertNotRegex(calls, PEERPIDFD)
                observed.append(key)
        print(f"\nobserved in the running vrdmad: {len(observed)} keys ({', '.join(observed)})"
              f"\n--print-config only: {', '.join(printed_only)}")

    def test_defaults_differ(self):
        """The checks fail on a vrdmad started without the keys (they can fail)."""
        path = write_config("defaults.yaml", {"socket": os.path.join(TMP, "vrdmad.sock")})
        trace = os.path.join(TMP, "defaults.trace")
        d = Daemon(path, trace=trace)
        try:
            d.wait_serving()
            for key, value, extra, check in ROWS:
                if check is None or key in ("no-peer-pidfd", "socket") or extra or \
                        value == "@PKI@":
                    continue
                with self.subTest(key=key):
                    with self.assertRaises(AssertionError):
                        check(d, self)
            d.status(NETNS)
        finally:
            d.stop()
        with open(trace) as f:
            self.assertRegex(f.read(), PEERPIDFD)

    def test_keys_refused_without_their_companions(self):
        for key, why in REFUSED_ALONE.items():
            with self.subTest(key=key):
                settings = {"socket": os.path.join(TMP, "vrdmad.sock")}
                settings[key] = (self.pki[key] if key.startswith("tls-")
                                 else ROUTER["router-listen"])
                path = write_config(f"alone-{key}.yaml", settings)
                p = sh(DAEMON, "--config", path, check=False, timeout=10)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(why, p.stderr)
        for key, (others, why) in REFUSED_WITH.items():
            with self.subTest(key=key):
                settings = {"socket": os.path.join(TMP, "vrdmad.sock"), **others}
                path = write_config(f"without-{key}.yaml", settings)
                p = sh(DAEMON, "--config", path, check=False, timeout=10)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(why, p.stderr)

    def test_bad_files_name_file_line_and_key_and_vrdmad_does_not_start(self):
        sock = os.path.join(TMP, "bad.sock")
        cases = [
            ("unknown key", f"socket: {sock}\nhost-id: 1\nlog-levl: debug\n", ":3: log-levl:",
             "unknown key"),
            ("wrong type", f"socket: {sock}\nhost-id: [1, 2]\n", ":2: host-id:", "not a list"),
            ("wrong type (map)", f"socket: {sock}\ntenant:\n  red: 10.0.0.0/8\n", ":3: tenant:",
             "not a map"),
            ("bad value", f"socket: {sock}\nlog-level: loud\n", ":2: log-level:", "loud"),
            ("bad number", f"socket: {sock}\nmax-qps-per-container: many\n",
             ":2: max-qps-per-container:", "many"),
            ("bad address", f"socket: {sock}\nrouter-listen: 10.0.0.1\n", ":2: router-listen:",
             "IPV4:PORT"),
            ("missing file", f"socket: {sock}\ntls-ca: {TMP}/nowhere.pem\n", ":2: tls-ca:", ""),
            ("YAML syntax", f"socket: {sock}\nhost-id: 1\ntenant: [red=10.0.0.0/8\n", ":", ""),
        ]
        for name, text, where, what in cases:
            with self.subTest(name):
                path = os.path.join(TMP, "bad.yaml")
                with open(path, "w") as f:
                    f.write(text)
                p = sh(DAEMON, "--config", path, check=False, timeout=10)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertTrue(p.stderr.startswith(f"vrdmad: {path}{where}"), p.stderr)
                self.assertIn(what, p.stderr)
                self.assertFalse(os.path.exists(sock), "vrdmad served with a bad file")
        # The YAML error names its line (and column).
        with open(path, "w") as f:
            f.write(f"socket: {sock}\nhost-id: 1\ntenant: [red=10.0.0.0/8\n")
        p = sh(DAEMON, "--config", path, check=False, timeout=10)
        self.assertRegex(p.stderr, rf"{path}:[34]\b")

    def test_sighup_rereads_the_file(self):
        sock = os.path.join(TMP, "vrdmad.sock")
        path = write_config("reload.yaml", {"socket": sock, "log-level": "warn"})
        d = Daemon(path)
        try:
            d.wait_serving()
            write_config("reload.yaml", {"socket": sock, "log-level": "debug", "host-id": 3})
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.time() + 10
            while "reload: log-level: warn -> debug: applied" not in d.text():
                self.assertLess(time.time(), deadline, d.text())
                time.sleep(0.05)
            self.assertIn("host-id: 0 (default) -> 3: needs a restart", d.text())
            self.assertEqual(d.status()["daemon"]["host_id"], 0)
            # vrdma reload: nothing more changed; a bad file changes nothing, vrdmad goes on.
            r = sh(VRDMA, "reload", "--socket", sock, check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("host-id: 0 (default) -> 3 (needs a restart)", r.stdout)
            with open(path, "a") as f:
                f.write("log-level: info\n")  # a key given twice
            r = sh(VRDMA, "reload", "--socket", sock, check=False)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn(f"{path}:", r.stdout + r.stderr)
            d.status()
        finally:
            d.stop()

    def test_reload_applies_allow_rules(self):
        sock = os.path.join(TMP, "vrdmad.sock")
        path = write_config("allow.yaml", {"socket": sock, "allow": ["red->blue"]})
        d = Daemon(path)
        try:
            d.wait_serving()
            self.assertEqual(d.status()["daemon"]["allow"], ["red->blue"])
            write_config("allow.yaml", {"socket": sock, "allow": ["red->blue", "blue->red"]})
            r = sh(VRDMA, "reload", "--socket", sock, check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("allow: red->blue -> [red->blue, blue->red] (applied)", r.stdout)
            self.assertEqual(d.status()["daemon"]["allow"], ["red->blue", "blue->red"])
            # A bad rule is refused with the file; the rules in force stay.
            write_config("allow.yaml", {"socket": sock, "allow": ["red->red"]})
            r = sh(VRDMA, "reload", "--socket", sock, check=False)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("allow", r.stdout + r.stderr)
            self.assertEqual(d.status()["daemon"]["allow"], ["red->blue", "blue->red"])
        finally:
            d.stop()

    def test_reload_applies_tenants_to_new_connections(self):
        sock = os.path.join(TMP, "vrdmad.sock")
        path = write_config("tenants.yaml", {"socket": sock, "tenant": ["red=10.99.8.0/24"]})
        d = Daemon(path)
        held = None
        try:
            d.wait_serving()
            # A connection from the container, admitted as red and kept open.
            held = subprocess.Popen(
                ["ip", "netns", "exec", NETNS, "python3", "-c",
                 "import socket, sys, time\n"
                 "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                 "s.connect(sys.argv[1])\n"
                 "print('connected', flush=True); time.sleep(60)", sock],
                stdout=subprocess.PIPE, text=True)
            self.assertEqual(held.stdout.readline().strip(), "connected")
            self.assertEqual(own_client(d.status(NETNS))["tenant"], "red")
            write_config("tenants.yaml", {"socket": sock, "tenant": ["blue=10.99.8.0/24"]})
            r = sh(VRDMA, "reload", "--socket", sock, check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("tenant: red=10.99.8.0/24 -> blue=10.99.8.0/24 (applied)", r.stdout)
            # New connections get the new rules; the one kept open keeps its tenant.
            self.assertEqual(own_client(d.status(NETNS))["tenant"], "blue")
            tenants = {c["tenant"] for c in d.status()["clients"]
                       if c.get("container") == CONTAINER and c.get("kind") != "cli"}
            self.assertEqual(tenants, {"red"})
        finally:
            if held:
                held.kill()
                held.wait(timeout=10)
            d.stop()


if __name__ == "__main__":
    unittest.main()
