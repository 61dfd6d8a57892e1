"""Processes for the evaluation suite (vrdma bench): programs started in sandbox
containers with their output in files, waited for with a deadline, and their CPU
time taken from wait4(); CPU and memory of running processes (vrdmad) read from
/proc. Every wait is bounded; every process started here is killed by
Runner.kill_all()."""

import os
import re
import signal
import subprocess
import tempfile
import time

from .sandbox import VRDMA

CLK_TCK = os.sysconf("SC_CLK_TCK")
NETNS_DIR = "/run/netns"


class JobTimeout(RuntimeError):
    pass


class Job:
    """One program in a container (through `vrdma sandbox exec`, which execs it, so
    the pid is the program's)."""

    def __init__(self, argv, name, env=None):
        argv = [str(a) for a in argv]
        self.name = name
        self._out = tempfile.TemporaryFile(mode="w+", prefix="vrdma-bench-")
        self._err = tempfile.TemporaryFile(mode="w+", prefix="vrdma-bench-")
        self.popen = subprocess.Popen(argv, stdout=self._out, stderr=self._err,
                                      stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.pid = self.popen.pid
        self.started = time.monotonic()
        self.ended = None
        self.rc = None
        self.rusage = None

    def poll(self):
        if self.rc is None:
            try:
                pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, ru = self.pid, 0, None
            if pid:
                self.rc = os.waitstatus_to_exitcode(status)
                self.rusage = ru
                self.ended = time.monotonic()
                self.popen.returncode = self.rc  # reaped here, not by Popen
        return self.rc

    def wait(self, timeout):
        """Exit status; kills the program and raises JobTimeout after `timeout` s."""
        end = time.monotonic() + timeout
        delay = 0.002
        while self.poll() is None:
            if time.monotonic() > end:
                self.kill()
                self.wait_dead()
                raise JobTimeout(f"{self.name} did not finish within {timeout:.0f} s"
                                 + _tail(self.stdout() + "\n" + self.stderr()))
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return self.rc

    def wait_output(self, pattern, timeout):
        """Waits (polling every 2 ms) until a line of stdout matches `pattern`; returns
        the match, or None if the program ended or `timeout` passed first."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        pos, tail = 0, ""
        while True:
            self._out.flush()
            self._out.seek(pos)
            chunk = self._out.read()
            pos = self._out.tell()
            if chunk:
                text = tail + chunk
                for line in text.splitlines():
                    m = rx.search(line)
                    if m:
                        return m
                tail = text[text.rfind("\n") + 1:]
            if self.poll() is not None and not chunk:
                return None
            if time.monotonic() > end:
                return None
            time.sleep(0.002)

    def wait_dead(self, timeout=5):
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.01)

    def kill(self, sig=signal.SIGKILL):
        if self.poll() is None:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        """SIGTERM, then SIGKILL if it is still there after a second."""
        self.kill(signal.SIGTERM)
        self.wait_dead(1)
        if self.poll() is None:
            self.kill()
            self.wait_dead()

    def _read(self, f):
        f.flush()
        f.seek(0)
        return f.read()

    def stdout(self):
        return self._read(self._out)

    def stderr(self):
        return self._read(self._err)

    def cpu_seconds(self):
        """User + system CPU of the finished program (from wait4)."""
        if self.rusage is None:
            return None
        return self.rusage.ru_utime + self.rusage.ru_stime

    def live_cpu_seconds(self):
        return proc_cpu_seconds(self.pid)

    def close(self):
        self._out.close()
        self._err.close()


def _tail(text, lines=12):
    text = text.strip()
    if not text:
        return ""
    return "\n--- last lines of its output:\n" + "\n".join(text.splitlines()[-lines:])


_TELLING = re.compile(r"(?i)failed status|error|couldn't|unable|refused|timed out|no route")


def _gist(text):
    """What a program said about its failure: its lines that name an error (at most
    two), else its last line that says anything (not a rule or blank)."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln and set(ln) - set("-*= ")]
    telling = [ln for ln in lines if _TELLING.search(ln)]
    if telling:
        return "; ".join(telling[:2])[:240]
    return lines[-1][:240] if lines else ""


def failure(job, what=None):
    """An exception describing a program that failed: the first line says why (the
    program's last words), the rest is the tail of its output."""
    text = job.stdout() + "\n" + job.stderr()
    gist = _gist(job.stderr()) or _gist(job.stdout())
    return RuntimeError(f"{what or job.name} failed (exit {job.rc})"
                        + (f": {gist}" if gist else "") + _tail(text))


class Runner:
    """Starts programs in the sandbox's containers and keeps track of them."""

    def __init__(self, state):
        self.state = state  # `vrdma sandbox list --json`
        self.jobs = []
        self.netns = {c["name"]: c["netns"] for c in state["containers"]}
        self.netns.update({h["name"]: h["netns"] for h in state["hosts"]})
        self.ips = {c["name"]: c["ip"] for c in state["containers"]}

    def start(self, container, argv, lib=True, env=None):
        args = [VRDMA, "sandbox", "exec"]
        if not lib:
            args.append("--no-lib")
        args += [container, "--", *[str(a) for a in argv]]
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        job = Job(args, f"{container}: {' '.join(str(a) for a in argv)}", env=full_env)
        job.container = container
        self.jobs.append(job)
        return job

    def forget(self, *jobs):
        """Stops the jobs if they still run; their output stays readable (the files
        close when the Job objects go)."""
        for j in jobs:
            if j.poll() is None:
                j.stop()
            if j in self.jobs:
                self.jobs.remove(j)

    def kill_all(self):
        for j in self.jobs:
            j.kill()
        for j in self.jobs:
            j.wait_dead(2)
            j.close()
        self.jobs = []

    def in_netns(self, job):
        """True once the job's process runs in its container's namespace."""
        try:
            want = os.stat(os.path.join(NETNS_DIR, self.netns[job.container])).st_ino
            return os.stat(f"/proc/{job.pid}/ns/net").st_ino == want
        except (FileNotFoundError, ProcessLookupError, KeyError):
            return False

    def wait_listening(self, job, port, proto="tcp", timeout=15):
        """Waits until the job's container has a socket listening on `port`
        (read from /proc/<pid>/net/<proto>, no process started)."""
        end = time.monotonic() + timeout
        hexport = f":{port:04X} "
        while time.monotonic() < end:
            if job.poll() is not None:
                raise failure(job, f"{job.name} exited before listening on {port}")
            if self.in_netns(job):
                for table in (proto, proto + "6"):
                    try:
                        with open(f"/proc/{job.pid}/net/{table}") as f:
                            lines = f.read().splitlines()[1:]
                    except (FileNotFoundError, ProcessLookupError):
                        continue
                    for line in lines:
                        fields = line.split()
                        # local_address is field 1; st 0A = LISTEN (tcp), 07 = UDP socket.
                        if len(fields) > 3 and (fields[1] + " ").endswith(hexport) and \
                                fields[3] in ("0A", "07"):
                            return
            time.sleep(0.01)
        job.kill()
        job.wait_dead()
        raise JobTimeout(f"{job.name} did not listen on port {port} within {timeout} s"
                         + _tail(job.stdout() + job.stderr()))

    def wait_output(self, job, pattern, timeout=15):
        """Waits until the job's stdout matches `pattern`; returns the match."""
        end = time.monotonic() + timeout
        rx = re.compile(pattern, re.M)
        while time.monotonic() < end:
            m = rx.search(job.stdout())
            if m:
                return m
            if job.poll() is not None:
                raise failure(job, f"{job.name} exited early")
            time.sleep(0.01)
        job.kill()
        job.wait_dead()
        raise JobTimeout(f"{job.name}: no '{pattern}' within {timeout} s"
                         + _tail(job.stdout() + job.stderr()))


# ---- /proc --------------------------------------------------------------------------

def _stat_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_cpu_seconds(pid):
    """CPU time of a live process (all its threads), or None: the nanosecond run times
    of its threads (/proc/<pid>/task/*/schedstat), unless /proc/<pid>/stat, which also
    counts threads that have exited but only in clock ticks, says clearly more."""
    try:
        ticks = _stat_cpu_seconds(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None
    precise = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                precise += int(f.read().split()[0]) / 1e9
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return ticks
    return ticks if ticks - precise > 2.0 / CLK_TCK else precise


def thread_stats(pid, prefix=""):
    """The threads of a live process whose names start with `prefix`, by name: the fields of
    each one's /proc/<pid>/task/<tid>/stat after its name (field N of proc(5) is [N - 3]:
    utime [11], stime [12], nice [16], policy [38]). Threads gone meanwhile are left out."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            if not name.startswith(prefix):
                continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                out[name] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
    return out


def proc_status(pid):
    """Selected /proc/<pid>/status fields in KiB (VmRSS, RssAnon, RssFile, RssShmem) and Threads."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[k] = int(v.split()[0])
                elif k == "Threads":
                    out[k] = int(v)
    except (FileNotFoundError, ProcessLookupError):
        return None
    return out


def proc_smaps_rollup(pid):
    """Pss and its parts in KiB from /proc/<pid>/smaps_rollup."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                m = re.match(r"^(\w+):\s+(\d+) kB", line)
                if m and m.group(1) in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem",
                                        "Shared_Clean", "Shared_Dirty", "Private_Clean",
                                        "Private_Dirty"):
                    out[m.group(1)] = int(m.group(2))
    except (FileNotFoundError, ProcessLookupError):
        return None
    return out


def proc_memfd_kib(pid):
    """Shared memory a process holds in memfds (open or mapped): KiB allocated (not
    the files' sizes: arenas are sparse) and how many memfds, each counted once."""
    seen = {}
    for d in (f"/proc/{pid}/fd", f"/proc/{pid}/map_files"):
        try:
            names = os.listdir(d)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for name in names:
            p = os.path.join(d, name)
            try:
                if not os.readlink(p).startswith("/memfd:"):
                    continue
                st = os.stat(p)
            except OSError:
                continue
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return {"memfd_kib": sum(seen.values()) / 1024, "memfds": len(seen)}


def proc_fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def daemons_cpu(pids):
    """Summed CPU seconds of the given vrdmad pids."""
    total = 0.0
    for pid in pids:
        v = proc_cpu_seconds(pid)
        if v is None:
            raise RuntimeError(f"vrdmad (pid {pid}) is gone")
        total += v
    return total
