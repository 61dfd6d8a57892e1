"""A stand-in for the Kubernetes API server's discovery documents, on loopback: what kubectl
needs to map apiVersion/kind to resources when it parses manifests (kubectl create
--dry-run=client asks the server even so). It serves nothing else and records every request,
so a test can show that kubectl created nothing."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
CORE = [("namespaces", "Namespace", False), ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True), ("services", "Service", True),
        ("pods", "Pod", True)]
APPS = [("daemonsets", "DaemonSet", True), ("statefulsets", "StatefulSet", True),
        ("deployments", "Deployment", True)]


def resource_list(group_version, resources):
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": n, "singularName": "", "namespaced": ns, "kind": k,
                           "verbs": VERBS} for n, k, ns in resources]}


DOCS = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                             "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/api/v1": resource_list("v1", CORE),
    "/apis/apps/v1": resource_list("apps/v1", APPS),
    "/version": {"major": "1", "minor": "28", "gitVersion": "v1.28.0"},
}


class KubeStub:
    def __init__(self):
        self.requests = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                stub.requests.append(("GET", path))
                doc = DOCS.get(path)
                body = json.dumps(doc if doc else {"kind": "Status", "code": 404}).encode()
                self.send_response(200 if doc else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                stub.requests.append(("POST", self.path))
                self.send_response(405)
                self.end_headers()

            do_PUT = do_PATCH = do_DELETE = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def kubeconfig(self, path):
        with open(path, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "stub", "cluster": {"server": self.url}}],
                       "contexts": [{"name": "stub", "context": {"cluster": "stub",
                                                                 "user": "stub"}}],
                       "users": [{"name": "stub", "user": {}}],
                       "current-context": "stub"}, f)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
