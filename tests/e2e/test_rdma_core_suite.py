"""rdma-core's own test suite (v44, the tests/ folder of the release vrdma matches), unmodified,
in a sandbox container on one host: `python3 tests/run_tests.py --dev <device> -v`.

The run must end with no failure and no error, and every skip must be accounted for: either
vendor-specific (a test module or reason naming mlx5, EFA, CUDA, VFIO or GPU dma-buf) or listed,
with its reason, in the section "rdma-core test suite: skips" of docs/programs.md, which this
test reads (a skip that matches no pattern there fails the test). The suite is kept beside the clone
(../shared/thirdparty/rdma-core-44-tests, never copied into it); where it is absent, this test
says so and skips.
"""

import os
import re
import sys
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SUITE = os.environ.get("VRDMA_RDMA_CORE_TESTS") or os.path.normpath(
    os.path.join(REPO, "..", "shared", "thirdparty", "rdma-core-44-tests"))
SKIPS_PAGE = os.path.join(REPO, "docs", "programs.md")
SECTION = "rdma-core test suite: skips"

# What a test of another vendor's hardware says, or where it lives.
VENDOR = re.compile(r"\bmlx[45]\b|\bEFA\b|\bCUDA\b|cuda-python|\bVFIO\b|\bdma-?buf\b|\bDevX\b|"
                    r"\bConnectX\b|\bMellanox\b", re.I)
VENDOR_MODULE = re.compile(r"^tests\.test_(mlx5|efa|cuda)")

# "test_x (tests.test_mod.Class.test_x) ... ok" and its variants; a test whose output
# interrupts the line has its verdict on a later line.
LINE = re.compile(r"^(test\w*) \(([\w.]+)\)(?: \.\.\. |\n)")
VERDICT = re.compile(r"(?:\.\.\. |^)(ok|FAIL|ERROR|skipped (['\"])(.*)\2|expected failure|"
                     r"unexpected success)\s*$")


def listed_skips():
    """docs/programs.md's list: (pattern, reason) from lines "- `pattern`: reason" in the
    section."""
    with open(SKIPS_PAGE) as f:
        text = f.read()
    m = re.search(rf"^#+ {re.escape(SECTION)}\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    if not m:
        raise AssertionError(f"docs/programs.md has no '{SECTION}' section")
    entries = re.findall(r"^- `([^`]+)`[:\s]", m.group(1), re.M)
    if not entries:
        raise AssertionError(f"docs/programs.md's '{SECTION}' section lists nothing")
    return [re.compile(e) for e in entries]


def parse(output):
    """[(test id, verdict, skip reason)] from unittest's verbose output, and its summary."""
    results = []
    current = None
    for line in output.splitlines():
        head = LINE.match(line + "\n")
        if head:
            current = f"{head.group(2)}.{head.group(1)}" if not head.group(2).endswith(
                head.group(1)) else head.group(2)
        v = VERDICT.search(line)
        if v and current:
            kind = v.group(1).split(" ")[0]
            reason = v.group(3) if kind == "skipped" else ""
            results.append((current, kind, reason))
            current = None
    ran = re.search(r"^Ran (\d+) tests? in", output, re.M)
    return results, int(ran.group(1)) if ran else -1


@unittest.skipUnless(os.path.isdir(os.path.join(SUITE, "tests")),
                     f"rdma-core's test suite is not at {SUITE} (it is kept beside the clone, "
                     "in ../shared, not in it): this suite only is skipped")
class RdmaCoreSuite(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=1, containers=1)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        cls.sb.down()

    def test_suite_passes_and_every_skip_is_accounted_for(self):
        allowed = listed_skips()
        rc, out, err = self.sb.run("h0c0", "ls", "/sys/class/infiniband", timeout=30)
        self.assertEqual(rc, 0, err)
        dev = out.split()[0]
        rc, out, err = self.sb.run(
            "h0c0", "/usr/bin/python3", os.path.join(SUITE, "tests", "run_tests.py"), "--dev",
            dev, "-v", timeout=1500, env={"PYTHONUNBUFFERED": "1"})
        text = out + "\n" + err
        results, ran = parse(text)
        self.assertGreater(ran, 100, f"the suite did not run:\n{text[-3000:]}")
        counts = {}
        for _, kind, _ in results:
            counts[kind] = counts.get(kind, 0) + 1
        print(f"\nrdma-core tests on {dev}: ran {ran}: " +
              ", ".join(f"{k} {n}" for k, n in sorted(counts.items())), file=sys.stderr)
        self.assertEqual(len(results), ran,
                         f"parsed {len(results)} verdicts of {ran} tests:\n{text[-3000:]}")
        bad = [f"{t}: {k}" for t, k, _ in results if k in ("FAIL", "ERROR", "unexpected")]
        unlisted = []
        for test, kind, reason in results:
            if kind != "skipped":
                continue
            if VENDOR_MODULE.match(test) or VENDOR.search(reason):
                continue
            if not any(p.search(reason) for p in allowed):
                unlisted.append(f"{test}: {reason}")
        for line in sorted({r for _, k, r in results if k == "skipped"}):
            print(f"  skip reason: {line}", file=sys.stderr)
        failures = re.findall(r"^(?:FAIL|ERROR): .*?(?=^(?:FAIL|ERROR): |^Ran |\Z)", text,
                              re.M | re.S)
        self.assertEqual(bad, [], "failures and errors:\n" + "\n".join(failures)[-6000:])
        self.assertEqual(unlisted, [], "skips whose reason docs/programs.md does not list:\n" +
                         "\n".join(unlisted))
        self.assertEqual(rc, 0, text[-3000:])


if __name__ == "__main__":
    unittest.main()
