"""Tenants from the platform: a container's tenant is its pod's Kubernetes namespace, as the
container runtime reports it over its CRI socket. A stand-in runtime written here from the
project's CRI proto (src/k8s/cri_runtime_v1.proto) reports the sandbox containers' network
namespaces as pod sandboxes of Kubernetes namespaces; `vrdma device-plugin --tenants-from-cri
--tenants-only` keeps the tenant file that the sandbox's vrdmad reads (--platform-tenants).
Containers of one namespace connect (data checked); of different namespaces, or unknown to the
platform, they cannot; a changed mapping holds for new connections; a tenant file that others
could write is ignored; what a container's environment says plays no part."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from concurrent import futures

import conftest_path  # noqa: F401
from vrdma_py import grpc_stubs
from vrdma_py.sandbox import NETNS_PREFIX, VRDMA, Sandbox, container_ip, host_file

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.environ.get("VRDMA_CRI_PROTO") or os.path.join(HERE, "..", "..", "src", "k8s",
                                                          "cri_runtime_v1.proto")
WORK = tempfile.mkdtemp(prefix="vrdma-pt-")  # root's, mode 0700: a directory vrdmad trusts
TENANT_FILE = os.path.join(WORK, "platform", "tenants")

SB = Sandbox(hosts=1, containers=4,
             extra_args=["--daemon-arg=--platform-tenants", f"--daemon-arg={TENANT_FILE}"])


def netns_path(container):
    return f"/run/netns/{NETNS_PREFIX}{container}"


def generate_stubs(out):
    return grpc_stubs.generate_stubs(PROTO, out)


class StandInRuntime:
    """RuntimeService's ListPodSandbox and PodSandboxStatus (verbose info as containerd gives
    it: the sandbox's OCI spec under "info") over the sandboxes in `self.pods`:
    id -> (Kubernetes namespace, pod name, network namespace path)."""

    def __init__(self, pb, pb_grpc, socket):
        self.pb = pb
        self.lock = threading.Lock()
        self.pods = {}
        self.calls = 0
        rt = self

        class Runtime(pb_grpc.RuntimeServiceServicer):
            def ListPodSandbox(self, request, context):
                with rt.lock:
                    rt.calls += 1
                    pods = dict(rt.pods)
                items = [pb.PodSandbox(id=i, metadata=pb.PodSandboxMetadata(
                    name=name, namespace=ns, uid=f"uid-{i}"), state=pb.SANDBOX_READY,
                    created_at=1) for i, (ns, name, _) in sorted(pods.items())]
                # Sandboxes that are not ready are listed too when no filter asks for ready
                # ones only; the plugin asks for ready ones.
                if not (request.filter.HasField("state") and
                        request.filter.state.state == pb.SANDBOX_READY):
                    items.append(pb.PodSandbox(id="gone", state=pb.SANDBOX_NOTREADY))
                return pb.ListPodSandboxResponse(items=items)

            def PodSandboxStatus(self, request, context):
                with rt.lock:
                    pod = rt.pods.get(request.pod_sandbox_id)
                if pod is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "no such sandbox")
                ns, name, path = pod
                spec = {"ociVersion": "1.0.2", "linux": {"namespaces": [
                    {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                    {"type": "network", "path": path}]}}
                info = {"info": json.dumps({"pid": 1, "runtimeSpec": spec})} \
                    if request.verbose else {}
                return pb.PodSandboxStatusResponse(
                    status=pb.PodSandboxStatus(
                        id=request.pod_sandbox_id, state=pb.SANDBOX_READY, created_at=1,
                        metadata=pb.PodSandboxMetadata(name=name, namespace=ns)),
                    info=info)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RuntimeServiceServicer_to_server(Runtime(), self.server)
        self.server.add_insecure_port("unix://" + socket)
        self.server.start()

    def set(self, pods):
        with self.lock:
            self.pods = dict(pods)

    def stop(self):
        self.server.stop(grace=None).wait(5)


def pods(**namespaces):
    """pods(h0c0="team-a", ...) -> the stand-in runtime's sandboxes for those containers."""
    return {f"sb-{c}": (ns, f"pod-{c}", netns_path(c)) for c, ns in namespaces.items()}


INITIAL = dict(h0c0="team-a", h0c1="team-a", h0c2="team-b")  # h0c3: unknown to the platform
RUNTIME = None
SYNC = None


def read_tenants():
    try:
        with open(TENANT_FILE) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return {path: tenant for tenant, path in
            re.findall(r"^([^#\s]+)\s+(\S+)", text, flags=re.M)}


def wait_tenants(want, timeout=10):
    """Waits (bounded) until the tenant file maps exactly `want`: {container: tenant}."""
    want = {netns_path(c): t for c, t in want.items()}
    end = time.monotonic() + timeout
    got = None
    while time.monotonic() < end:
        got = read_tenants()
        if got == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"tenant file: want {want}, got {got}")


def setUpModule():
    global RUNTIME, SYNC
    pb, pb_grpc = generate_stubs(os.path.join(WORK, "gen"))
    sock = os.path.join(WORK, "cri.sock")
    RUNTIME = StandInRuntime(pb, pb_grpc, sock)
    RUNTIME.set(pods(**INITIAL))
    SB.up()
    log = open(os.path.join(WORK, "sync.log"), "a")
    SYNC = subprocess.Popen([VRDMA, "device-plugin", "--tenants-from-cri", sock, "--tenant-file",
                             TENANT_FILE, "--tenants-only", "--tenants-interval-ms", "200",
                             "--namespace-tenant", "team-b=blue"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    wait_tenants({"h0c0": "team-a", "h0c1": "team-a", "h0c2": "blue"})


def tearDownModule():
    try:
        if SYNC and SYNC.poll() is None:
            SYNC.terminate()
            try:
                SYNC.wait(10)
            except subprocess.TimeoutExpired:
                SYNC.kill()
                SYNC.wait(10)
        SB.down()
    finally:
        if RUNTIME:
            RUNTIME.stop()
        shutil.rmtree(WORK, ignore_errors=True)


def daemon_log():
    with open(host_file("h0", "vrdmad.log")) as f:
        return f.read()


def pingpong(client, server="h0c0", env=None):
    """ibv_rc_pingpong -c (it checks every buffer it receives) from `client` to `server`:
    (client rc, client output, server rc, server output, the server's tenant in vrdmad's
    status while it waited)."""
    args = ["ibv_rc_pingpong", "-c", "-n", "20", "-s", "4096"]
    s = SB.start(server, *args)
    try:
        if not SB.wait_listening(server, 18515):
            raise AssertionError(f"server never listened:\n{s.out}\n{s.err}")
        tenants = tenants_in_status()
        rc, out, err = SB.run(client, *args, container_ip(server), timeout=60, env=env)
        if rc == 0:
            src = s.wait(20)
        else:
            time.sleep(1)
            src = s.popen.poll()  # None: still waiting for a peer that never came
    finally:
        s.kill()
        s.wait(10)
    return rc, out + err, src, s.out + s.err, tenants


def tenants_in_status():
    st = SB.status()
    return {c["container"]: c["tenant"] for c in st["clients"] if c["kind"] == "verbs"}


def rping_from(client, server="h0c0", port=7471, count=20):
    """rping -V (verifies the data it gets back) from `client` to a persistent rping server in
    `server`, after a container of the server's own tenant reached it (so the server listens):
    (rc, output) of the client's run."""
    ip = container_ip(server)
    srv = SB.start(server, "rping", "-s", "-P", "-a", ip, "-p", str(port))
    try:
        for _ in range(50):
            rc, out, err = SB.run("h0c1", "rping", "-c", "-a", ip, "-p", str(port), "-C", "2",
                                  timeout=20)
            if rc == 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the rping server never answered its own tenant: {out}{err}")
        rc, out, err = SB.run(client, "rping", "-c", "-V", "-v", "-a", ip, "-p", str(port), "-C",
                              str(count), timeout=30)
        return rc, out + err
    finally:
        srv.kill()
        srv.wait(10)


class PlatformTenants(unittest.TestCase):
    def test_1_file_names_each_sandbox_by_its_namespace(self):
        with open(TENANT_FILE) as f:
            text = f.read()
        self.assertIn(f"team-a {netns_path('h0c0')}  # team-a/pod-h0c0 sb-h0c0", text)
        self.assertIn(f"blue {netns_path('h0c2')}  # team-b/pod-h0c2 sb-h0c2", text)
        self.assertNotIn("h0c3", text)
        st = os.stat(TENANT_FILE)
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o644))

    def test_2_same_namespace_connects(self):
        rc, out, src, sout, tenants = pingpong("h0c1")
        self.assertEqual((rc, src), (0, 0), out + sout)
        for o in (out, sout):
            self.assertRegex(o, r"163840 bytes in [\d.]+ seconds")
        self.assertNotIn("invalid data", out + sout)
        self.assertEqual(tenants.get("h0c0"), "team-a")
        rc, out = rping_from("h0c1")
        self.assertEqual(rc, 0, out)
        self.assertEqual(len(re.findall(r"rdma-ping-\d+: ", out)), 20, out)

    def test_3_other_namespace_cannot_connect(self):
        rc, out, src, sout, tenants = pingpong("h0c2")
        self.assertNotEqual(rc, 0, "a container of another Kubernetes namespace reached h0c0")
        self.assertRegex(out, r"(?i)error|failed|couldn't")
        self.assertNotEqual(src, 0)
        self.assertRegex(daemon_log(), r"connect QP 0x[0-9a-f]+ -> 0x[0-9a-f]+ refused: tenant "
                                       r"blue -> team-a")
        rc, out = rping_from("h0c2")
        self.assertNotEqual(rc, 0, f"rping of another namespace got through:\n{out}")
        self.assertNotRegex(out, r"rdma-ping-\d+: ")

    def test_4_container_unknown_to_the_platform_shares_nothing(self):
        rc, out, src, sout, _ = pingpong("h0c3")
        self.assertNotEqual(rc, 0, "a container the platform does not know reached h0c0")
        # Its own tenant, as vrdmad shows it while it waits as a server.
        s = SB.start("h0c3", "ibv_rc_pingpong", "-n", "5")
        try:
            self.assertTrue(SB.wait_listening("h0c3", 18515))
            self.assertEqual(tenants_in_status().get("h0c3"), "@" + container_ip("h0c3"))
        finally:
            s.kill()
            s.wait(10)
        self.assertIn("container h0c3: the platform names no tenant", daemon_log())
        rc, out = rping_from("h0c3")
        self.assertNotEqual(rc, 0, out)

    def test_5_environment_chooses_nothing(self):
        # Whatever a container says of itself (its environment as Kubernetes would set it)
        # is not asked.
        env = {"POD_NAMESPACE": "team-a", "KUBERNETES_NAMESPACE": "team-a",
               "VRDMA_TENANT": "team-a"}
        rc, out, _, _, _ = pingpong("h0c2", env=env)
        self.assertNotEqual(rc, 0, "h0c2 reached team-a by its environment")

    def test_6_changed_mapping_holds_for_new_connections(self):
        RUNTIME.set(pods(h0c0="team-a", h0c1="team-a", h0c2="team-a"))
        try:
            wait_tenants({"h0c0": "team-a", "h0c1": "team-a", "h0c2": "team-a"})
            rc, out, src, sout, _ = pingpong("h0c2")
            self.assertEqual((rc, src), (0, 0), out + sout)
            self.assertNotIn("invalid data", out + sout)
            # h0c1 moves to another namespace: it no longer reaches h0c0.
            RUNTIME.set(pods(h0c0="team-a", h0c1="team-c", h0c2="team-a"))
            wait_tenants({"h0c0": "team-a", "h0c1": "team-c", "h0c2": "team-a"})
            rc, out, _, _, _ = pingpong("h0c1")
            self.assertNotEqual(rc, 0, "h0c1 kept the tenant it no longer has")
        finally:
            RUNTIME.set(pods(**INITIAL))
            wait_tenants({"h0c0": "team-a", "h0c1": "team-a", "h0c2": "blue"})

    def test_7_tenant_file_others_could_write_is_ignored(self):
        os.chmod(TENANT_FILE, 0o664)
        try:
            rc, out, _, _, tenants = pingpong("h0c1")
            self.assertNotEqual(rc, 0, "a group-writable tenant file was trusted")
            self.assertEqual(tenants.get("h0c0"), "@" + container_ip("h0c0"))
            self.assertIn(f"{TENANT_FILE} is not a regular file that only root", daemon_log())
        finally:
            os.chmod(TENANT_FILE, 0o644)
        rc, out, src, sout, _ = pingpong("h0c1")
        self.assertEqual((rc, src), (0, 0), out + sout)

    def test_8_options(self):
        for args in (["--tenants-only"], ["--namespace-tenant", "a=b"],
                     ["--tenants-from-cri", "/x", "--namespace-tenant", "a=b c"],
                     ["--tenants-from-cri", "/x", "--tenant-file", "relative"]):
            p = subprocess.run([VRDMA, "device-plugin", *args, "--print-config"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stdout}{p.stderr}")
        p = subprocess.run([os.environ.get("VRDMA_DAEMON", "vrdmad"), "--platform-tenants",
                            TENANT_FILE, "--tenant", "a=10.0.0.0/8", "--socket",
                            os.path.join(WORK, "x.sock")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("exclude each other", p.stderr)
        # --print-tenants: one round, written and printed.
        out_file = os.path.join(WORK, "print", "tenants")
        p = subprocess.run([VRDMA, "device-plugin", "--tenants-from-cri",
                            os.path.join(WORK, "cri.sock"), "--tenant-file", out_file,
                            "--namespace-tenant", "team-a=red", "--print-tenants"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"red {netns_path('h0c0')}  # team-a/pod-h0c0 sb-h0c0\n", p.stdout)
        self.assertIn(f"team-b {netns_path('h0c2')}  # team-b/pod-h0c2 sb-h0c2\n", p.stdout)
        with open(out_file) as f:
            self.assertEqual(f.read(), p.stdout)
        p = subprocess.run([VRDMA, "device-plugin", "--tenants-from-cri",
                            os.path.join(WORK, "none.sock"), "--tenant-file", out_file,
                            "--print-tenants"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("ListPodSandbox at unix://", p.stderr)


    def test_9_pre_start_puts_the_pod_in_the_file_before_its_container_starts(self):
        # The device plugin itself (with a stand-in kubelet) asks for PreStartContainer and
        # asks the runtime then: the file names the pod before its container's programs can
        # reach vrdmad. Its own rounds are 10 minutes apart here, and the --tenants-only
        # process is stopped, so only PreStartContainer can update the file.
        import test_device_plugin as dp
        SYNC.terminate()
        SYNC.wait(10)
        pb, pb_grpc = dp.generate_stubs(os.path.join(WORK, "gen-dp"))
        plugin_dir = os.path.join(WORK, "dp")
        os.makedirs(plugin_dir)
        kubelet = dp.StandInKubelet(pb, pb_grpc, plugin_dir)
        log = open(os.path.join(WORK, "plugin.log"), "a")
        plugin = subprocess.Popen(
            [VRDMA, "device-plugin", "--plugin-dir", plugin_dir, "--socket",
             host_file("h0", "vrdmad.sock"), "--lib-dir", "/opt/vrdma-test/lib",
             "--tenants-from-cri", os.path.join(WORK, "cri.sock"), "--tenant-file", TENANT_FILE,
             "--tenants-interval-ms", "600000"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        channel = grpc.insecure_channel("unix://" + os.path.join(plugin_dir, "vrdma.sock"))
        try:
            _, req, options = kubelet.next_registration(10)
            self.assertTrue(req.options.pre_start_required)
            self.assertTrue(options.pre_start_required)
            stub = pb_grpc.DevicePluginStub(channel)
            wait_tenants({"h0c0": "team-a", "h0c1": "team-a", "h0c2": "team-b"})
            RUNTIME.set(pods(**INITIAL, h0c3="team-a"))
            calls = RUNTIME.calls
            stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["vrdma0-0"]),
                                   timeout=10)
            self.assertGreater(RUNTIME.calls, calls)
            self.assertEqual(read_tenants().get(netns_path("h0c3")), "team-a")
            rc, out, src, sout, _ = pingpong("h0c3")
            self.assertEqual((rc, src), (0, 0), out + sout)
            # Without an answer from the runtime the container does not start (yet).
            RUNTIME.stop()
            with self.assertRaises(grpc.RpcError) as e:
                stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["vrdma0-0"]),
                                       timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        finally:
            channel.close()
            plugin.terminate()
            plugin.wait(10)
            kubelet.stop()


if __name__ == "__main__":
    unittest.main()
