"""The mediated path across two hosts: with `--allow red->blue` on both vrdmads, a red
container of one host and a blue container of the other connect through the routers, which
check every request; a green container (no rule) and blue's connects to red's listeners are
refused.

h0c0 red, h0c1 green (no rule), h1c0 blue, h1c1 unused.
"""

import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox

from mediated_common import MediatedCases

SB = Sandbox(hosts=2, containers=2,
             extra_args=["--tenant", "red=10.77.0.10/32", "--tenant", "green=10.77.0.11/32",
                         "--tenant", "blue=10.77.1.10/32", "--daemon-arg=--allow=red->blue"])
setUpModule = SB.up
tearDownModule = SB.down


class CrossHost(MediatedCases, unittest.TestCase):
    SB = SB
    RED, BLUE, GREEN = "h0c0", "h1c0", "h0c1"
    GID = ["-g", "0"]


if __name__ == "__main__":
    unittest.main()
