"""The evaluation suite, `vrdma bench --quick`: one run, then its output is
checked for completeness and validity: every section of results.json holds
numbers (a part that failed shows up here with the error the suite recorded),
report.md has its tables, every plot is a real PNG, and --markdown put the headline table with
the run's date, machine and command between the markers of a page. No timing assertions:
the suite's time budgets are relaxed (--budget-scale) so a slow machine skips
nothing."""

import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import NETNS_PREFIX, VRDMA

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PLOTS = ["throughput.png", "latency.png", "cpu.png", "scalability.png", "memory.png",
         "fairness.png"]
SOCKPERF_MAX = 65507  # sockperf's largest message: TCP latency is measured up to there
OUT = None
RUN = None
RESULTS = None
# The page --markdown writes into: text around the markers stays.
PAGE_BEFORE = "# Figures\n\nBefore the table.\n\n"
PAGE_AFTER = "\nAfter the table.\n"


def setUpModule():
    global OUT, RUN, RESULTS
    OUT = tempfile.mkdtemp(prefix="vrdma-bench-test-")
    env = dict(os.environ)
    env.setdefault("VRDMA_DATADIR", REPO)  # this checkout's suite, not an installed one
    with open(os.path.join(OUT, "page.md"), "w") as f:
        f.write(PAGE_BEFORE + "<!-- vrdma bench --markdown: begin -->\nold table\n"
                "<!-- vrdma bench --markdown: end -->\n" + PAGE_AFTER)
    RUN = subprocess.run([VRDMA, "bench", "--quick", "--budget-scale", "3", "--out", OUT,
                          "--markdown", os.path.join(OUT, "page.md")],
                         capture_output=True, text=True, timeout=360, env=env)
    try:
        with open(os.path.join(OUT, "results.json")) as f:
            RESULTS = json.load(f, parse_constant=_reject_constant)
    except (OSError, ValueError) as e:
        RESULTS = {"_load_error": str(e)}


def tearDownModule():
    if os.environ.get("VRDMA_KEEP_BENCH"):
        print(f"\nvrdma bench output kept in {OUT}")
    else:
        shutil.rmtree(OUT, ignore_errors=True)


def _reject_constant(name):
    raise ValueError(f"results.json holds {name}, which is not JSON")


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def node(*path):
    cur = RESULTS.get("sections", {})
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


class Case(unittest.TestCase):
    def setUp(self):
        self.assertNotIn("_load_error", RESULTS, "results.json is missing or not valid JSON: "
                         f"{RESULTS.get('_load_error')}\n{RUN.stderr[-3000:]}")
        self.problems = []

    def fields(self, where, rec, names, positive=True):
        """Notes a problem unless rec holds each field as a finite (positive) number; a
        record the suite marked as failed is reported with its error."""
        if rec is None:
            self.problems.append(f"{where}: missing")
            return False
        if "error" in rec:
            self.problems.append(f"{where}: error recorded: {rec['error'].splitlines()[0]}")
            return False
        good = True
        for n in names:
            v = rec.get(n)
            if not finite(v) or (positive and v <= 0):
                self.problems.append(f"{where}: {n} = {v!r}")
                good = False
        return good

    def per_size(self, where, records, sizes, names):
        by_size = {r.get("size"): r for r in records or [] if isinstance(r, dict)}
        for s in sizes:
            self.fields(f"{where} {s} B", by_size.get(s), names)

    def done(self):
        if self.problems:
            self.fail(f"{len(self.problems)} problem(s):\n  " + "\n  ".join(self.problems))


class Run(Case):
    def test_exit_status_and_progress(self):
        self.assertEqual(RUN.returncode, 0, RUN.stderr[-3000:])
        self.assertRegex(RUN.stderr, r"\[\s*\d+:\d\d\] 1/\d+ ", "no progress display on stderr")

    def test_sandbox_is_gone(self):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                             timeout=30).stdout
        self.assertNotRegex(out, rf"(?m)^{re.escape(NETNS_PREFIX)}(net|h\d)",
                            "the suite left sandbox namespaces behind")

    def test_help(self):
        p = subprocess.run([VRDMA, "bench", "--help"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "VRDMA_DATADIR": REPO})
        self.assertEqual(p.returncode, 0, p.stderr)
        for opt in ("--quick", "--out", "--budget-scale"):
            self.assertIn(opt, p.stdout)

    def test_machine_and_config(self):
        m = RESULTS.get("machine", {})
        for key in ("hostname", "kernel", "cpu_model", "logical_cpus", "memory_kib", "software"):
            self.assertIn(key, m)
        self.assertTrue(m["software"].get("perftest"), "perftest version missing")
        self.assertEqual(RESULTS.get("mode"), "quick")
        self.assertEqual(RESULTS.get("schema"), "vrdma-bench/1")
        cfg = RESULTS.get("config", {})
        self.assertIn(8, cfg.get("sizes", []))
        self.assertIn(65536, cfg.get("sizes", []))
        for section in ("memcpy", "registration", "throughput", "latency", "cpu", "memory",
                        "scalability", "cross_host_probe"):
            self.assertIn(section, RESULTS.get("sections", {}), f"section {section} missing")
            self.assertIn(RESULTS["sections"][section].get("status"), ("ok", "partial", "error"))


class Sections(Case):
    def sizes(self):
        return RESULTS["config"]["sizes"]

    def test_memcpy(self):
        self.per_size("memcpy", node("memcpy", "results"), self.sizes(), ["mb_s"])
        self.done()

    def test_registration(self):
        self.per_size("registration", node("registration", "results"),
                      RESULTS["config"]["reg_sizes"],
                      ["first_touch_us", "reg_us", "dereg_us", "reg_dereg_us"])
        self.done()

    def throughput(self, topo, keys):
        for key in keys:
            self.per_size(f"throughput/{topo}/{key}", node("throughput", topo, key), self.sizes(),
                          ["mb_s", "mmsg_s", "cpu_s_per_gb", "cpu_s_per_mmsg"])
        # At the headline sizes perftest's CPU figures are net of a short run's: both kept, the
        # net below the gross (perftest's clock calibration alone is 0.2 CPU-s).
        for key in ("vrdma_write", "vrdma_read", "vrdma_send"):
            for r in node("throughput", topo, key) or []:
                if r.get("size") not in (8, 65536) or "error" in r:
                    continue
                where = f"throughput/{topo}/{key} {r['size']}"
                if not self.fields(where, r, ["cpu_s_fixed", "cpu_s_per_gb_gross"]):
                    continue
                if "cpu_net_error" not in r and not r["cpu_s_per_gb"] < r["cpu_s_per_gb_gross"]:
                    self.problems.append(f"{where}: net {r['cpu_s_per_gb']} CPU-s/GB, gross "
                                         f"{r['cpu_s_per_gb_gross']}")
        self.done()

    def test_throughput_same_host(self):
        self.throughput("same_host", ["vrdma_write", "vrdma_read", "vrdma_send", "ucx_posix",
                                      "ucx_tcp", "tcp"])

    def test_throughput_cross_host(self):
        self.throughput("cross_host", ["vrdma_write", "vrdma_read", "vrdma_send", "ucx_tcp",
                                       "tcp"])

    def latency(self, topo, ucx_keys):
        for key in ("vrdma_write", "vrdma_read", "vrdma_send"):
            where = f"latency/{topo}/{key}"
            self.per_size(where, node("latency", topo, key), self.sizes(),
                          ["p50_us", "p99_us", "p999_us"])
            for r in node("latency", topo, key) or []:
                if "error" not in r and not (r["p50_us"] <= r["p99_us"] <= r["p999_us"]):
                    self.problems.append(f"{where} {r['size']} B: percentiles out of order")
        for key in ucx_keys:
            self.per_size(f"latency/{topo}/{key}", node("latency", topo, key), self.sizes(),
                          ["p50_us"])
        self.per_size(f"latency/{topo}/tcp", node("latency", topo, "tcp"),
                      [s for s in self.sizes() if s <= SOCKPERF_MAX],
                      ["p50_us", "p99_us", "p999_us"])
        self.done()

    def test_latency_same_host(self):
        self.latency("same_host", ["ucx_posix", "ucx_tcp"])

    def test_latency_cross_host(self):
        self.latency("cross_host", ["ucx_tcp"])

    def test_qos_fairness(self):
        rec = node("qos", "fairness")
        if self.fields("qos/fairness", rec, ["weight_ratio", "limited_mb_s"]):
            means = rec["mean_mb_s_all_four"]
            self.fields("qos/fairness means", means, ["h0c0", "h0c1", "h0c2", "h0c3"])
            self.assertGreater(len(rec["samples"]), 4)
        self.done()

    def test_cpu(self):
        self.fields("cpu/idle", node("cpu", "idle"), ["vrdmad_cpu_s", "seconds"], positive=False)
        self.fields("cpu/idle_with_clients", node("cpu", "idle_with_clients"),
                    ["vrdmad_cpu_s", "programs_cpu_s"], positive=False)
        for name in ("per_gb", "per_million_messages"):
            for topo in ("same_host", "cross_host"):
                row = node("cpu", name, topo) or {}
                for key in ("vrdma_write", "ucx_tcp", "tcp"):
                    v = row.get(key)
                    if not finite(v) or v <= 0:
                        self.problems.append(f"cpu/{name}/{topo}/{key} = {v!r}")
        self.done()

    def test_memory(self):
        cfg = RESULTS["config"]
        self.fields("memory/daemon_baseline", node("memory", "daemon_baseline"),
                    ["rss_kib", "rss_anon_kib"])
        self.fields("memory/per_container", node("memory", "per_container"),
                    ["shared_kib_per_container"])
        self.fields("memory/per_container", node("memory", "per_container"),
                    ["vrdmad_kib_per_container", "vrdmad_fds_per_container"], positive=False)
        for key, count in (("per_qp", cfg["mem_qps"]), ("per_mr", cfg["mem_mrs"])):
            r = node("memory", key)
            if self.fields(f"memory/{key}", r, ["shared_kib_per_item"]):
                self.fields(f"memory/{key}", r, ["vrdmad_kib_per_item",
                                                  "program_private_kib_per_item"], positive=False)
                self.assertEqual(r["items"], count)
        self.done()

    def scalability(self, topo):
        cfg = RESULTS["config"]
        for what, fields in (("pairs_bw", ["aggregate_mb_s"]),
                             ("pairs_lat", ["p50_us_median", "p99_us_max"])):
            recs = {r.get("pairs"): r for r in node("scalability", what, topo) or []}
            for p in cfg["pairs"]:
                self.fields(f"scalability/{what}/{topo} {p} pairs", recs.get(p), fields)
        if topo == "cross_host":
            recs = {r.get("pairs"): r for r in node("scalability", "pairs_tcp", topo) or []}
            self.assertTrue(cfg["tcp_pairs"])
            for p in cfg["tcp_pairs"]:
                self.fields(f"scalability/pairs_tcp/{topo} {p} pairs", recs.get(p),
                            ["aggregate_mb_s"])
        recs = {r.get("qps"): r for r in node("scalability", "qps", topo) or []}
        self.assertIn(1024, cfg["qps"])
        for q in cfg["qps"]:
            self.fields(f"scalability/qps/{topo} {q} QPs", recs.get(q), ["mb_s", "mmsg_s"])
        for kind in ("verbs", "rdma_cm"):
            self.fields(f"scalability/setup_rate/{kind}/{topo}",
                        node("scalability", "setup_rate", kind, topo), ["per_second"])
        self.done()

    def test_scalability_same_host(self):
        self.scalability("same_host")

    def test_router_security(self):
        """TLS against plaintext routers, across hosts: each mode measured in a sandbox whose
        links were really secured that way."""
        sandboxes = node("router_security", "sandboxes") or []
        self.assertEqual(sorted(x.get("router_security") for x in sandboxes if "error" not in x),
                         ["plaintext", "tls"], sandboxes)
        for mode, want in (("tls", ({"tls"}, {"ktls"})), ("plaintext", ({"plaintext"},))):
            bw = node("router_security", mode, "write_bw") or []
            self.per_size(f"router_security/{mode}/write_bw", bw, [65536], ["mb_s"])
            self.per_size(f"router_security/{mode}/write_lat", node("router_security", mode,
                                                                   "write_lat"), [8], ["p50_us"])
            pairs = node("router_security", mode, "pairs_bw") or []
            if not pairs:
                self.problems.append(f"router_security/{mode}/pairs_bw: missing")
            for r in pairs:
                self.fields(f"router_security/{mode}/pairs_bw", r, ["aggregate_mb_s"])
                if r.get("pairs") != RESULTS["config"]["tls_pairs"]:
                    self.problems.append(f"router_security/{mode}/pairs_bw: {r.get('pairs')} "
                                         f"pairs")
            for r in bw:
                if "error" not in r and set(r.get("link_security", [])) not in want:
                    self.problems.append(f"router_security/{mode}: links were "
                                         f"{r.get('link_security')}")
        self.done()

    def test_scalability_cross_host(self):
        self.scalability("cross_host")

    def test_headline(self):
        ids = set()
        for h in RESULTS.get("headline", []):
            ids.add(h.get("id"))
            if "error" in h:
                self.problems.append(f"headline {h.get('id')}: {h['error']}")
            elif "ratio" in h:
                if not finite(h["ratio"]) or h["ratio"] <= 0:
                    self.problems.append(f"headline {h['id']}: ratio {h['ratio']!r}")
            elif not finite(h.get("value")):
                self.problems.append(f"headline {h.get('id')}: no value")
        for want in ("same_host_throughput_vs_memcpy", "same_host_throughput_vs_ucx_posix",
                     "same_host_throughput_vs_ucx_tcp", "same_host_throughput_vs_tcp",
                     "same_host_latency_p50_vs_ucx_posix", "same_host_latency_p50_vs_tcp",
                     "cross_host_throughput_vs_ucx_tcp", "cross_host_throughput_vs_tcp",
                     "cross_host_latency_p50_vs_ucx_tcp", "cross_host_latency_p50_vs_tcp",
                     "same_host_cpu_per_gb_vs_tcp", "cross_host_cpu_per_gb_vs_tcp",
                     "memory_vrdmad_kib_per_container", "registration_vs_first_touch",
                     "same_host_pairs_scaling",
                     "cross_host_pairs_scaling", "cross_host_tls_write_bw_mb_s",
                     "cross_host_tls_write_lat_p50_us", "cross_host_tls_pairs_bw_aggregate_mb_s",
                     *(f"cross_host_plaintext_pairs{p}_vs_tcp"
                       for p in RESULTS["config"]["tcp_pairs"] if p == RESULTS["config"]["tls_pairs"]),
                     *(f"cross_host_pairs{p}_vs_tcp" for p in RESULTS["config"]["tcp_pairs"])):
            if want not in ids:
                self.problems.append(f"headline {want}: missing")
        self.done()


class Report(Case):
    def test_markdown_page(self):
        with open(os.path.join(OUT, "page.md")) as f:
            text = f.read()
        self.assertTrue(text.startswith(PAGE_BEFORE + "<!-- vrdma bench --markdown: begin -->\n"),
                        text[:300])
        self.assertTrue(text.endswith("<!-- vrdma bench --markdown: end -->\n" + PAGE_AFTER),
                        text[-300:])
        self.assertNotIn("old table", text)
        m = RESULTS["machine"]
        # When, where and how: the run's start, the CPU, its cores, the kernel, the command.
        self.assertIn(f"Measured {RESULTS['started_at']} (quick run", text)
        for fact in (m["cpu_model"], f"{m['usable_cpus']} CPUs", f"kernel {m['kernel']}"):
            self.assertIn(fact, text)
        self.assertRegex(text, r"Command: `vrdma bench --quick --budget-scale 3 --out \S+ "
                               r"--markdown \S+page\.md`")
        self.assertRegex(text, r"\| Comparison \| vrdma \| Baseline \| Ratio")
        self.assertIn("Same host: throughput 64 KiB, vs memcpy", text)
        self.assertRegex(text, r"\*\*\d+\.\d\dx\*\*", "no ratio in the table")
        # Written again from results.json alone (--from), the same table.
        again = os.path.join(OUT, "again.md")
        p = subprocess.run([VRDMA, "bench", "--markdown", again, "--from",
                            os.path.join(OUT, "results.json")], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "VRDMA_DATADIR": REPO})
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(again) as f:
            table = f.read()
        self.assertIn(table, text)

    def test_report_tables(self):
        with open(os.path.join(OUT, "report.md")) as f:
            text = f.read()
        self.assertIn("> 1 means vrdma is better", text)
        head = text.index("## Headline")
        for title in ("## Throughput and message rate, same host",
                      "## Throughput and message rate, across hosts", "## Latency, same host",
                      "## Latency, across hosts", "## CPU", "## Memory", "## Scalability",
                      "## Encryption between routers",
                      "## Quality of service: sharing one link between hosts"):
            self.assertIn(title, text)
            self.assertGreater(text.index(title), head, "the headline must come first")
        self.assertRegex(text, r"\| Comparison \| vrdma \| Baseline \| Ratio")
        self.assertRegex(text, r"\| Size \| WRITE \| READ \| SEND \| memcpy \| UCX shm")
        self.assertRegex(text, r"\*\*\d+\.\d\dx\*\*", "no ratio in the tables")
        for p in PLOTS:
            self.assertIn(f"]({p})", text)
        # Every Markdown table is well formed: same number of cells in each row.
        for block in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
            rows = block.strip().splitlines()
            widths = {r.count(" | ") for r in rows}
            self.assertEqual(len(widths), 1, f"ragged table:\n{block}")

    def test_plots_are_pngs(self):
        for name in PLOTS:
            path = os.path.join(OUT, name)
            with self.subTest(plot=name):
                self.assertTrue(os.path.exists(path), f"{name} missing")
                with open(path, "rb") as f:
                    data = f.read()
                self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", "not a PNG")
                self.assertEqual(data[12:16], b"IHDR")
                width, height = struct.unpack(">II", data[16:24])
                self.assertGreaterEqual(width, 800)
                self.assertGreaterEqual(height, 400)
                self.assertGreater(len(data), 20_000, "suspiciously small (empty plot?)")
                self.assertEqual(data[-8:-4], b"IEND", "truncated PNG")


if __name__ == "__main__":
    unittest.main()
