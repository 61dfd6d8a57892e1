"""Real OCI containers for the end-to-end tests: a rootful podman kept in one directory.

Everything podman stores (its configuration, container storage, networks, temporary files)
lives under one base directory; with `netns`, podman, its bridges and the firewall rules
netavark writes live in a network namespace of their own, so the host's firewall and sysctls
stay as they are. The configuration comes from deploy/podman/ (containers.conf.in,
storage.conf.in, crun-hybrid-cgroups); deploy/podman/README.md says why each setting is there.

No image registry is needed: containers run an unpacked root filesystem (`podman run
--rootfs`) built in milliseconds from the host's own files (see HostRootfs).

Outside the base directory podman uses only its standard per-container and per-network
entries, removed with the containers and networks: /run/netns/netns-* (container network
namespaces), /run/crun/<id> (runtime state) and the IPAM database in /run/containers/networks.
CDI specs are read from /etc/cdi and /var/run/cdi only (podman 4.3 has no setting for other
directories): write_cdi_spec puts them in /var/run/cdi and removes them again.

Needs root.
"""

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import time

from .sandbox import Proc

PODMAN = shutil.which("podman") or "/usr/bin/podman"

# deploy/podman in the source tree.
_HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY_DIR = os.environ.get("VRDMA_PODMAN_DEPLOY") or os.path.normpath(
    os.path.join(_HERE, "..", "..", "deploy", "podman"))

CDI_DIR = "/var/run/cdi"  # the directory for generated specs; podman 4.3 also reads /etc/cdi
CDI_VERSION = "0.5.0"  # the newest version podman 4.3 (CDI 0.5.x) accepts


def cdi_spec(name, libdir, socket, kind="vrdma.io/hca",
             container_libdir="/usr/local/lib/vrdma", container_socket_dir="/run/vrdma"):
    """A CDI spec (as a dict) with one device, `kind=name`, whose container edits give a
    container vrdma: the drop-in library directory `libdir`, mounted read-only at
    `container_libdir` and first in LD_LIBRARY_PATH, and the directory holding vrdmad's
    socket `socket` (the directory, so that a restarted vrdmad, which makes a new socket
    file, is reached), read-only at `container_socket_dir`, with VRDMA_SOCKET naming the
    socket there. Connecting to a Unix socket needs no write access to its mount, and a
    read-only mount keeps containers from replacing the socket that every container shares."""
    socket_dir, socket_name = os.path.split(os.path.abspath(socket))
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [{
            "name": name,
            "containerEdits": {
                "env": [f"LD_LIBRARY_PATH={container_libdir}",
                        f"VRDMA_SOCKET={container_socket_dir}/{socket_name}"],
                "mounts": [
                    {"hostPath": os.path.abspath(libdir), "containerPath": container_libdir,
                     "options": ["ro", "nosuid", "nodev", "bind"]},
                    {"hostPath": socket_dir, "containerPath": container_socket_dir,
                     "options": ["ro", "nosuid", "nodev", "noexec", "bind"]},
                ],
            },
        }],
    }


def cdi_device(spec):
    """The fully qualified name of a spec's first device: `--device` takes it."""
    return f"{spec['kind']}={spec['devices'][0]['name']}"


def write_cdi_spec(spec, file_name, directory=CDI_DIR):
    """Writes `spec` to directory/file_name (atomically) and returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, file_name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


class HostRootfs:
    """A root filesystem made of the host's own programs: a few directories, the merged-/usr
    symlinks (bin, lib, lib64, sbin -> usr/...), a minimal /etc (root's passwd and group
    entries, the dynamic linker's cache), and the host's /usr directories bind-mounted
    read-only when a container starts (run_args). /usr/local stays the container's own,
    empty, so that mounts such as /usr/local/lib/vrdma can be placed in it, as in an image."""

    def __init__(self, path):
        self.path = path

    def build(self):
        if os.path.exists(self.path):
            shutil.rmtree(self.path)
        for d in ("usr/local", "etc", "proc", "sys", "dev", "run", "root", "var/tmp"):
            os.makedirs(os.path.join(self.path, d))
        os.makedirs(os.path.join(self.path, "tmp"))
        os.chmod(os.path.join(self.path, "tmp"), 0o1777)
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.isdir(os.path.join("/usr", link)):
                os.symlink(f"usr/{link}", os.path.join(self.path, link))
        etc = os.path.join(self.path, "etc")
        with open(os.path.join(etc, "passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\n"
                    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        with open(os.path.join(etc, "group"), "w") as f:
            f.write("root:x:0:\nnogroup:x:65534:\n")
        # Debian keeps its libraries in /usr/lib/<triplet>: the loader finds them through the cache.
        shutil.copy2("/etc/ld.so.cache", os.path.join(etc, "ld.so.cache"))
        return self

    def run_args(self):
        """The end of a `podman run` command line, before the command, that makes this the
        container's root filesystem (`--rootfs` takes the place of the image)."""
        opts = []
        for entry in sorted(os.listdir("/usr")):
            src = os.path.join("/usr", entry)
            if entry == "local" or os.path.islink(src) or not os.path.isdir(src):
                continue
            opts += ["-v", f"{src}:{src}:ro"]
        # Read-only: containers share this directory, so none may change it (podman puts
        # tmpfs on /run, /tmp and /var/tmp).
        return [*opts, "--read-only", "--rootfs", self.path]


class ContainerProc(Proc):
    """A `podman run` started in the background; killing it removes its container."""

    def __init__(self, popen, name, host, container):
        super().__init__(popen, name)
        self.host = host
        self.container = container

    def kill(self, sig=signal.SIGKILL):
        if self.popen.poll() is None:
            self.host.podman("rm", "--force", "--time", "0", self.container, check=False,
                             timeout=60)
        super().kill(sig)


class PodmanHost:
    """A rootful podman whose state is all under `base` (see the module's description),
    running in network namespace `netns` (created and deleted here) when one is given."""

    def __init__(self, base, netns=None):
        self.base = os.path.abspath(base)
        self.netns = netns
        self.networks = []
        self.procs = []
        self._registered = False

    # ---- configuration ----
    @property
    def containers_conf(self):
        return os.path.join(self.base, "containers.conf")

    @property
    def storage_conf(self):
        return os.path.join(self.base, "storage.conf")

    def env(self):
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = self.containers_conf
        env["CONTAINERS_STORAGE_CONF"] = self.storage_conf
        return env

    def cmd(self, *args):
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        return [*prefix, PODMAN, *args]

    def _write_config(self):
        runtime = os.path.join(DEPLOY_DIR, "crun-hybrid-cgroups")
        if not os.access(runtime, os.X_OK):
            raise RuntimeError(f"{runtime} is missing or not executable")
        for name in ("containers.conf", "storage.conf"):
            with open(os.path.join(DEPLOY_DIR, name + ".in")) as f:
                text = f.read()
            text = text.replace("@BASE@", self.base).replace("@RUNTIME@", runtime)
            with open(os.path.join(self.base, name), "w") as f:
                f.write(text)

    # ---- life cycle ----
    def up(self):
        if not os.access(PODMAN, os.X_OK):
            raise RuntimeError("podman is not installed (scripts/setup.sh --deps installs it)")
        self.down()
        os.makedirs(self.base)
        for d in ("tmp", "volumes", "networks", "storage", "run"):
            os.makedirs(os.path.join(self.base, d))
        self._write_config()
        if self.netns:
            subprocess.run(["ip", "netns", "add", self.netns], check=True, timeout=30)
            subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True,
                           timeout=30)
        if not self._registered:
            atexit.register(self.down)
            self._registered = True
        return self

    def down(self):
        """Removes every container and network of this podman, its network namespace and
        its directory. Safe to call more than once, and on what a failed run left behind."""
        for p in self.procs:
            p.kill()
            try:
                p.popen.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        if os.path.exists(self.containers_conf):
            if self.netns and not os.path.exists(f"/run/netns/{self.netns}"):
                # Network teardown happens where podman runs: never in the host's namespace.
                subprocess.run(["ip", "netns", "add", self.netns], timeout=30)
            self.podman("rm", "--all", "--force", "--time", "0", check=False, timeout=120)
            p = self.podman("network", "ls", "--format", "{{.Name}}", check=False)
            for name in p.stdout.split():
                if name != "podman":
                    self.podman("network", "rm", "--force", name, check=False)
        self.networks = []
        if self.netns and os.path.exists(f"/run/netns/{self.netns}"):
            subprocess.run(["ip", "netns", "delete", self.netns], timeout=30)
        if os.path.exists(self.base):
            self._unmount_below(self.base)
            # --one-file-system: never follow a mount that might still be there into the host.
            subprocess.run(["rm", "-rf", "--one-file-system", self.base], timeout=120)

    @staticmethod
    def _unmount_below(path):
        prefix = path.rstrip("/") + "/"
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], timeout=30)

    # ---- commands ----
    def podman(self, *args, timeout=60, check=True):
        p = subprocess.run(self.cmd(*args), env=self.env(), capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def network_create(self, name, subnet):
        """A bridge network with its own subnet (no DNS server: programs use addresses)."""
        self.podman("network", "create", "--disable-dns", "--subnet", subnet, name)
        self.networks.append(name)
        return name

    def run_args(self, command, rootfs, name=None, network=None, ip=None, options=()):
        args = ["run", "--rm"]
        if name:
            args += ["--name", name]
        if network:
            args += ["--network", f"{network}:ip={ip}" if ip else network]
        return [*args, *options, *rootfs.run_args(), *command]

    def start(self, command, rootfs, name, **kw):
        """Starts `podman run` of `command` in a new container called `name`."""
        popen = subprocess.Popen(self.cmd(*self.run_args(command, rootfs, name=name, **kw)),
                                 env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        p = ContainerProc(popen, f"{name}: {' '.join(command)}", self, name)
        self.procs.append(p)
        return p

    def run(self, command, rootfs, name, timeout=60, **kw):
        """Runs `command` in a new container and returns (rc, stdout, stderr)."""
        p = self.start(command, rootfs, name, **kw)
        rc = p.wait(timeout)
        self.procs.remove(p)
        return rc, p.out, p.err

    def exec(self, container, *command, timeout=30):
        p = self.podman("exec", container, *command, timeout=timeout, check=False)
        return p.returncode, p.stdout, p.stderr

    def wait_listening(self, container, port, timeout=20, proc=None):
        """Waits until a TCP port listens inside a running container (False at once if
        `proc`, the container's `podman run`, has ended)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc is not None and proc.popen.poll() is not None:
                return False
            rc, out, _ = self.exec(container, "ss", "-lnt", timeout=10)
            if rc == 0 and re.search(rf":{port}\b", out):
                return True
            time.sleep(0.1)
        return False


def _drop_in_libdir():
    libdir = os.environ.get("VRDMA_LIBDIR") or "/usr/local/lib/vrdma"
    if not os.path.exists(os.path.join(libdir, "libibverbs.so.1")):
        raise RuntimeError(f"no drop-in libibverbs.so.1 in {libdir} (set $VRDMA_LIBDIR)")
    return os.path.abspath(libdir)


class PodmanBed:
    """Two or more podman containers served by a vrdmad: the test bed of the podman tests.

    Under $VRDMA_RUN_DIR/podman: the podman of PodmanHost (in network namespace
    <prefix>podman), the root filesystem, and vrdmad's directory (vrdmad/vrdmad.sock, log in
    vrdmad/vrdmad.log). vrdmad runs in the host's own network namespace, as on a machine that
    runs podman; it identifies each container by its network namespace. A CDI spec in
    /var/run/cdi describes the device <kind>=<prefix>hca (see cdi_spec); `network` is a podman
    bridge network on `subnet`. The bed's containers are one tenant, `tenant` (vrdmad would
    make each container a tenant of its own); tenant=None declares none."""

    def __init__(self, subnet="10.78.0.0/24", run_dir=None, prefix=None, vrdmad_args=(),
                 tenant="podman"):
        from . import sandbox
        run_dir = run_dir or sandbox.RUN_DIR
        prefix = prefix or sandbox.NETNS_PREFIX
        self.dir = os.path.join(run_dir, "podman")
        self.host = PodmanHost(os.path.join(self.dir, "engine"), netns=f"{prefix}podman")
        self.rootfs = HostRootfs(os.path.join(self.dir, "rootfs"))
        self.socket = os.path.join(self.dir, "vrdmad", "vrdmad.sock")
        self.log = os.path.join(self.dir, "vrdmad", "vrdmad.log")
        self.pid_file = os.path.join(self.dir, "vrdmad", "vrdmad.pid")
        self.vrdmad_bin = sandbox.VRDMAD
        self.tenant = tenant
        self.vrdmad_args = ([f"--tenant={tenant}={subnet}"] if tenant else []) + list(vrdmad_args)
        self.vrdmad = None
        self.subnet = subnet
        self.network = f"{prefix}podman"
        self.device_name = re.sub(r"[^A-Za-z0-9_.:-]", "-", f"{prefix}hca").lstrip("-_.:")
        self.spec_file = f"vrdma-e2e-{self.device_name}.json"
        self.spec = None
        self.device = None
        self._registered = False

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    def ip(self, n):
        """Address number n of the bed's subnet (n = 10 gives 10.78.0.10 by default)."""
        base = self.subnet.split("/")[0].rsplit(".", 1)[0]
        return f"{base}.{n}"

    def up(self):
        self.down()
        if not self._registered:
            atexit.register(self.down)
            self._registered = True
        os.makedirs(os.path.dirname(self.socket))
        self.host.up()
        self.rootfs.build()
        self.start_vrdmad()
        self.spec = cdi_spec(self.device_name, _drop_in_libdir(), self.socket)
        self.device = cdi_device(self.spec)
        write_cdi_spec(self.spec, self.spec_file)
        self.host.network_create(self.network, self.subnet)
        return self

    def down(self):
        self.host.down()
        try:
            os.unlink(os.path.join(CDI_DIR, self.spec_file))
        except FileNotFoundError:
            pass
        self.stop_vrdmad()
        if os.path.exists(self.dir):
            subprocess.run(["rm", "-rf", "--one-file-system", self.dir], timeout=120)

    # ---- vrdmad ----
    def start_vrdmad(self, timeout=10):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        log = open(self.log, "a")
        self.vrdmad = subprocess.Popen(
            [self.vrdmad_bin, "--socket", self.socket, *self.vrdmad_args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        with open(self.pid_file, "w") as f:
            f.write(f"{self.vrdmad.pid}\n")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.vrdmad.poll() is not None:
                raise RuntimeError(
                    f"vrdmad exited ({self.vrdmad.returncode}):\n{self.daemon_log()}")
            if os.path.exists(self.socket):
                return
            time.sleep(0.02)
        self.stop_vrdmad()
        raise RuntimeError(f"vrdmad did not create {self.socket} within {timeout}s")

    def stop_vrdmad(self):
        if self.vrdmad and self.vrdmad.poll() is None:
            self.vrdmad.terminate()
            try:
                self.vrdmad.wait(10)
            except subprocess.TimeoutExpired:
                self.vrdmad.kill()
                self.vrdmad.wait(10)
        self.vrdmad = None
        self._stop_stale_vrdmad()

    def _stop_stale_vrdmad(self):
        """Stops the vrdmad a killed run of this bed left behind: the pid in its pid file, if
        that process still is a vrdmad serving this bed's socket."""
        try:
            with open(self.pid_file) as f:
                pid = int(f.read().strip())
            os.unlink(self.pid_file)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return
        if self.socket.encode() not in argv or not argv[0].endswith(b"vrdmad"):
            return
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
            time.sleep(0.05)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)

    def daemon_log(self):
        try:
            with open(self.log) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # ---- containers ----
    def start(self, name, command, ip, device=True, options=()):
        """Starts `command` in container `name` at address `ip` of the bed's network, with
        the vrdma device (and nothing else) when `device`."""
        opts = (["--device", self.device] if device else []) + list(options)
        return self.host.start(command, self.rootfs, name, network=self.network, ip=ip,
                               options=opts)

    def run(self, name, command, ip, device=True, options=(), timeout=60):
        p = self.start(name, command, ip, device, options)
        rc = p.wait(timeout)
        self.host.procs.remove(p)
        return rc, p.out, p.err
