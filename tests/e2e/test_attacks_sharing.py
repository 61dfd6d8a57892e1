"""Attacks on what same-host peers share: a hostile program of the same tenant (vrdma_attacker,
speaking the control protocol itself and using the drop-in library) against a cooperating target
(its legitimately connected peer) and against a victim pair running vrdma_stress meanwhile.

Each attack must fail; only the attacker may lose (its QP, its connection); the target's memory
outside what RDMA semantics let a connected peer write stays intact and it never sees a wr_id it
did not post; the victims finish with 0 errors, 0 corrupt, 0 lost; vrdmad keeps answering.

h0c0 <-> h0c1: the victim pair.  h0c2: the target.  h0c3: the attacker.
"""

import os
import re
import shutil
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.attacks import Report, Victims
from vrdma_py.sandbox import Sandbox, container_ip

ATTACKER = os.environ.get("VRDMA_ATTACKER") or shutil.which("vrdma_attacker") or "vrdma_attacker"
PORT = 18700

# One tenant for the four containers, declared (not the implicit default).
SB = Sandbox(hosts=1, containers=4, extra_args=["--tenant", "team=10.77.0.0/24"])
REPORT = Report("sharing attacks (same host)")


def setUpModule():
    SB.up()


def tearDownModule():
    try:
        print(REPORT.table())
        failures = REPORT.failures()
        if failures:
            details = "\n".join(f"{a}: {d}" for a, _, _, d in failures)
            raise AssertionError(f"{len(failures)} attack(s) succeeded or disturbed a victim:\n"
                                 f"{details}")
    finally:
        SB.down()


def victim_probes():
    """--probe CLIENT:QPN[:KEY...] for each QP of the victim pair, from vrdma status."""
    args = []
    for c in SB.status()["clients"]:
        if c.get("container") not in ("h0c0", "h0c1") or c.get("kind") != "verbs":
            continue
        keys = [str(int(m["key"], 16)) for m in c.get("mrs", [])][:8]
        for q in c.get("qps", []):
            args += ["--probe", ":".join([str(c["id"]), str(q["qpn"])] + keys)]
    return args


def daemon_alive_and_answering():
    try:
        os.kill(SB.daemon_pid(), 0)
    except OSError:
        return False, "vrdmad is gone"
    t0 = time.monotonic()
    try:
        SB.status()
    except Exception as e:  # noqa: BLE001 - any failure to answer is what is checked
        return False, f"vrdma status failed: {e}"
    took = time.monotonic() - t0
    return took < 5, f"vrdma status answered in {took:.2f}s"


class SharingAttacks(unittest.TestCase):
    def attack(self, name, probes=False):
        detail = ""
        with Victims(SB, [("h0c0", "h0c1")]) as victims:
            target = SB.start("h0c2", ATTACKER, "target", "--port", str(PORT))
            if not SB.wait_listening("h0c2", PORT, timeout=30):
                target.kill()
                target.wait(10)
                raise AssertionError(f"the target never listened:\n{target.out}{target.err}")
            args = [ATTACKER, "attack", name, container_ip("h0c2"), "--port", str(PORT)]
            if probes:
                args += victim_probes()
            rc, out, err = SB.run("h0c3", *args, timeout=180)
            trc = target.wait(120)
            alive, how = daemon_alive_and_answering()
        verdict = re.search(rf"^attack {re.escape(name)} (failed|SUCCEEDED): (.*)$", out, re.M)
        tline = re.search(r"^target: .*$", target.out, re.M)
        detail = (f"attacker rc={rc}: {verdict.group(0) if verdict else out + err}\n"
                  f"target rc={trc}: {tline.group(0) if tline else target.out + target.err}\n{how}")
        # Anything but a clean "failed" from both sides counts against vrdma.
        succeeded = not (rc == 0 and verdict and verdict.group(1) == "failed" and trc == 0 and
                         alive)
        print(f"\n[{name}]\n{detail}\nvictims: " +
              "; ".join(f"{pair[1]} -> {pair[0]} client rc {crc} server rc {src}"
                        for pair, crc, src, _, _ in victims.results))
        ok = REPORT.record(name, succeeded, victims, detail=detail)
        self.assertTrue(ok, detail + "\n" + "\n".join(victims.disturbed))

    def test_1_connect_without_consent(self):
        """A QP whose RTR does not name the attacker: refused, never delivered; the victims'
        QPs, descriptors and keys are out of reach."""
        self.attack("consent", probes=True)

    def test_2_getfd_of_everything(self):
        """Every fd id of the target over an agreed connection: only the QP's own object (and
        the read-only key table); never the arena or a backing."""
        self.attack("fds")

    def test_3_local_only_memory(self):
        """GetMr of a LOCAL-only MR, of memory no receive points into, of guessed keys."""
        self.attack("local-mr")

    def test_4_read_only_for_writing(self):
        """A read-only grant mapped writable, mprotect'ed, reopened through /proc."""
        self.attack("read-only")

    def test_5_write_beyond_an_mr(self):
        """Writes past the pages of a granted MR, growing or sealing its backing."""
        self.attack("beyond")

    def test_6_deregistered_memory(self):
        """A mapping kept across ibv_dereg_mr no longer reaches the owner's memory."""
        self.attack("dereg")

    def test_7_forged_completions(self):
        """Receive completions pushed with indices never posted, repeated, garbage."""
        self.attack("forge")

    def test_8_corrupt_ring_indices(self):
        """The receive queue's and the completion ring's indices scribbled on: nothing hangs."""
        self.attack("corrupt")

    def test_9_truncated_memfd_to_vrdmad(self):
        """Files that could shrink under a mapping handed to vrdmad: refused, vrdmad lives."""
        self.attack("truncated")


if __name__ == "__main__":
    unittest.main()
