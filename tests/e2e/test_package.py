"""The Debian package, installed and removed on this machine (root).

Builds vrdma_<version>_<arch>.deb from the build directory (cpack), installs it with dpkg -i,
checks its files (the manual pages among them: `man -w vrdma vrdmad` finds them), its
dependencies, its configuration file and CDI spec, checks the systemd unit
with systemd-analyze verify. Where systemd is PID 1 it starts the service, which serves, and
restarts after a kill. Elsewhere (containers, CI) systemd does not run it, and the test says so:
tests/e2e/service_harness.py runs vrdmad with the unit's command, capability bounding set and
no_new_privs, where it serves a container client of another user, reloads on SIGHUP, needs each
capability the unit grants and makes no system call the unit's filters refuse. Then `vrdma demo`
runs from the installed files alone (traced: nothing from the source or build tree or a source
install in /usr/local); then
`apt-get remove` leaves no file of the package but its configuration file and no process, and
`apt-get purge` leaves nothing. Whatever fails, the package is purged at the end.

Environment (set by CTest): VRDMA_BUILD_DIR, VRDMA_SOURCE_DIR; VRDMA_NETNS_PREFIX and
VRDMA_RUN_DIR as for every test bed.
"""

import grp
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import conftest_path  # noqa: F401
from service_harness import ServiceHarness, allowed_syscalls, traced_syscalls

BUILD = os.environ.get("VRDMA_BUILD_DIR", "")
SOURCE = os.environ.get("VRDMA_SOURCE_DIR", "")
PREFIX = os.environ.get("VRDMA_NETNS_PREFIX") or "vrdma-"
UNIT = "/lib/systemd/system/vrdmad.service"
CONFIG = "/etc/vrdma/vrdmad.yaml"
CDI_SPEC = "/etc/cdi/vrdma.json"
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=120"]
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
# Exists while this test has the package installed; tests/e2e/package_cleanup.py (a CTest
# cleanup fixture, run even when this test times out) purges the package when it is left.
MARKER = "/var/lib/vrdma-package-test.installed"


def sh(*cmd, timeout=120, check=True, **kw):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def package_status():
    p = sh("dpkg-query", "-W", "-f=${Status}", "vrdma", check=False)
    return p.stdout.strip() if p.returncode == 0 else ""


def processes_of(paths):
    """Running processes whose program is one of `paths`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue
        if exe.removesuffix(" (deleted)") in paths:
            found.append((int(entry), exe))
    return found


class PackageTest(unittest.TestCase):
    deb = None
    listed = []   # what dpkg -L listed while installed
    state = {}

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (installs a package)")
        if not BUILD or not os.path.exists(os.path.join(BUILD, "CPackConfig.cmake")):
            raise AssertionError("VRDMA_BUILD_DIR must name a configured build directory")
        if package_status():
            raise AssertionError("a vrdma package is already installed here; this test installs "
                                 "and purges its own (remove it first: apt-get purge vrdma)")
        cls.tmp = tempfile.mkdtemp(prefix="vrdma-package-")
        # What the package's scripts write over, kept to be put back.
        cls.saved_spec = None
        if os.path.exists(CDI_SPEC):
            with open(CDI_SPEC) as f:
                cls.saved_spec = f.read()
        cls.had_cdi_dir = os.path.isdir("/etc/cdi")
        cls.netns = PREFIX + "pkgc"

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["ip", "netns", "del", cls.netns], capture_output=True, timeout=30)
        if package_status():
            subprocess.run(["dpkg", "--purge", "vrdma"], capture_output=True, timeout=300)
        if cls.saved_spec is not None:
            os.makedirs("/etc/cdi", exist_ok=True)
            with open(CDI_SPEC, "w") as f:
                f.write(cls.saved_spec)
        elif os.path.exists(CDI_SPEC):  # the package's, left by a failed removal
            os.remove(CDI_SPEC)
        if not cls.had_cdi_dir and os.path.isdir("/etc/cdi") and not os.listdir("/etc/cdi"):
            os.rmdir("/etc/cdi")
        if os.path.exists(MARKER):
            os.remove(MARKER)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- 1. build ----
    def test_1_build_and_install(self):
        started = time.time()
        out = os.path.join(self.tmp, "out")
        sh("cpack", "-G", "DEB", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-B", out,
           timeout=600)
        arch = sh("dpkg", "--print-architecture").stdout.strip()
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        self.assertEqual(len(debs), 1, debs)
        version = sh("dpkg-deb", "-f", os.path.join(out, debs[0]), "Version").stdout.strip()
        self.assertRegex(version, r"^\d+\.\d+\.\d+")
        self.assertEqual(debs, [f"vrdma_{version}_{arch}.deb"])
        type(self).deb = os.path.join(out, debs[0])
        size = os.path.getsize(self.deb)
        contents = sh("dpkg-deb", "-c", self.deb).stdout
        print(f"\n{debs[0]}: {size} bytes, built in {time.time() - started:.0f} s\n{contents}")

        fields = {k: sh("dpkg-deb", "-f", self.deb, k).stdout.strip()
                  for k in ("Package", "Depends", "Recommends")}
        self.assertEqual(fields["Package"], "vrdma")
        depends = fields["Depends"]
        # dpkg-shlibdeps' (the C++ runtime, yaml-cpp, gRPC of the device plugin) and the demo's.
        for dep in ("libc6", "libstdc++6", "libyaml-cpp0.7", "libgrpc++1.51", "ibverbs-utils",
                    "perftest", "iproute2", "python3", "iperf3", "sockperf"):
            self.assertRegex(depends, rf"(^|, ){re.escape(dep)}\b", f"Depends: {depends}")
        control = sh("dpkg-deb", "-I", self.deb).stdout
        for script in ("postinst", "prerm", "postrm", "conffiles"):
            self.assertIn(f" {script}", control)
        self.assertEqual(sh("dpkg-deb", "--ctrl-tarfile", self.deb).returncode, 0)

        with open(MARKER, "w") as f:
            f.write(self.deb + "\n")
        p = sh("dpkg", "-i", self.deb, check=False, timeout=300, env=APT_ENV)
        if p.returncode != 0:  # missing dependencies: from Debian's archive
            sh(*APT, "install", "-f", timeout=900, env=APT_ENV)
        self.assertEqual(package_status(), "install ok installed", p.stdout + p.stderr)
        type(self).listed = sh("dpkg", "-L", "vrdma").stdout.split("\n")
        type(self).listed = [line for line in self.listed if line and line != "/."]

    # ---- 2. files ----
    def test_2_installed_files(self):
        self.require_installed()
        for path in ("/usr/bin/vrdma", "/usr/sbin/vrdmad", "/usr/lib/vrdma/libibverbs.so.1",
                     "/usr/lib/vrdma/librdmacm.so.1", "/usr/lib/vrdma/libmlx5.so.1",
                     "/usr/libexec/vrdma/vrdma-device-plugin",
                     "/usr/libexec/vrdma/vrdma-bench-conn", "/usr/libexec/vrdma/vrdma-bench-memcpy",
                     "/usr/share/vrdma/bench/demo.py",
                     "/usr/share/vrdma/python/vrdma_py/sandbox.py",
                     UNIT, CONFIG, "/usr/share/doc/vrdma/README.md",
                     "/usr/share/doc/vrdma/docs/README.md",
                     "/usr/share/doc/vrdma/docs/configuration.md"):
            self.assertIn(path, self.listed)
            self.assertTrue(os.path.exists(path), path)
        self.check_manual_pages()
        # mpirun starts the benchmark's MPI ranks with it (plm_rsh_agent): it must be executable.
        agent = "/usr/share/vrdma/python/vrdma_py/mpi_launch_agent"
        self.assertIn(agent, self.listed)
        self.assertTrue(os.access(agent, os.X_OK), agent)
        conffiles = sh("dpkg-query", "-W", "-f=${Conffiles}", "vrdma").stdout
        self.assertIn(CONFIG, conffiles)
        # The configuration file is the generated template, and vrdmad --help names it.
        template = sh("/usr/sbin/vrdmad", "--print-config-template").stdout
        with open(CONFIG) as f:
            self.assertEqual(f.read(), template)
        self.assertIn(CONFIG, sh("/usr/sbin/vrdmad", "--help").stdout)
        self.assertIn("reload", sh("/usr/bin/vrdma", "--help").stdout)
        # The helpers find the drop-in libraries of the package (RPATH $ORIGIN/../../lib/vrdma).
        ldd = sh("ldd", "/usr/libexec/vrdma/vrdma-bench-conn").stdout
        found = {line.split()[0]: os.path.realpath(line.split()[2])
                 for line in ldd.splitlines() if " => " in line}
        self.assertEqual(found.get("libibverbs.so.1"), "/usr/lib/vrdma/libibverbs.so.1", ldd)
        self.assertEqual(found.get("librdmacm.so.1"), "/usr/lib/vrdma/librdmacm.so.1", ldd)
        # postinst wrote the CDI spec for the package's files.
        with open(CDI_SPEC) as f:
            spec = f.read()
        self.assertIn('"/usr/lib/vrdma"', spec)
        self.assertIn('"/usr/bin/vrdma"', spec)

    def check_manual_pages(self):
        """man vrdma and man vrdmad: installed, found by man, and holding the programs' help."""
        pages = ["/usr/share/man/man1/vrdma.1.gz", "/usr/share/man/man8/vrdmad.8.gz"]
        excluded = sh("sh", "-c", "cat /etc/dpkg/dpkg.cfg.d/* 2>/dev/null | "
                      "grep -E '^path-exclude.*/usr/share/man' || true").stdout
        for page in pages:
            self.assertIn(page, self.listed)
            self.assertTrue(os.path.exists(page),
                            f"{page} not installed" + (f" (dpkg excludes: {excluded})"
                                                       if excluded else ""))
        # The package's pages, not a source install's (/usr/local/share/man comes first).
        env = dict(os.environ, MANPATH="/usr/share/man", MANWIDTH="100", MANPAGER="cat")
        found = sh("man", "-w", "vrdma", "vrdmad", env=env).stdout.split()
        self.assertEqual(found, pages)
        vrdma_page = sh("man", "-P", "cat", "vrdma", env=env).stdout
        for text in ("sandbox up", "status", "cdi generate", "docs/getting-started.md"):
            self.assertIn(text, vrdma_page, "man vrdma")
        vrdmad_page = sh("man", "-P", "cat", "8", "vrdmad", env=env).stdout
        for text in ("--router-listen", "--print-config-template", "docs/configuration.md"):
            self.assertIn(text, vrdmad_page, "man vrdmad")

    # ---- 3. the unit ----
    def test_3_unit_verifies(self):
        self.require_installed()
        p = sh("systemd-analyze", "verify", UNIT, check=False, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("vrdmad.service", p.stdout + p.stderr)

    def test_4_service(self):
        self.require_installed()
        if os.path.isdir("/run/systemd/system"):
            self.service_under_systemd()
        else:
            self.service_under_harness()

    def service_under_systemd(self):
        sh("systemctl", "start", "vrdmad.service", timeout=60)
        pid = int(sh("systemctl", "show", "-P", "MainPID", "vrdmad.service").stdout)
        self.assertGreater(pid, 0)
        self.wait_serving(lambda *c: sh(*c, check=False))
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 30
        while time.time() < deadline:
            now = int(sh("systemctl", "show", "-P", "MainPID", "vrdmad.service").stdout)
            if now not in (0, pid):
                break
            time.sleep(0.2)
        self.assertNotIn(now, (0, pid), "vrdmad was not restarted")
        self.wait_serving(lambda *c: sh(*c, check=False))
        sh("systemctl", "stop", "vrdmad.service", timeout=60)

    def wait_serving(self, run, socket="/run/vrdma/vrdmad.sock", timeout=10):
        deadline = time.time() + timeout
        while True:
            p = run("/usr/bin/vrdma", "status", "--socket", socket, "--json")
            if p.returncode == 0:
                return p.stdout
            if time.time() > deadline:
                raise AssertionError(f"vrdmad does not serve {socket}: {p.stderr}")
            time.sleep(0.1)

    def container_client(self, harness):
        """ibv_devinfo -v in the test's container namespace, as user nobody."""
        return harness.run(
            "ip", "netns", "exec", self.netns, "setpriv", "--reuid=65534", "--regid=65534",
            "--clear-groups", "env", "-i", "LD_LIBRARY_PATH=/usr/lib/vrdma",
            "VRDMA_SOCKET=/run/vrdma/vrdmad.sock", "VRDMA_QUIET=1", "ibv_devinfo", "-v")

    def service_under_harness(self):
        print("\nsystemd is not PID 1 here: the service is NOT started by systemd (Restart=, "
              "RuntimeDirectory= and the seccomp filter are not exercised); vrdmad runs with the "
              "unit's ExecStart, capability bounding set and NoNewPrivileges (setpriv), and its "
              "traced system calls are compared with the unit's filters")
        # A container: a network namespace with an address, entered by a client of another user.
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)
        sh("ip", "netns", "add", self.netns)
        sh("ip", "-n", self.netns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
        sh("ip", "-n", self.netns, "addr", "add", "10.99.7.10/24", "dev", "eth0")
        sh("ip", "-n", self.netns, "link", "set", "eth0", "up")
        gid = "::ffff:10.99.7.10"
        log = os.path.join(self.tmp, "vrdmad.log")
        trace = os.path.join(self.tmp, "vrdmad.strace")
        with ServiceHarness(UNIT, log) as h:
            self.assertEqual(h.exec_start(), ["/usr/sbin/vrdmad", "--config", CONFIG])
            self.assertEqual(sorted(h.capabilities()),
                             ["chown", "sys_admin", "sys_nice", "sys_ptrace"])

            # The configuration file lets the containers' user (nobody here) connect: the
            # socket's group (CAP_CHOWN).
            with open(CONFIG) as f:
                shipped = f.read()
            with open(CONFIG, "a") as f:  # kept on remove, gone on purge (checked below)
                f.write("socket-group: nogroup\n")

            # Served as the unit says, traced: a client of another user in a container, status,
            # a reload through SIGHUP (ExecReload) after the configuration file changed.
            h.trace_path = trace
            h.start()
            self.wait_serving(h.run)
            st = h.run("stat", "-c", "%g %a", "/run/vrdma/vrdmad.sock").stdout.split()
            self.assertEqual(st, [str(grp.getgrnam("nogroup").gr_gid), "660"])
            c = self.container_client(h)
            self.assertEqual(c.returncode, 0, c.stdout + c.stderr + h.log())
            self.assertIn(gid, c.stdout)
            with open(CONFIG, "a") as f:
                f.write("log-level: debug\n")
            h.reload()
            self.wait_log(h, "reload: log-level: info (default) -> debug: applied")
            r = h.run("/usr/bin/vrdma", "reload", "--socket", "/run/vrdma/vrdmad.sock")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("no change", r.stdout)
            # Only the host's administrator may reload.
            r = h.run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                      "/usr/bin/vrdma", "reload", "--socket", "/run/vrdma/vrdmad.sock")
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("Operation not permitted", r.stderr)
            self.assertEqual(h.stop(), 0)  # SIGTERM: a clean stop

            # What it did fits what the unit lets it do.
            calls, families, ns_types = traced_syscalls(trace, "/usr/sbin/vrdmad")
            self.assertIn("setns", calls)
            allowed = allowed_syscalls(h.service["SystemCallFilter"])
            refused = calls - allowed
            with open(trace) as f:
                lines = [l[:300] for l in f if any(f" {c}(" in l for c in refused)]
            self.assertEqual(refused, set(), "system calls the filter would refuse:\n" +
                             "".join(lines[:20]))
            h.trace_path = None
            unit_families = set(h.service["RestrictAddressFamilies"][-1].split())
            self.assertTrue(families <= unit_families, f"{families} not in {unit_families}")
            self.assertEqual(ns_types, {"CLONE_NEWNET"})
            self.assertEqual(h.service["RestrictNamespaces"][-1], "net")

            # Each capability is needed: without CAP_SYS_PTRACE or CAP_SYS_ADMIN the client of
            # another user in a container is not served; without CAP_SYS_NICE a router does not
            # get its priority; without CAP_CHOWN the socket cannot be given its group.
            for missing in ("sys_ptrace", "sys_admin"):
                h.bounding_set = [c for c in h.capabilities() if c != missing]
                h.start()
                self.wait_socket(h)
                c = self.container_client(h)
                self.assertNotIn(gid, c.stdout, f"served without {missing}")
                h.stop()
            h.bounding_set = [c for c in h.capabilities() if c != "chown"]
            rc, log = h.run_to_end()
            self.assertEqual(rc, 1, log)
            self.assertIn("cannot set its group and mode: Operation not permitted", log)
            router = ["--router-listen", "127.0.0.1:17471"]
            if "--router-plaintext" in sh("/usr/sbin/vrdmad", "--help").stdout:
                router.append("--router-plaintext")
            h.extra_args = router
            for caps, nice in ((h.capabilities(), -10),
                               ([c for c in h.capabilities() if c != "sys_nice"], 0)):
                h.bounding_set = caps
                h.start()
                self.wait_serving(h.run)
                with open(f"/proc/{h.main_pid}/stat") as f:
                    self.assertEqual(int(f.read().rsplit(")", 1)[1].split()[16]), nice)
                h.stop()
            with open(CONFIG, "w") as f:
                f.write(shipped + "socket-group: nogroup\nlog-level: debug\n")
        self.assertEqual(processes_of({"/usr/sbin/vrdmad"}), [])

    def wait_socket(self, h, socket="/run/vrdma/vrdmad.sock", timeout=10):
        deadline = time.time() + timeout
        while h.run("test", "-S", socket).returncode != 0:
            if time.time() > deadline:
                raise AssertionError(f"no socket {socket}:\n{h.log()}")
            time.sleep(0.05)

    def wait_log(self, h, text, timeout=10):
        deadline = time.time() + timeout
        while text not in h.log():
            if time.time() > deadline:
                raise AssertionError(f"'{text}' not in vrdmad's log:\n{h.log()}")
            time.sleep(0.1)

    # ---- 5. the demo, from the installed files alone ----
    def test_5_demo_from_the_installed_files(self):
        self.require_installed()
        # Every file the demo's processes open or run, traced: none may come from the source
        # tree, the build tree or a source install in /usr/local. (Hiding those under tmpfs in a
        # mount namespace of the test's own would be simpler, but there the sandbox's pinning of
        # its containers' mount namespaces fails now and then with EINVAL on this kernel.)
        # /usr/local: where a source install (scripts/setup.sh) puts vrdma's files.
        source_install = ("/usr/local/bin/", "/usr/local/sbin/", "/usr/local/lib/vrdma/",
                          "/usr/local/libexec/vrdma/", "/usr/local/share/vrdma/")
        avoid = tuple(sorted({*source_install,
                              *(os.path.realpath(d) + "/" for d in (SOURCE, BUILD) if d)}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("VRDMA_") and
               k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
        # The package's vrdma by its path (a source install's comes first in PATH, as after the
        # README's setup command); PATH keeps /usr/local first, so that any lookup of a program
        # by name on the demo's way that would reach a source install is seen.
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        for k in ("VRDMA_NETNS_PREFIX", "VRDMA_RUN_DIR"):
            if os.environ.get(k):
                env[k] = os.environ[k]
        trace = os.path.join(self.tmp, "demo.strace")
        p = subprocess.run(
            ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=execve,execveat,open,openat",
             "-e", "signal=none", "-o", trace, "/usr/bin/vrdma", "demo", "--seconds", "1"],
            capture_output=True, text=True, timeout=400, env=env, cwd="/")
        used, outside = set(), []
        with open(trace, errors="replace") as f:
            for line in f:
                m = re.search(r'(?:execve|execveat|open|openat)\((?:[^,"]*, )?"([^"]+)"', line)
                # Failed calls, and PATH lookups of files that do not exist (whose result strace
                # may print on a later "resumed" line), used nothing.
                if not m or re.search(r"= -1 E", line) or not os.path.exists(m.group(1)):
                    continue
                path = m.group(1)
                used.add(path)
                if os.path.realpath(path).startswith(avoid) or path.startswith(avoid):
                    outside.append(line.strip()[:200])
        self.assertIn("/usr/bin/vrdma", used)
        self.assertIn("/usr/sbin/vrdmad", used)
        self.assertIn("/usr/lib/vrdma/libibverbs.so.1", used)
        self.assertIn("/usr/share/vrdma/bench/demo.py", used)
        self.assertEqual(outside, [], f"files outside the package used by the demo ({avoid})")
        print(p.stdout[-2000:])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"ibv_devinfo in h0c0: device vrdma\d, port PORT_ACTIVE")
        self.assertRegex(p.stdout, r"throughput, 64 KiB\s+\d+ MB/s")
        self.assertEqual(processes_of({"/usr/sbin/vrdmad"}), [])

    # ---- 6. removal ----
    def test_6_remove_and_purge(self):
        self.require_installed()
        programs = {p for p in self.listed if os.path.isfile(p) and os.access(p, os.X_OK)}
        # The administrator's change to the configuration file, which remove must keep.
        with open(CONFIG) as f:
            edited = "log-level: debug" in f.read()
        if not edited:
            with open(CONFIG, "a") as f:
                f.write("log-level: debug\n")
        # A vrdmad of the package still running: removal stops it.
        sock_dir = tempfile.mkdtemp(dir=self.tmp)
        daemon = subprocess.Popen(["/usr/sbin/vrdmad", "--config", "", "--socket",
                                   os.path.join(sock_dir, "vrdmad.sock")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while not os.path.exists(os.path.join(sock_dir, "vrdmad.sock")):
                self.assertLess(time.time(), deadline, "vrdmad did not start")
                time.sleep(0.05)
            p = sh(*APT, "remove", "vrdma", timeout=300, env=APT_ENV)
            daemon.wait(timeout=10)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        self.assertEqual(package_status(), "deinstall ok config-files", p.stdout)
        left = []
        for path in self.listed:
            if path == CONFIG or path == os.path.dirname(CONFIG):
                continue
            if os.path.isdir(path):
                # Directories others' packages share stay; the package's own go.
                if sh("dpkg", "-S", path, check=False).returncode != 0 and os.listdir(path) == []:
                    left.append(path)
                elif path.startswith(("/usr/lib/vrdma", "/usr/libexec/vrdma", "/usr/share/vrdma",
                                      "/usr/share/doc/vrdma")):
                    left.append(path)
            elif os.path.lexists(path):
                left.append(path)
        self.assertEqual(left, [], "files of the package left after remove")
        self.assertTrue(os.path.exists(CONFIG), "the configuration file must stay on remove")
        with open(CONFIG) as f:
            self.assertIn("log-level: debug", f.read())  # as the administrator left it
        self.assertFalse(os.path.exists(CDI_SPEC))
        self.assertEqual(processes_of(programs), [])

        sh(*APT, "purge", "vrdma", timeout=300, env=APT_ENV)
        self.assertEqual(package_status(), "")
        for path in (CONFIG, os.path.dirname(CONFIG),
                     "/etc/systemd/system/multi-user.target.wants/vrdmad.service",
                     "/etc/systemd/system/vrdmad.service"):
            self.assertFalse(os.path.lexists(path), f"{path} left after purge")
        if not self.had_cdi_dir:
            self.assertFalse(os.path.exists("/etc/cdi"))
        self.assertEqual(processes_of(programs), [])

    def require_installed(self):
        if not package_status().startswith("install ok"):
            self.fail("the package is not installed (see test_1_build_and_install)")


if __name__ == "__main__":
    unittest.main()
