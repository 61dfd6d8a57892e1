"""The Kubernetes device plugin (`vrdma device-plugin`) against a stand-in kubelet written
here from the same v1beta1 proto: a Registration server that, as the kubelet does, calls the
plugin back before it accepts, and a client of the plugin's DevicePlugin service. Everything
lives in a directory of the test's own, with a vrdmad of its own."""

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent import futures

import conftest_path  # noqa: F401
from vrdma_py import grpc_stubs
from vrdma_py.sandbox import VRDMA, VRDMAD, vrdma

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.environ.get("VRDMA_K8S_PROTO") or os.path.join(HERE, "..", "..", "src", "k8s",
                                                          "deviceplugin_v1beta1.proto")
RESOURCE = "test.vrdma.io/hca"
DEVICES = 5
LIB_DIR = "/opt/vrdma-test/lib"


def generate_stubs(out):
    return grpc_stubs.generate_stubs(PROTO, out)


class StandInKubelet:
    """Registration on <dir>/kubelet.sock; each Register is recorded after the plugin's
    GetDevicePluginOptions answered, as the kubelet checks it before accepting."""

    def __init__(self, pb, pb_grpc, directory):
        self.pb, self.pb_grpc, self.dir = pb, pb_grpc, directory
        self.registrations = queue.Queue()
        kubelet = self

        class Registration(pb_grpc.RegistrationServicer):
            def Register(self, request, context):
                channel = grpc.insecure_channel("unix://" + os.path.join(kubelet.dir,
                                                                         request.endpoint))
                try:
                    options = pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                        pb.Empty(), timeout=5)
                finally:
                    channel.close()
                kubelet.registrations.put((time.monotonic(), request, options))
                return pb.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port("unix://" + os.path.join(directory, "kubelet.sock"))
        self.server.start()

    def stop(self):
        self.server.stop(grace=None).wait(5)

    def next_registration(self, timeout):
        try:
            return self.registrations.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no registration within {timeout} s")


class Watch:
    """A ListAndWatch stream read in the background: (time, {id: health}) per response."""

    def __init__(self, stub, pb):
        self.updates = queue.Queue()
        self.call = stub.ListAndWatch(pb.Empty())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for r in self.call:
                self.updates.put((time.monotonic(), {d.ID: d.health for d in r.devices}))
        except grpc.RpcError:
            pass
        self.updates.put(None)

    def next(self, timeout):
        try:
            u = self.updates.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no ListAndWatch update within {timeout} s")
        if u is None:
            raise AssertionError("the ListAndWatch stream ended")
        return u

    def until(self, health, timeout):
        end = time.monotonic() + timeout
        while True:
            t, devices = self.next(max(0.01, end - time.monotonic()))
            if set(devices.values()) == {health}:
                return t, devices

    def cancel(self):
        self.call.cancel()
        self.thread.join(5)


class DevicePlugin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Short: Unix socket paths are limited to 107 bytes.
        cls.dir = tempfile.mkdtemp(prefix="vrdma-dp-")
        cls.pb, cls.pb_grpc = generate_stubs(os.path.join(cls.dir, "gen"))
        cls.plugin_dir = os.path.join(cls.dir, "device-plugins")
        os.makedirs(cls.plugin_dir)
        cls.vrdmad_socket = os.path.join(cls.dir, "run", "vrdmad.sock")
        os.makedirs(os.path.dirname(cls.vrdmad_socket))
        cls.daemon = None
        cls.plugin = None
        cls.start_daemon()
        cls.kubelet = StandInKubelet(cls.pb, cls.pb_grpc, cls.plugin_dir)
        cls.start_plugin()

    @classmethod
    def tearDownClass(cls):
        for p in (cls.plugin, cls.daemon):
            if p and p.poll() is None:
                p.kill()
                p.wait(10)
        cls.kubelet.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def start_daemon(cls):
        with open(os.path.join(cls.dir, "vrdmad.log"), "a") as log:
            cls.daemon = subprocess.Popen([VRDMAD, "--socket", cls.vrdmad_socket], stdout=log,
                                          stderr=subprocess.STDOUT)
        end = time.monotonic() + 10
        while not os.path.exists(cls.vrdmad_socket):
            assert time.monotonic() < end, "vrdmad did not start"
            time.sleep(0.05)

    @classmethod
    def plugin_args(cls):
        return ["device-plugin", "--plugin-dir", cls.plugin_dir, "--socket", cls.vrdmad_socket,
                "--lib-dir", LIB_DIR, "--resource-name", RESOURCE, "--devices", str(DEVICES),
                "--health-interval-ms", "500"]

    @classmethod
    def start_plugin(cls):
        cls.plugin_log = os.path.join(cls.dir, "plugin.log")
        with open(cls.plugin_log, "a") as log:
            cls.plugin = subprocess.Popen([VRDMA, *cls.plugin_args()], stdout=log,
                                          stderr=subprocess.STDOUT)

    def log(self):
        with open(self.plugin_log) as f:
            return f.read()

    def stub(self):
        channel = grpc.insecure_channel("unix://" + os.path.join(self.plugin_dir, "vrdma.sock"))
        self.addCleanup(channel.close)
        return self.pb_grpc.DevicePluginStub(channel)

    def edits(self):
        return json.loads(vrdma("edits", "--socket", self.vrdmad_socket, "--lib-dir",
                                LIB_DIR).stdout)

    def registered(self, timeout):
        _, req, options = self.kubelet.next_registration(timeout)
        self.assertEqual(req.version, "v1beta1")
        self.assertEqual(req.endpoint, "vrdma.sock")
        self.assertEqual(req.resource_name, RESOURCE)
        self.assertTrue(options.get_preferred_allocation_available)
        self.assertFalse(options.pre_start_required)
        return req

    def test_1_registers_and_lists_healthy_devices(self):
        self.registered(timeout=10)
        watch = Watch(self.stub(), self.pb)
        try:
            _, devices = watch.next(5)
        finally:
            watch.cancel()
        self.assertEqual(devices, {f"vrdma0-{i}": "Healthy" for i in range(DEVICES)})

    def test_2_health_follows_vrdmad(self):
        watch = Watch(self.stub(), self.pb)
        try:
            watch.until("Healthy", 5)
            cls = type(self)
            cls.daemon.kill()
            killed = time.monotonic()
            cls.daemon.wait(5)
            t, devices = watch.until("Unhealthy", 5)
            self.assertLessEqual(t - killed, 5.0)
            sys.stderr.write(f"[unhealthy {t - killed:.2f} s after vrdmad was killed] ")
            self.assertEqual(len(devices), DEVICES)
            cls.start_daemon()
            started = time.monotonic()
            t, _ = watch.until("Healthy", 5)
            self.assertLessEqual(t - started, 5.0)
            sys.stderr.write(f"[healthy {t - started:.2f} s after it was back] ")
        finally:
            watch.cancel()
        self.assertIn("devices unhealthy", self.log())

    def test_3_preferred_allocation(self):
        pb = self.pb
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["vrdma0-3", "vrdma0-1", "vrdma0-4"],
                must_include_deviceIDs=["vrdma0-4"], allocation_size=2),
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["vrdma0-2", "vrdma0-0"], allocation_size=1)])
        r = self.stub().GetPreferredAllocation(req, timeout=5)
        self.assertEqual([list(c.deviceIDs) for c in r.container_responses],
                         [["vrdma0-4", "vrdma0-1"], ["vrdma0-0"]])

    def test_4_allocate_answers_the_container_edits(self):
        pb = self.pb
        r = self.stub().Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["vrdma0-0"]),
            pb.ContainerAllocateRequest(devices_ids=["vrdma0-1", "vrdma0-2"])]), timeout=5)
        edits = self.edits()
        self.assertEqual(len(r.container_responses), 2)
        for c in r.container_responses:
            self.assertEqual(dict(c.envs), {v["name"]: v["value"] for v in edits["env"]})
            self.assertEqual([(m.container_path, m.host_path, m.read_only) for m in c.mounts],
                             [(m["container_path"], m["host_path"], m["read_only"])
                              for m in edits["mounts"]])
            self.assertEqual([(d.container_path, d.host_path, d.permissions) for d in c.devices],
                             [(d["container_path"], d["host_path"], d["permissions"])
                              for d in edits["devices"]])
            self.assertEqual(len(c.cdi_devices), 0)
            self.assertEqual(dict(c.annotations), {})
        self.assertIn(os.path.dirname(self.vrdmad_socket),
                      [m.host_path for m in r.container_responses[0].mounts])
        # What `--print-allocation` prints (for a runtime started by hand) is the same answer.
        printed = json.loads(vrdma(*self.plugin_args(), "--print-allocation").stdout)
        c = r.container_responses[0]
        self.assertEqual(printed["envs"], dict(c.envs))
        self.assertEqual(printed["mounts"], [{"container_path": m.container_path,
                                              "host_path": m.host_path,
                                              "read_only": m.read_only} for m in c.mounts])
        self.assertEqual(printed["devices"], [{"container_path": d.container_path,
                                               "host_path": d.host_path,
                                               "permissions": d.permissions} for d in c.devices])
        # And its podman/docker arguments (what e2e_podman starts containers with) say the same.
        engine = [a for a in vrdma(*self.plugin_args(), "--print-allocation",
                                   "--engine-args").stdout.split("\n") if a]
        self.assertEqual(engine, [f"--volume={m.host_path}:{m.container_path}:"
                                  f"{'ro' if m.read_only else 'rw'}" for m in c.mounts] +
                         [f"--device={d.host_path}:{d.container_path}:{d.permissions}"
                          for d in c.devices] +
                         sorted(f"--env={k}={v}" for k, v in c.envs.items()))
        with self.assertRaises(grpc.RpcError) as e:
            self.stub().Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=["vrdma0-99"])]), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.stub().PreStartContainer(pb.PreStartContainerRequest(devices_ids=["vrdma0-0"]),
                                      timeout=5)

    def test_5_cdi_answers(self):
        for flag, field in (("--cdi-devices", "cdi_devices"), ("--cdi-annotations",
                                                                "annotations")):
            printed = json.loads(vrdma(*self.plugin_args(), flag, "--print-allocation").stdout)
            self.assertEqual((printed["mounts"], printed["devices"], printed["envs"]),
                             ([], [], {}))
            if field == "cdi_devices":
                self.assertEqual(printed["cdi_devices"], ["vrdma.io/hca=vrdma0"])
            else:
                self.assertEqual(printed["annotations"], {"cdi.k8s.io/vrdma": "vrdma.io/hca=vrdma0"})

    def test_6_registers_again_when_kubelet_sock_is_recreated(self):
        cls = type(self)
        cls.kubelet.stop()
        sock = os.path.join(self.plugin_dir, "kubelet.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        time.sleep(0.5)
        cls.kubelet = StandInKubelet(self.pb, self.pb_grpc, self.plugin_dir)
        created = time.monotonic()
        t, _, _ = self.kubelet.next_registration(10)
        self.assertLessEqual(t - created, 10.0)
        sys.stderr.write(f"[registered {t - created:.2f} s after kubelet.sock was made] ")
        self.assertIn("kubelet.sock was created", self.log())

    def test_7_serves_again_when_its_socket_is_deleted(self):
        # A restarting kubelet deletes every socket in the directory.
        os.unlink(os.path.join(self.plugin_dir, "vrdma.sock"))
        deleted = time.monotonic()
        t, _, _ = self.kubelet.next_registration(10)
        self.assertLessEqual(t - deleted, 10.0)
        sys.stderr.write(f"[registered {t - deleted:.2f} s after its socket was deleted] ")
        watch = Watch(self.stub(), self.pb)
        try:
            watch.until("Healthy", 5)
        finally:
            watch.cancel()

    def test_8_sigterm_then_restart(self):
        cls = type(self)
        cls.plugin.send_signal(signal.SIGTERM)
        self.assertEqual(cls.plugin.wait(10), 0)
        self.assertFalse(os.path.exists(os.path.join(self.plugin_dir, "vrdma.sock")))
        self.assertIn("stopping on Terminated", self.log())
        cls.start_plugin()
        self.registered(timeout=10)

    def test_9_bad_options(self):
        for args in (["--resource-name", "hca"], ["--resource-name", "kubernetes.io/hca"],
                     ["--devices", "0"], ["--endpoint", "kubelet.sock"],
                     ["--plugin-dir", "relative"]):
            p = vrdma("device-plugin", *args, "--print-config", check=False)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stdout}{p.stderr}")


if __name__ == "__main__":
    unittest.main()
