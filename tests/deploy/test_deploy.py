"""The deployment files (deploy/kubernetes): they parse as Kubernetes objects (kubectl create
--dry-run=client, against a stand-in for the API server's discovery documents on loopback: no
cluster, nothing created), and the paths the DaemonSet mounts are the paths vrdmad and the
device plugin use, as the plugin itself reports them (--print-config) for the arguments the
DaemonSet gives it."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from kube_stub import KubeStub

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
EXAMPLES = os.path.join(DEPLOY, "examples")
VRDMA = os.environ.get("VRDMA_BIN") or shutil.which("vrdma") or "vrdma"
KUBECTL = os.environ.get("KUBECTL") or shutil.which("kubectl")


def load(directory):
    docs = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yaml"):
            with open(os.path.join(directory, name)) as f:
                docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or
                                                      d["metadata"]["name"] == name)]
    assert found, f"no {kind} {name or ''}"
    return found[0]


def expand(text, env):
    """The kubelet's $(VAR) expansion of command and args; $$ is a literal $."""
    out = re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                 lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)
    return out


def container_env(container, configmap):
    env = {}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("configMapKeyRef")
        if ref:
            assert ref["name"] == configmap["metadata"]["name"], ref
            env[e["name"]] = configmap["data"][ref["key"]]
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = {"status.hostIP": "10.1.2.3"}[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = e["value"]
    return env


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load(DEPLOY)
        cls.examples = load(EXAMPLES)
        cls.ds = find(cls.docs, "DaemonSet", "vrdma")
        cls.cm = find(cls.docs, "ConfigMap", "vrdma-config")
        cls.pod = cls.ds["spec"]["template"]["spec"]
        cls.volumes = {v["name"]: v for v in cls.pod["volumes"]}

    def container(self, name, init=False):
        return [c for c in self.pod["initContainers" if init else "containers"]
                if c["name"] == name][0]

    def host_path_at(self, container, path):
        """The node path a container sees at `path` (through a hostPath volume), or None."""
        for m in container.get("volumeMounts", []):
            if m["mountPath"] == path or path.startswith(m["mountPath"].rstrip("/") + "/"):
                hp = self.volumes[m["name"]]["hostPath"]["path"]
                return hp + path[len(m["mountPath"]):]
        return None

    def plugin_config(self):
        c = self.container("device-plugin")
        env = container_env(c, self.cm)
        args = [expand(a, env) for a in c["command"]]
        self.assertEqual(args[:2], ["vrdma", "device-plugin"])
        return json.loads(subprocess.run([VRDMA, *args[1:], "--print-config"],
                                         capture_output=True, text=True, check=True).stdout)

    def vrdmad_args(self):
        c = self.container("vrdmad")
        script = expand(c["command"][2], container_env(c, self.cm))
        p = subprocess.run(["sh", "-c", script.replace("exec vrdmad", "echo vrdmad")],
                           capture_output=True, text=True, check=True)
        return p.stdout.split()

    def test_plugin_paths_are_the_nodes_paths(self):
        cfg = self.plugin_config()
        plugin = self.container("device-plugin")
        # The kubelet's directory: the plugin's socket and kubelet.sock, at the node's path.
        self.assertEqual(self.host_path_at(plugin, cfg["plugin_dir"]),
                         "/var/lib/kubelet/device-plugins")
        self.assertEqual(cfg["plugin_dir"], "/var/lib/kubelet/device-plugins")
        # The plugin hands host paths to the kubelet: each must be that same path on the node,
        # reachable by the plugin (the socket, for health) or filled by the DaemonSet (libs).
        socket_dir = os.path.dirname(cfg["vrdmad_socket"])
        self.assertEqual(self.host_path_at(plugin, socket_dir), socket_dir)
        node_paths = {v["hostPath"]["path"] for v in self.volumes.values() if "hostPath" in v}
        for m in cfg["edits"]["mounts"]:
            self.assertIn(m["host_path"], node_paths, f"{m['host_path']} is not a node path")
        lib = cfg["edits"]["mounts"][0]["host_path"]
        install = self.container("install", init=True)
        self.assertEqual(self.host_path_at(install, lib), lib)
        self.assertIn(lib, " ".join(install["command"]))
        self.assertEqual(cfg["edits"]["env"][0], {"name": "LD_LIBRARY_PATH", "value": lib})
        self.assertEqual(cfg["resource_name"], self.cm["data"]["resource-name"])
        self.assertEqual(cfg["devices"], int(self.cm["data"]["devices"]))

    def test_vrdmad_serves_the_socket_the_plugin_watches(self):
        cfg = self.plugin_config()
        args = self.vrdmad_args()
        vrdmad = self.container("vrdmad")
        socket = args[args.index("--socket") + 1]
        self.assertEqual(socket, cfg["vrdmad_socket"])
        self.assertEqual(self.host_path_at(vrdmad, os.path.dirname(socket)),
                         os.path.dirname(socket))
        netns = args[args.index("--netns-dir") + 1]
        self.assertEqual(self.host_path_at(vrdmad, netns), netns)
        self.assertEqual(args[args.index("--host-id") + 1], str((10 << 24) | (1 << 16) | (2 << 8) | 3))
        self.assertEqual(args[args.index("--router-listen") + 1],
                         "10.1.2.3:" + self.cm["data"]["router-port"])
        self.assertEqual(args[args.index("--directory") + 1], self.cm["data"]["directory"])
        # The routers link over mutual TLS: the node's certificate, key and CA, from the node.
        for opt in ("--tls-ca", "--tls-cert", "--tls-key"):
            path = args[args.index(opt) + 1]
            self.assertEqual(self.host_path_at(vrdmad, os.path.dirname(path)),
                             os.path.dirname(path), f"{opt} {path} is not the node's")
        self.assertNotIn("--router-plaintext", args)
        # Identification needs the node's pids and network namespaces.
        self.assertTrue(self.pod["hostPID"])
        self.assertTrue(self.pod["hostNetwork"])

    def test_examples_request_the_resource(self):
        resource = self.cm["data"]["resource-name"]
        pods = [d for d in self.examples if d["kind"] == "Pod"]
        self.assertEqual(len(pods), 2)
        for pod in pods:
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            self.assertEqual(limits, {resource: 1})
        svc = find(self.examples, "Service")
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        server = [p for p in pods if p["metadata"].get("labels", {}).get("app") ==
                  svc["spec"]["selector"]["app"]]
        self.assertEqual(len(server), 1)

    @unittest.skipUnless(KUBECTL, "kubectl is not installed (Debian: kubernetes-client)")
    def test_kubectl_parses_every_file(self):
        stub = KubeStub()
        home = tempfile.mkdtemp(prefix="vrdma-kubectl-")
        try:
            stub.kubeconfig(os.path.join(home, "kubeconfig"))
            p = subprocess.run([KUBECTL, "--kubeconfig", os.path.join(home, "kubeconfig"),
                                "create", "--dry-run=client", "--validate=false", "-o", "json",
                                "-f", DEPLOY, "-f", EXAMPLES], capture_output=True, text=True,
                               timeout=120, env=dict(os.environ, HOME=home))
        finally:
            stub.stop()
            shutil.rmtree(home, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        # One JSON object per manifest object, one after the other.
        items, pos, decoder = [], 0, json.JSONDecoder()
        while p.stdout[pos:].strip():
            obj, end = decoder.raw_decode(p.stdout[pos:].lstrip())
            pos += len(p.stdout[pos:]) - len(p.stdout[pos:].lstrip()) + end
            items += obj["items"] if obj.get("kind") == "List" else [obj]
        expected = sorted((d["kind"], d["metadata"]["name"]) for d in self.docs + self.examples)
        self.assertEqual(sorted((i["kind"], i["metadata"]["name"]) for i in items), expected)
        self.assertEqual([r for r in stub.requests if r[0] != "GET"], [])  # nothing created


if __name__ == "__main__":
    unittest.main()
