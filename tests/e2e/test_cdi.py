"""The CDI spec (`vrdma cdi generate`, `vrdma cdi list`): valid by the rules of the CDI version
it declares, the same edits as `vrdma edits`, taken by podman as they are; and its
createContainer hook (`vrdma cdi hook`), run as a runtime runs it against a container whose
network namespace is a sandbox container's."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import NETNS_PREFIX, VRDMA, Sandbox, container_ip, vrdma

# What CDI 0.5.x (Debian 12's podman 4.3.1 vendors 0.5.2) accepts: its Go structs decoded
# strictly (unknown fields refused) and its validation rules.
SPEC_FIELDS = {"cdiVersion", "kind", "devices", "containerEdits"}
DEVICE_FIELDS = {"name", "containerEdits"}
EDITS_FIELDS = {"env", "deviceNodes", "hooks", "mounts"}
NODE_FIELDS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid",
               "gid"}
MOUNT_FIELDS = {"hostPath", "containerPath", "options", "type"}
HOOK_FIELDS = {"hookName", "path", "args", "env", "timeout"}
HOOK_NAMES = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop"}
PODMAN_VERSIONS = {"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0"}


def alnum(c):
    return c.isascii() and c.isalnum()


def check_name(kind_part, value, inner):
    assert value, f"empty {kind_part}"
    assert value[0].isascii() and (value[0].isalpha() or kind_part == "device name" and
                                   value[0].isdigit()), f"bad first character in {value!r}"
    assert alnum(value[-1]), f"{kind_part} {value!r} must end with a letter or digit"
    for c in value[1:-1]:
        assert alnum(c) or c in inner, f"bad character {c!r} in {kind_part} {value!r}"


def validate_cdi(spec):
    """Raises AssertionError where podman 4.3.1's CDI 0.5.2 would refuse the spec."""
    assert set(spec) <= SPEC_FIELDS, set(spec) - SPEC_FIELDS
    assert spec["cdiVersion"] in PODMAN_VERSIONS, spec["cdiVersion"]
    vendor, _, cls = spec["kind"].partition("/")
    check_name("vendor", vendor, "_-.")
    check_name("class", cls, "_-")
    assert isinstance(spec["devices"], list) and spec["devices"], "no devices"

    def edits(e, in_device):
        assert set(e) <= EDITS_FIELDS, set(e) - EDITS_FIELDS
        if in_device:
            assert any(e.get(k) for k in EDITS_FIELDS), "a device with empty containerEdits"
        for v in e.get("env", []):
            assert isinstance(v, str) and "=" in v and not v.startswith("="), v
        for n in e.get("deviceNodes", []):
            assert set(n) <= NODE_FIELDS and n.get("path"), n
            assert n.get("type", "c") in {"b", "c", "u", "p"}, n
            assert set(n.get("permissions", "")) <= set("rwm"), n
            if "hostPath" in n:
                assert spec["cdiVersion"] >= "0.5.0", "hostPath needs CDI 0.5.0"
        for m in e.get("mounts", []):
            assert set(m) <= MOUNT_FIELDS and m.get("hostPath") and m.get("containerPath"), m
            if "type" in m:
                assert spec["cdiVersion"] >= "0.4.0", "mount type needs CDI 0.4.0"
        for h in e.get("hooks", []):
            assert set(h) <= HOOK_FIELDS and h.get("path") and h.get("hookName") in HOOK_NAMES, h
            for v in h.get("env", []):
                assert "=" in v, v

    names = set()
    for d in spec["devices"]:
        assert set(d) <= DEVICE_FIELDS, set(d) - DEVICE_FIELDS
        check_name("device name", d["name"], "_-.:")
        assert d["name"] not in names, f"device {d['name']} twice"
        names.add(d["name"])
        edits(d["containerEdits"], True)
    if "containerEdits" in spec:
        edits(spec["containerEdits"], False)


def generate(*args):
    return json.loads(vrdma("cdi", "generate", "-o", "-", *args).stdout)


class Spec(unittest.TestCase):
    def test_spec_is_valid_cdi_for_podman_4_3(self):
        spec = generate()
        validate_cdi(spec)
        self.assertEqual(spec["cdiVersion"], "0.5.0")
        self.assertEqual(spec["kind"], "vrdma.io/hca")
        self.assertEqual([d["name"] for d in spec["devices"]], ["vrdma0"])

    def test_validator_refuses_what_podman_refuses(self):
        good = generate()
        bad = [dict(good, cdiVersion="0.6.0"), dict(good, kind="vrdma.io/h.ca"),
               dict(good, extra=1), dict(good, devices=[{"name": "x", "containerEdits": {}}])]
        for spec in bad:
            with self.subTest(spec=spec):
                with self.assertRaises(AssertionError):
                    validate_cdi(spec)

    def test_spec_holds_the_container_edits(self):
        socket = "/run/vrdma-test/vrdmad.sock"
        edits = json.loads(vrdma("edits", "--socket", socket, "--lib-dir", "/opt/v/lib").stdout)
        spec = generate("--socket", socket, "--lib-dir", "/opt/v/lib")
        ce = spec["devices"][0]["containerEdits"]
        self.assertEqual(ce["env"], [f"{v['name']}={v['value']}" for v in edits["env"]])
        self.assertEqual([(m["hostPath"], m["containerPath"], "ro" in m["options"],
                           "noexec" in m["options"]) for m in ce["mounts"]],
                         [(m["host_path"], m["container_path"], m["read_only"], m["noexec"])
                          for m in edits["mounts"]])
        st = os.stat(edits["devices"][0]["host_path"])
        self.assertEqual(ce["deviceNodes"], [{
            "path": d["container_path"], "hostPath": d["host_path"], "type": "c",
            "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
            "permissions": d["permissions"]} for d in edits["devices"]])
        hook = ce["hooks"][0]
        self.assertEqual(hook["hookName"], "createContainer")
        self.assertEqual(os.path.realpath(hook["path"]), os.path.realpath(VRDMA))
        self.assertEqual(hook["args"], ["vrdma", "cdi", "hook", "--socket", socket])
        self.assertNotIn("hooks", generate("--no-hook")["devices"][0]["containerEdits"])

    def test_older_versions_leave_out_newer_fields(self):
        for version in ("0.3.0", "0.4.0"):
            spec = generate("--cdi-version", version)
            validate_cdi(spec)
            self.assertEqual(spec["cdiVersion"], version)
        self.assertNotIn("type", generate("--cdi-version", "0.3.0")["devices"][0][
            "containerEdits"]["mounts"][0])
        p = vrdma("cdi", "generate", "-o", "-", "--cdi-version", "0.4.1", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--cdi-version 0.4.1", p.stderr)

    def test_generate_writes_the_file_and_list_reads_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cdi", "vrdma.json")
            out = vrdma("cdi", "generate", "--output", path).stdout
            self.assertIn("--device vrdma.io/hca=vrdma0", out)
            self.assertEqual(oct(os.stat(path).st_mode & 0o777), "0o644")
            with open(path) as f:
                validate_cdi(json.load(f))
            self.assertEqual(vrdma("cdi", "list", path).stdout, "vrdma.io/hca=vrdma0\n")
            self.assertEqual(vrdma("cdi", "list", os.path.dirname(path)).stdout,
                             "vrdma.io/hca=vrdma0\n")
            missing = vrdma("cdi", "list", os.path.join(d, "none.json"), check=False)
            self.assertEqual(missing.returncode, 1)
            self.assertIn("no CDI spec", missing.stderr)


@unittest.skipUnless(shutil.which("podman"), "podman is not installed")
class Podman(unittest.TestCase):
    """podman takes the spec as it is: the OCI config it writes for a container started with
    --device holds exactly the spec's edits (whether the runtime then runs it is another
    matter on some machines)."""

    def test_podman_applies_the_spec(self):
        kind = f"vrdmatest{os.getpid()}.example/hca"
        spec = generate()
        spec["kind"] = kind
        os.makedirs("/var/run/cdi", exist_ok=True)
        path = f"/var/run/cdi/vrdmatest{os.getpid()}.json"
        with open(path, "w") as f:
            json.dump(spec, f)
        cid = None
        try:
            p = subprocess.run(["podman", "create", "--device", f"{kind}=vrdma0", "--rootfs", "/",
                                "true"], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            cid = p.stdout.strip().splitlines()[-1]
            subprocess.run(["podman", "start", cid], capture_output=True, timeout=120)
            p = subprocess.run(["podman", "inspect", "--format", "{{.StaticDir}}", cid],
                               capture_output=True, text=True, timeout=60)
            with open(os.path.join(p.stdout.strip(), "config.json")) as f:
                oci = json.load(f)
        finally:
            if cid:
                subprocess.run(["podman", "rm", "-f", cid], capture_output=True, timeout=120)
            os.unlink(path)
        ce = spec["devices"][0]["containerEdits"]
        for var in ce["env"]:
            self.assertIn(var, oci["process"]["env"])
        mounts = {m["destination"]: m for m in oci["mounts"]}
        for m in ce["mounts"]:
            self.assertEqual(mounts[m["containerPath"]]["source"], m["hostPath"])
            self.assertEqual(mounts[m["containerPath"]]["options"], m["options"])
        node = ce["deviceNodes"][0]
        self.assertIn({"path": node["path"], "type": "c", "major": node["major"],
                       "minor": node["minor"]},
                      [{k: d.get(k) for k in ("path", "type", "major", "minor")}
                       for d in oci["linux"]["devices"]])
        hook = oci["hooks"]["createContainer"][0]
        self.assertEqual((hook["path"], hook["args"]), (ce["hooks"][0]["path"],
                                                        ce["hooks"][0]["args"]))


class Hook(unittest.TestCase):
    """`vrdma cdi hook` as a runtime runs it: the OCI state on stdin, the container's network
    and mount namespaces reached through its pid."""

    SB = Sandbox(hosts=1, containers=1)

    @classmethod
    def setUpClass(cls):
        cls.SB.up()
        cls.socket = cls.SB.state()["hosts"][0]["socket"]
        cls.procs = []
        cls.dirs = []

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        cls.SB.down()
        for d in cls.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def container(self, rootfs_mounts):
        """A process standing for a container of h0c0: its own mount namespace, with a sysfs of
        h0c0's network namespace and a tmpfs /dev, under <bundle>/rootfs before pivot_root
        (rootfs_mounts) or at / after it."""
        bundle = tempfile.mkdtemp(prefix="vrdma-bundle-")
        self.dirs.append(bundle)
        rootfs = os.path.join(bundle, "rootfs")
        for d in ("sys", "dev"):
            os.makedirs(os.path.join(rootfs, d))
        # Without a rootfs the /sys that `ip netns exec` mounted (of h0c0's namespace) stays.
        script = (f"mount -t sysfs sysfs {rootfs}/sys && mount -t tmpfs tmpfs {rootfs}/dev && "
                  if rootfs_mounts else "mount -t tmpfs tmpfs /dev && ")
        script += "echo ready && exec sleep 120"
        p = subprocess.Popen(["ip", "netns", "exec", NETNS_PREFIX + "h0c0", "unshare", "--mount",
                              "--propagation", "slave", "sh", "-c", script],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready", p.stderr.read() if p.poll() else "")
        pid = p.pid  # `ip netns exec` execs unshare, which execs sh, which execs sleep
        root = "rootfs" if rootfs_mounts else "/nonexistent-rootfs"
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump({"ociVersion": "1.0.2", "root": {"path": root}}, f)
        return pid, bundle, rootfs

    def run_hook(self, pid, bundle):
        state = json.dumps({"ociVersion": "1.0.2", "id": "test", "status": "creating", "pid": pid,
                            "bundle": bundle})
        return subprocess.run([VRDMA, "cdi", "hook", "--socket", self.socket], input=state,
                              capture_output=True, text=True, timeout=30)

    def read_in(self, pid, path):
        p = subprocess.run(["nsenter", "-t", str(pid), "-m", "cat", path], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.strip()

    def expected_gid(self):
        a, b, c, d = (int(x) for x in container_ip("h0c0").split("."))
        return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)

    def test_hook_before_pivot_root(self):
        pid, bundle, rootfs = self.container(rootfs_mounts=True)
        p = self.run_hook(pid, bundle)
        self.assertEqual(p.returncode, 0, p.stderr)
        port = f"{rootfs}/sys/class/infiniband/vrdma0/ports/1"
        self.assertEqual(self.read_in(pid, port + "/gids/0"), self.expected_gid())
        self.assertEqual(self.read_in(pid, port + "/gid_attrs/ndevs/0"), "eth0")
        self.assertEqual(self.read_in(pid, f"{rootfs}/sys/class/net/eth0/operstate"), "up")
        self.assertEqual(os.listdir(os.path.join(rootfs, "sys")), [])  # nothing on the host
        self.assertEqual(os.listdir(os.path.join(rootfs, "dev")), [])
        p = subprocess.run(["nsenter", "-t", str(pid), "-m", "ls", "-a", f"{rootfs}/dev"],
                           capture_output=True, text=True, timeout=10)
        self.assertNotIn(".vrdma-view", p.stdout)  # the staging directory is gone

    def test_hook_after_pivot_root(self):
        pid, bundle, _ = self.container(rootfs_mounts=False)
        p = self.run_hook(pid, bundle)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read_in(pid, "/sys/class/infiniband/vrdma0/ports/1/gids/0"),
                         self.expected_gid())
        self.assertEqual(self.read_in(pid, "/sys/class/infiniband_verbs/uverbs0/ibdev"), "vrdma0")
        self.assertFalse(os.path.exists("/sys/class/infiniband"))

    def test_hook_refuses_the_host_namespace(self):
        bundle = tempfile.mkdtemp(prefix="vrdma-bundle-")
        self.dirs.append(bundle)
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump({"root": {"path": "/"}}, f)
        p = self.run_hook(os.getpid(), bundle)
        self.assertEqual(p.returncode, 1)
        self.assertIn("refusing to change the host's mount namespace", p.stderr)
        self.assertFalse(os.path.exists("/sys/class/infiniband"))
        # Pid 0: a runtime that runs the hook inside the container (crun); run from the host,
        # no ancestor is outside its mount namespace.
        p = self.run_hook(0, bundle)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not inside a container", p.stderr)
        self.assertFalse(os.path.exists("/sys/class/infiniband"))

    def test_hook_errors(self):
        p = subprocess.run([VRDMA, "cdi", "hook"], input="not json", capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not an OCI container state", p.stderr)
        pid, bundle, _ = self.container(rootfs_mounts=True)
        p = subprocess.run([VRDMA, "cdi", "hook", "--socket", "/nonexistent/vrdmad.sock"],
                           input=json.dumps({"pid": pid, "bundle": bundle}), capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertRegex(p.stderr, r"no device view: cannot connect to /nonexistent/vrdmad\.sock")


if __name__ == "__main__":
    unittest.main()
