"""MPICH (Debian's mpich 4.0, on UCX, unmodified) over vrdma with its defaults and UCX's: two
ranks, one per container, on one host or on two (topology.py), started by MPICH's own mpiexec.
Nothing in the job's environment names vrdma: UCX finds the device and chooses its transports
itself. The job is the project's mpi_check built with MPICH, which checks its data
(point-to-point of 1 B .. 4 MiB, collectives, MPI_Put/MPI_Get under fences and locks); UCP's
report of its endpoints says the tags went over vrdma's device."""

import re
import unittest

import conftest_path  # noqa: F401

from vrdma_py.mpi_job import CHECK_PARTS, MPICH_CHECK, mpiexec_mpich  # noqa: E402
from vrdma_py.ucx_run import DEVICE, lanes  # noqa: E402
from topology import CLIENT, SB, SERVER  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down

@unittest.skipUnless(MPICH_CHECK, "mpi_check was not built with MPICH (no mpicc.mpich)")
class Mpich(unittest.TestCase):
    def test_defaults(self):
        containers = [CLIENT, SERVER]
        rc, out = mpiexec_mpich(SB, SB.state(), containers, [MPICH_CHECK])
        self.assertEqual(rc, 0, out)
        for part in CHECK_PARTS:
            self.assertIn(part, out)
        where = set(re.findall(r"^rank \d of 2 runs in (\S+)$", out, re.M))
        self.assertEqual(where, set(containers), out)
        self.assertIn(("rc_verbs", DEVICE), lanes(out), out)
        self.assertNotIn(" UCX  ERROR", out)
        self.assertNotIn("Unable to detach shared memory", out)

    def test_failing_rank_fails_the_job(self):
        rc, out = mpiexec_mpich(SB, SB.state(), [CLIENT, SERVER], [MPICH_CHECK, "--no-such-mode"])
        self.assertNotEqual(rc, 0, out)
        self.assertIn("unknown argument", out)


if __name__ == "__main__":
    unittest.main()
