"""Open MPI (Debian's openmpi-bin 4.1, unmodified) over vrdma: two ranks, one per container, on
one host or on two (topology.py), with --mca pml ucx and UCX's verbs transports (UCX_TLS, as on
any RDMA device), and with UCX's defaults. The job is the
project's mpi_check (tests/tools), which checks its data: point-to-point of 1 B .. 4 MiB,
non-blocking exchanges, allreduce, bcast, alltoall, MPI_Put/MPI_Get under fences and locks.
UCP's report of the transports its endpoints use says the traffic went through vrdma."""

import re
import unittest

import conftest_path  # noqa: F401

from vrdma_py.mpi_job import CHECK_PARTS, MPI_CHECK, mpirun  # noqa: E402
from topology import CLIENT, SB, SERVER  # noqa: E402
from vrdma_py.ucx_run import DEVICE, lanes  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down

@unittest.skipUnless(MPI_CHECK, "mpi_check was not built (no MPI compiler; VRDMA_MPI_CHECK)")
class OpenMpi(unittest.TestCase):
    def run_check(self, tls, expect_tl, exact=True):
        containers = [CLIENT, SERVER]
        rc, out = mpirun(SB, SB.state(), containers, [MPI_CHECK], tls=tls)
        self.assertEqual(rc, 0, out)
        for part in CHECK_PARTS:
            self.assertIn(part, out)
        # One rank in each container.
        where = set(re.findall(r"^rank \d of 2 runs in (\S+)$", out, re.M))
        self.assertEqual(where, set(containers), out)
        # Both ranks' UCP endpoints to the peer: vrdma's transport on vrdma's device only.
        used = lanes(out)
        remote = {(t, d) for t, d in used if t != "self"}
        self.assertTrue(remote, f"UCP reported no transport to the peer:\n{out}")
        if exact:
            self.assertEqual(remote, {(expect_tl, DEVICE)}, out)
        else:
            self.assertIn((expect_tl, DEVICE), remote, out)
        self.assertNotIn(" UCX  ERROR", out)
        self.assertNotIn("Unable to detach shared memory", out)

    def test_pml_ucx_over_rc(self):
        self.run_check("rc_verbs,ud_verbs,self", "rc_verbs")

    def test_pml_ucx_over_ud(self):
        self.run_check("ud_verbs,self", "ud_verbs")

    def test_pml_ucx_with_ucx_defaults(self):
        # No UCX_TLS: UCX adds its shared-memory transports (the sandbox's hosts share one
        # machine) and allocates MPI_Win_allocate's window in a System V segment, which it also
        # registers with vrdma; the other rank attaches the same segment. Tags go over RC.
        self.run_check(None, "rc_verbs", exact=False)

    def test_failing_rank_fails_the_job(self):
        # A rank that aborts makes mpirun fail (the checks' failures would be seen).
        rc, out = mpirun(SB, SB.state(), [CLIENT, SERVER], [MPI_CHECK, "--no-such-mode"])
        self.assertNotEqual(rc, 0, out)
        self.assertIn("unknown argument", out)


if __name__ == "__main__":
    unittest.main()
