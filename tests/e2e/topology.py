"""Where the end-to-end suites run their two programs. By default both containers are on one
host (h0c0 serves, h0c1 connects); with VRDMA_E2E_TOPOLOGY=cross the server is on a second
host (h1c0, reached through the routers and the etcd directory) and the client on the first
(h0c0). The same suites then check both paths."""

import os

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox

CROSS = os.environ.get("VRDMA_E2E_TOPOLOGY", "") == "cross"
if CROSS:
    SB = Sandbox(hosts=2, containers=1)
    SERVER, CLIENT = "h1c0", "h0c0"
else:
    SB = Sandbox(hosts=1, containers=2)
    SERVER, CLIENT = "h0c0", "h0c1"
# Across hosts a destination needs its GID (RoCE has no LIDs): programs that take a GID
# index get one.
GID = ["-g", "0"] if CROSS else []
