"""vrdmad with the privileges its systemd unit grants, on a machine whose PID 1 is not systemd.

This is not a service manager and does not stand in for one: it starts nothing on its own
(no Restart=), and a test that uses it says that systemd did not run the service. It reads the
unit file ([Service]: ExecStart, Environment, CapabilityBoundingSet, NoNewPrivileges,
RuntimeDirectory, ExecReload, SystemCallFilter, RestrictAddressFamilies, RestrictNamespaces)
and runs exactly ExecStart's command with the unit's environment, capability bounding set and
no_new_privs (setpriv), its runtime directory a tmpfs in a mount namespace of the harness's own
(so a /run/vrdma of the machine is not touched), stopped with SIGTERM. What it cannot apply (the
seccomp filter, the address families, the namespaces it may enter) is compared with the system
calls the service makes, traced with strace.
"""

import os
import re
import signal
import subprocess
import threading
import time

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
        self._lock = threading.Lock()
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
            log = open(self.log_path, "a")
            self.popen = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=self.environment(),
                                          start_new_session=True)
            log.close()
            self.starts += 1
            self.main_pid = self._find_main(self.popen.pid)

    def run_to_end(self, timeout=None):
        """Runs the service's command once, for a start that must fail: (exit status, log)."""
        with open(self.log_path, "a") as log:
            p = subprocess.run(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, env=self.environment(),
                               timeout=timeout or self.timeout)
        return p.returncode, self.log()

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

    def reload(self):
        """ExecReload (kill -HUP $MAINPID)."""
        cmd = self.service["ExecReload"][-1].replace("$MAINPID", str(self.main_pid)).split()
        subprocess.run(cmd, check=True, timeout=10)

    def kill(self, sig):
        os.kill(self.main_pid, sig)

    def stop(self):
        """systemctl stop: SIGTERM to the main process, SIGKILL after the timeout."""
        with self._lock:
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
        # The program exec'd (its path the first argument, not one in another's argv).
        if name == "execve" and f'execve("{program}",' in line and line.rstrip().endswith("= 0"):
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
