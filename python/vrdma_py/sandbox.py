"""Test bed for the end-to-end tests: a vrdma sandbox of network namespaces,
programs run inside its containers with bounded time, and cleanup that runs
even when a test fails.

Needs root (network namespaces). The vrdma binary and the drop-in library
directory come from $VRDMA_BIN and $VRDMA_LIBDIR (set by CTest), else from PATH
and the installed location.
"""

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import time

VRDMA = os.environ.get("VRDMA_BIN") or shutil.which("vrdma") or "vrdma"


def _find_daemon():
    if os.environ.get("VRDMA_DAEMON"):
        return os.environ["VRDMA_DAEMON"]
    here = os.path.dirname(os.path.realpath(shutil.which(VRDMA) or VRDMA))
    # Next to vrdma, the install layout (bin/ and sbin/), the build tree.
    for cand in (os.path.join(here, "vrdmad"), os.path.join(here, "..", "sbin", "vrdmad"),
                 os.path.join(here, "..", "daemon", "vrdmad")):
        if os.access(cand, os.X_OK):
            return os.path.realpath(cand)
    return shutil.which("vrdmad") or "vrdmad"


VRDMAD = _find_daemon()

# Where the sandbox keeps its state and what its namespaces are called ($VRDMA_RUN_DIR,
# $VRDMA_NETNS_PREFIX, as for the vrdma command): two test beds with different values run
# side by side.
RUN_DIR = (os.environ.get("VRDMA_RUN_DIR") or "/run/vrdma").rstrip("/") or "/"
NETNS_PREFIX = os.environ.get("VRDMA_NETNS_PREFIX") or "vrdma-"


def host_file(host, name):
    """A file of a host's vrdmad in the run directory: host_file("h0", "vrdmad.pid")."""
    return os.path.join(RUN_DIR, host, name)


def vrdma(*args, timeout=60, check=True):
    """Runs the vrdma CLI and returns its CompletedProcess."""
    p = subprocess.run([VRDMA, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"vrdma {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def container_ip(name):
    """The address of a container of the sandbox that is up, from its state file (the address
    plan lives in the vrdma command alone)."""
    try:
        with open(os.path.join(RUN_DIR, "sandbox.json")) as f:
            state = json.load(f)
    except OSError as e:
        raise RuntimeError(f"no sandbox is up ({e})") from e
    for c in state.get("containers", []):
        if c["name"] == name:
            return c["ip"]
    raise KeyError(f"the sandbox has no container {name}")


class Proc:
    """A program started in a container, killed on cleanup if still running."""

    def __init__(self, popen, name):
        self.popen = popen
        self.name = name
        self.out = ""
        self.err = ""

    def wait(self, timeout):
        try:
            self.out, self.err = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.out, self.err = self.popen.communicate()
            raise AssertionError(f"{self.name} did not finish within {timeout}s:\n{self.out}\n{self.err}")
        return self.popen.returncode

    def kill(self, sig=signal.SIGKILL):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    @property
    def pid(self):
        return self.popen.pid


# A sandbox whose connections between hosts all go through the routers (vrdmad
# --no-direct-path, as an operator who wants TLS between hosts or vrdmad's QoS sets): for the
# tests of the routed path itself.
ROUTED = ("--daemon-arg=--no-direct-path",)


class Sandbox:
    def __init__(self, hosts=1, containers=2, extra_args=(), directory=None):
        self.hosts = hosts
        self.containers = containers
        self.extra_args = list(extra_args)  # more `vrdma sandbox up` options, e.g. --tenant
        if directory:  # "etcd" (the default with several hosts) or "embedded"
            self.extra_args += ["--directory", directory]
        self.procs = []

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        vrdma("sandbox", "down", check=False)
        vrdma("sandbox", "up", "--hosts", str(self.hosts), "--containers", str(self.containers),
              *self.extra_args)
        atexit.register(self.down)

    def down(self):
        for p in self.procs:
            p.kill()
            try:
                p.popen.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        vrdma("sandbox", "down", check=False)

    def start(self, container, *cmd, lib=True, env=None):
        args = [VRDMA, "sandbox", "exec"]
        if not lib:
            args.append("--no-lib")
        args += [container, "--", *cmd]
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True, env=full_env)
        p = Proc(popen, f"{container}: {' '.join(cmd)}")
        self.procs.append(p)
        return p

    def run(self, container, *cmd, timeout=60, lib=True, env=None):
        p = self.start(container, *cmd, lib=lib, env=env)
        rc = p.wait(timeout)
        return rc, p.out, p.err

    def wait_listening(self, container, port, proto="t", timeout=10):
        """Waits until something listens on `port` inside the container."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rc, out, _ = self.run(container, "ss", f"-ln{proto}", lib=False, timeout=10)
            if re.search(rf":{port}\b", out):
                return True
            time.sleep(0.05)
        return False

    def pair(self, server_cmd, client_cmd, server="h0c0", client="h0c1", timeout=120,
             port=18515, lib=True):
        """Starts a server, waits for its port, then runs its client; returns
        both (rc, out, err)."""
        s = self.start(server, *server_cmd, lib=lib)
        if port and not self.wait_listening(server, port):
            s.kill()
            s.wait(5)
            raise AssertionError(f"server never listened on {port}:\n{s.out}\n{s.err}")
        c = None
        try:
            c = self.start(client, *client_cmd, lib=lib)
            crc = c.wait(timeout)
            src = s.wait(timeout)
        finally:
            s.kill()
            if c:
                c.kill()
        return (src, s.out, s.err), (crc, c.out, c.err)

    def status(self, host="h0"):
        return json.loads(vrdma("status", "--host", host, "--json").stdout)

    def qps(self, host="h0"):
        """Every QP of the host's clients, as `vrdma status` lists them (with their client's
        container): path, state, counters."""
        out = []
        for c in self.status(host).get("clients", []):
            for q in c.get("qps", []):
                out.append(dict(q, container=c.get("container")))
        return out

    def sent_bytes(self, host="h0"):
        """Bytes the host's QPs sent (their counters), whatever path they take."""
        return sum(q.get("tx_bytes", 0) for q in self.qps(host))

    def state(self):
        """The sandbox's state file (`vrdma sandbox list --json`)."""
        return json.loads(vrdma("sandbox", "list", "--json").stdout)

    def daemon_pid(self, host="h0"):
        with open(host_file(host, "vrdmad.pid")) as f:
            return int(f.read().strip())

    def daemon_args(self, host="h0"):
        """The options a host's running vrdmad was started with (its tenant rules among them),
        to start another one as the sandbox did."""
        with open(f"/proc/{self.daemon_pid(host)}/cmdline", "rb") as f:
            # Each argument ends with a NUL; empty ones count (`--config ""`: no file).
            return [a.decode() for a in f.read().split(b"\0")[1:-1]]

    def underlay(self):
        """The namespace linking the hosts of a multi-host sandbox."""
        return self.state()["underlay"]

    # The etcd of a multi-host sandbox (the daemons' cluster directory), in the underlay.
    def etcd_stop(self):
        """Stops etcd (SIGTERM) and returns once it has exited; its data is kept."""
        vrdma("sandbox", "etcd", "stop")

    def etcd_start(self):
        """Starts etcd again on the same data and returns once it answers."""
        vrdma("sandbox", "etcd", "start")

    def etcd_running(self):
        for line in vrdma("sandbox", "list").stdout.splitlines():
            if line.startswith("directory: etcd"):
                return ", running (pid" in line
        return False

    def etcd_get(self, prefix="/vrdma/", timeout=15):
        """The directory's keys under `prefix` and their values (JSON decoded where possible),
        read as etcd's root user (the sandbox's root certificate; `vrdma sandbox etcd get`)."""
        p = vrdma("sandbox", "etcd", "get", prefix, timeout=timeout, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"reading etcd failed:\n{p.stdout}{p.stderr}")
        out = {}
        for key, value in json.loads(p.stdout).items():
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = value
        return out
