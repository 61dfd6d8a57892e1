"""vrdmad as its systemd unit says, on a machine whose PID 1 is not systemd.

A systemd unit file is read ([Service]: ExecStart, Environment, CapabilityBoundingSet,
NoNewPrivileges, RuntimeDirectory, Restart, RestartSec, ExecReload, SystemCallFilter,
RestrictAddressFamilies, RestrictNamespaces) and the service is run as systemd would run it, as
far as that can be done without systemd: exactly ExecStart's command and the unit's environment,
the capability bounding set and no_new_privs applied (setpriv), the runtime directory a fresh
tmpfs that outlives restarts (RuntimeDirectoryPreserve=yes), in a mount namespace of the
harness's own (so a /run/vrdma of the machine is not touched), restarted after a failure as
Restart=on-failure does, stopped with SIGTERM. What cannot be emulated (the seccomp filter, the
address families, the namespaces it may enter) is checked against the system calls the service
makes, traced with strace.
"""

import os
import re
import signal
import subprocess
import threading
import time

# Signals after which systemd counts a service's end as clean (Restart=on-failure does not
# restart): SIGHUP, SIGINT, SIGTERM, SIGPIPE.
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}


def parse_unit(path):
    """{section: {key: [values in order]}} of a unit file (continuation lines joined)."""
    sections, section = {}, None
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return sections


def syscall_groups():
    """systemd's syscall groups: {"@name": set of members (syscalls or "@groups")}."""
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    groups, current = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.split()[0], set())
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.add(line.split()[0])
    return groups


def allowed_syscalls(filter_lines):
    """The system calls a list of SystemCallFilter= lines lets through (allow lists add, "~"
    lists take away, in order, as systemd combines them)."""
    groups = syscall_groups()

    def expand(name, seen):
        if not name.startswith("@"):
            return {name}
        if name in seen:
            return set()
        seen.add(name)
        if name not in groups:
            raise ValueError(f"unknown syscall group {name}")
        out = set()
        for member in groups[name]:
            out |= expand(member, seen)
        return out

    allowed = None
    for line in filter_lines:
        deny = line.startswith("~")
        names = set()
        for item in line.lstrip("~").split():
            names |= expand(item, set())
        if deny:
            allowed = (allowed if allowed is not None else expand("@known", set())) - names
        else:
            allowed = (allowed or set()) | names
    return allowed


class ServiceHarness:
    def __init__(self, unit_path, log_path, timeout=10):
        self.unit = parse_unit(unit_path)
        self.service = self.unit["Service"]
        self.log_path = log_path
        self.timeout = timeout
        self.holder = None       # the process that keeps the harness's mount namespace
        self.popen = None        # the running service (its main process is its last exec)
        self.main_pid = None
        self.starts = 0
        self.exits = []          # (returncode) of every end of the main process, in order
        self._stopping = False
        self._lock = threading.Lock()
        self._watch = None
        self.extra_args = []
        self.bounding_set = self.capabilities()
        self.trace_path = None

    # ---- the unit ----
    def exec_start(self):
        return self.service["ExecStart"][-1].split()

    def environment(self):
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        for line in self.service.get("Environment", []):
            for item in line.split():
                k, _, v = item.strip('"').partition("=")
                env[k] = v
        return env

    def capabilities(self):
        caps = []
        for line in self.service.get("CapabilityBoundingSet", []):
            caps += line.split()
        return [c.lower().replace("cap_", "") for c in caps]

    def runtime_dir(self):
        return "/run/" + self.service["RuntimeDirectory"][-1]

    # ---- the mount namespace of the harness (its "system") ----
    def __enter__(self):
        # A process that only holds a mount namespace in which the runtime directory is a tmpfs
        # of its own; every start, and every client of the service, enters it.
        rt = self.runtime_dir()
        self.created_rt = not os.path.exists(rt)
        os.makedirs(rt, exist_ok=True)
        mode = self.service.get("RuntimeDirectoryMode", ["0755"])[-1]
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
             f"mount -t tmpfs -o mode={mode} vrdma-runtime {rt} && echo ready && exec sleep 3600"],
            stdout=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("cannot make the harness's mount namespace")
        return self

    def __exit__(self, *exc):
        self.stop()
        if self.holder and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)
        if self.created_rt:
            try:
                os.rmdir(self.runtime_dir())
            except OSError:
                pass

    def inside(self, *cmd):
        """A command line that runs `cmd` in the harness's mount namespace."""
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *cmd]

    def run(self, *cmd, timeout=30, **kw):
        return subprocess.run(self.inside(*cmd), capture_output=True, text=True, timeout=timeout,
                              **kw)

    # ---- the service ----
    def _command(self):
        caps = ",".join(["-all"] + ["+" + c for c in self.bounding_set])
        cmd = ["setpriv", "--bounding-set", caps, "--inh-caps", "-all"]
        if self.service.get("NoNewPrivileges", ["no"])[-1] in ("yes", "true", "1"):
            cmd.append("--no-new-privs")
        cmd += ["--", *self.exec_start(), *self.extra_args]
        if self.trace_path:
            cmd = ["strace", "-f", "-qq", "-o", self.trace_path, *cmd]
        return self.inside(*cmd)

    def start(self):
        with self._lock:
            self._stopping = False
            log = open(self.log_path, "a")
            self.popen = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=self.environment(),
                                          start_new_session=True)
            log.close()
            self.starts += 1
            self.main_pid = self._find_main(self.popen.pid)
        if self._watch is None:
            self._watch = threading.Thread(target=self._supervise, daemon=True)
            self._watch.start()

    def _find_main(self, root):
        """The process running ExecStart's program under `root` (after nsenter, setpriv and
        strace have exec'd or forked it)."""
        program = os.path.realpath(self.exec_start()[0])
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            for pid in self._descendants(root) + [root]:
                try:
                    if os.readlink(f"/proc/{pid}/exe") == program:
                        return pid
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"{program} did not start (log: {self.log_path})")

    @staticmethod
    def _descendants(root):
        children = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [root]
        while todo:
            for child in children.get(todo.pop(), []):
                out.append(child)
                todo.append(child)
        return out

    def _supervise(self):
        """Restart=on-failure: a main process that ends with a failure (a status other than 0, a
        signal other than the clean ones) is started again after RestartSec."""
        restart = self.service.get("Restart", ["no"])[-1]
        delay = float(self.service.get("RestartSec", ["0.1"])[-1].rstrip("s") or 0.1)
        while True:
            popen = self.popen
            if popen is None:
                return
            rc = popen.wait()
            with self._lock:
                self.exits.append(rc)
                if self._stopping or popen is not self.popen:
                    self._watch = None
                    return
            failed = rc > 0 or (rc < 0 and signal.Signals(-rc) not in CLEAN_SIGNALS)
            if restart not in ("on-failure", "always") or (restart == "on-failure" and not failed):
                with self._lock:
                    self._watch = None
                return
            time.sleep(delay)
            with self._lock:
                if self._stopping:
                    self._watch = None
                    return
            self._restart_unlocked()

    def _restart_unlocked(self):
        log = open(self.log_path, "a")
        self.popen = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, env=self.environment(),
                                      start_new_session=True)
        log.close()
        self.starts += 1
        self.main_pid = self._find_main(self.popen.pid)

    def wait_for_start(self, count, timeout=None):
        deadline = time.time() + (timeout or self.timeout)
        while time.time() < deadline:
            if self.starts >= count and self.main_pid and os.path.exists(f"/proc/{self.main_pid}"):
                return self.main_pid
            time.sleep(0.05)
        raise AssertionError(f"the service was not started {count} times (log {self.log_path})")

    def reload(self):
        """ExecReload (kill -HUP $MAINPID)."""
        cmd = self.service["ExecReload"][-1].replace("$MAINPID", str(self.main_pid)).split()
        subprocess.run(cmd, check=True, timeout=10)

    def kill(self, sig):
        os.kill(self.main_pid, sig)

    def stop(self):
        """systemctl stop: SIGTERM to the main process, SIGKILL after the timeout."""
        with self._lock:
            self._stopping = True
            popen = self.popen
        if popen is None:
            return None
        if popen.poll() is None:
            try:
                os.kill(self.main_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                popen.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=10)
        with self._lock:
            self.popen = None
        if self._watch:
            self._watch.join(timeout=self.timeout)
        return popen.returncode

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


def traced_syscalls(trace_path, program):
    """From an strace -f log: the system calls the processes made after exec'ing `program`,
    with the first argument of socket() and setns()."""
    execd, calls, socket_families, setns_types = set(), set(), set(), set()
    line_re = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]")
    with open(trace_path, errors="replace") as f:
        lines = f.readlines()
    # Children of an exec'd process are exec'd too (they share its program).
    clones = {}
    clone_re = re.compile(r"^(\d+)\s+(?:<\.\.\. )?(?:clone3?|fork|vfork)[( ].*= (\d+)$")
    for line in lines:
        m = clone_re.match(line.strip())
        if m:
            clones[int(m.group(2))] = int(m.group(1))
    for line in lines:
        m = line_re.match(line)
        if not m:
            continue
        pid, name = int(m.group(1)), m.group(2)
        if pid not in execd and clones.get(pid) in execd:
            execd.add(pid)
        if name == "execve" and f'"{program}"' in line and "= 0" in line:
            execd.add(pid)
            continue
        if pid not in execd:
            continue
        calls.add(name)
        if name == "socket":
            socket_families.add(line.split("(", 1)[1].split(",", 1)[0])
        if name == "setns":
            setns_types.add(line.split(",", 1)[1].split(")", 1)[0].strip())
    return calls, socket_families, setns_types
