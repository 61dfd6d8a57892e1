"""The evaluation suite's outputs (vrdma bench): headline ratios and derived CPU
figures computed from the measured records, results.json, report.md and (through
bench_plots) the PNG plots.

Ratio convention everywhere: > 1 means vrdma is better (throughput: vrdma /
baseline; latency, CPU and memory: baseline / vrdma)."""

import json
import math
import os
import traceback

from . import bench_clients, bench_fairness

KIB, MIB = 1 << 10, 1 << 20
REF_BW_SIZE = 64 * KIB
REF_LAT_SIZE = 8

# Display names of the transports measured.
NAMES = {
    "vrdma_write": "vrdma WRITE", "vrdma_read": "vrdma READ", "vrdma_send": "vrdma SEND",
    "memcpy": "memcpy", "ucx_posix": "UCX shm", "ucx_tcp": "UCX tcp", "tcp": "TCP",
}
PLOT_FILES = ["throughput.png", "latency.png", "cpu.png", "scalability.png", "memory.png"]


def human_size(n):
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def ok(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class Missing(Exception):
    pass


def records(results, *path):
    node = results.get("sections", {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def record_at(results, path, size=None, key="size"):
    """The record of `path` (a list of records, one per size) for `size`; raises Missing
    with the recorded error if it failed."""
    node = records(results, *path)
    if node is None:
        raise Missing(f"{'/'.join(path)} was not measured")
    if isinstance(node, dict):
        node = [node]
    for rec in node:
        if size is None or rec.get(key) == size:
            if "error" in rec:
                raise Missing(rec["error"].splitlines()[0])
            return rec
    raise Missing(f"{'/'.join(path)} has no entry for {key} {size}")


# ---- headline ----------------------------------------------------------------------

def _ratio_entry(title, v_what, v_path, b_what, b_path, field, unit, better, results,
                 v_size=None, b_size=None, v_field=None, b_field=None):
    entry = {"title": title, "vrdma": v_what, "baseline": b_what, "unit": unit,
             "better": better}
    try:
        v = record_at(results, v_path, v_size)[v_field or field]
        b = record_at(results, b_path, b_size)[b_field or field]
        if not ok(v) or not ok(b) or v <= 0 or b <= 0:
            raise Missing("no usable value")
        entry.update({"vrdma_value": v, "baseline_value": b,
                      "ratio": v / b if better == "higher" else b / v})
    except Missing as e:
        entry["error"] = str(e)
    return entry


def headline(results):
    H = []
    bw, lat = REF_BW_SIZE, REF_LAT_SIZE
    hs_bw, hs_lat = human_size(bw), human_size(lat)
    for topo, where in (("same_host", "Same host"), ("cross_host", "Across hosts")):
        v = ("throughput", topo, "vrdma_write")
        bases = [("memcpy", ("memcpy", "results"), "memcpy")] if topo == "same_host" else []
        if topo == "same_host":
            bases.append(("ucx_posix", ("throughput", topo, "ucx_posix"), "UCX shm tag_bw"))
        bases += [("ucx_tcp", ("throughput", topo, "ucx_tcp"), "UCX tcp tag_bw"),
                  ("tcp", ("throughput", topo, "tcp"), "TCP iperf3")]
        for key, path, what in bases:
            e = _ratio_entry(f"{where}: throughput {hs_bw}, vs {NAMES[key]}",
                             f"ib_write_bw {hs_bw}", v, f"{what} {hs_bw}", path, "mb_s", "MB/s",
                             "higher", results, bw, bw)
            e["id"] = f"{topo}_throughput_vs_{key}"
            H.append(e)
        v = ("latency", topo, "vrdma_send")
        bases = [("ucx_posix", "UCX shm tag_lat")] if topo == "same_host" else []
        bases += [("ucx_tcp", "UCX tcp tag_lat"), ("tcp", "TCP sockperf")]
        for key, what in bases:
            e = _ratio_entry(f"{where}: latency p50 {hs_lat}, vs {NAMES[key]}",
                             f"ib_send_lat {hs_lat}", v,
                             f"{what} {hs_lat}" + (" (14 B)" if key == "tcp" else ""),
                             ("latency", topo, key), "p50_us", "us", "lower", results, lat, lat)
            e["id"] = f"{topo}_latency_p50_vs_{key}"
            H.append(e)
        e = _ratio_entry(f"{where}: latency p99.9 {hs_lat}, vs TCP", f"ib_send_lat {hs_lat}", v,
                         f"TCP sockperf {hs_lat} (14 B)", ("latency", topo, "tcp"), "p999_us",
                         "us", "lower", results, lat, lat)
        e["id"] = f"{topo}_latency_p999_vs_tcp"
        H.append(e)
        e = _ratio_entry(f"{where}: CPU-seconds per GB at {hs_bw}, vs TCP",
                         f"ib_write_bw {hs_bw}", ("throughput", topo, "vrdma_write"),
                         f"TCP iperf3 {hs_bw}", ("throughput", topo, "tcp"), "cpu_s_per_gb",
                         "CPU-s/GB", "lower", results, bw, bw)
        e["id"] = f"{topo}_cpu_per_gb_vs_tcp"
        H.append(e)
    # What encrypting the links between routers costs.
    sec = router_security(results) or {}
    n_pairs = sec.get("pairs") or "?"
    for key, title, unit, what in (
            ("write_bw_mb_s", f"Across hosts: throughput {hs_bw}, TLS vs plaintext routers",
             "MB/s", f"ib_write_bw {hs_bw}"),
            ("write_lat_p50_us", f"Across hosts: latency p50 {hs_lat}, TLS vs plaintext routers",
             "us", f"ib_write_lat {hs_lat}"),
            ("pairs_bw_aggregate_mb_s",
             f"Across hosts: aggregate throughput of {n_pairs} pairs, TLS vs plaintext routers",
             "MB/s", f"{n_pairs} pairs ib_write_bw {hs_bw}")):
        e = sec.get(key, {})
        entry = {"id": f"cross_host_tls_{key}", "title": title, "unit": unit,
                 "better": "higher" if unit == "MB/s" else "lower",
                 "vrdma": f"{what}, TLS", "baseline": f"{what}, plaintext"}
        if ok(e.get("ratio")):
            entry.update({"vrdma_value": e["tls"], "baseline_value": e["plaintext"],
                          "ratio": e["ratio"]})
        else:
            entry["error"] = "not measured (see router_security)"
        H.append(entry)
    # Registration: ibv_reg_mr + ibv_dereg_mr of 8 MiB against the first touch of as many pages.
    reg_size = 8 * MIB
    e = _ratio_entry(f"Registration of {human_size(reg_size)}, vs first touch of its pages",
                     "ibv_reg_mr + ibv_dereg_mr", ("registration", "results"),
                     "first touch of as many fresh pages", ("registration", "results"),
                     None, "us", "lower", results, reg_size, reg_size, "reg_dereg_us",
                     "first_touch_us")
    e["id"] = "registration_vs_first_touch"
    H.append(e)
    # Memory: absolute figures (no baseline runs a daemon).
    for key, title, field in (
            ("per_container", "vrdmad memory per container (its private memory's growth)",
             "vrdmad_kib_per_container"),
            ("per_container", "Shared memory per container (the program's memfds)",
             "shared_kib_per_container")):
        entry = {"id": f"memory_{field}", "title": title, "unit": "KiB"}
        try:
            entry["value"] = record_at(results, ("memory", key))[field]
        except Missing as e:
            entry["error"] = str(e)
        H.append(entry)
    # Scalability: the largest pair count against one pair.
    for topo, where in (("same_host", "same host"), ("cross_host", "across hosts")):
        entry = {"id": f"{topo}_pairs_scaling", "unit": "MB/s", "better": "higher"}
        node = records(results, "scalability", "pairs_bw", topo) or []
        good = [r for r in node if "error" not in r]
        most = max((r["pairs"] for r in node), default=None)
        entry["title"] = f"Aggregate throughput {where}, {most or '?'} pairs vs 1 pair"
        try:
            one = record_at(results, ("scalability", "pairs_bw", topo), 1, key="pairs")
            top = record_at(results, ("scalability", "pairs_bw", topo), most, key="pairs")
            entry.update({"pairs": most, "vrdma_value": top["aggregate_mb_s"],
                          "baseline_value": one["aggregate_mb_s"],
                          "ratio": top["aggregate_mb_s"] / one["aggregate_mb_s"],
                          "vrdma": f"{most} pairs", "baseline": "1 pair"})
        except (Missing, ZeroDivisionError, TypeError) as e:
            entry["error"] = str(e) if good or not node else node[-1]["error"].splitlines()[0]
        H.append(entry)
    # Pairs across hosts against as many iperf3 pairs between the same containers; and the
    # plaintext routers' pairs of the same count (router_security): what the routers' scaling
    # reaches when the links do not encrypt.
    tcp = [r for r in records(results, "scalability", "pairs_tcp", "cross_host") or []
           if "error" not in r]
    plain = (sec.get("pairs_bw_aggregate_mb_s") or {}).get("plaintext")

    def routed(p):
        return record_at(results, ("scalability", "pairs_bw", "cross_host"), p,
                         key="pairs")["aggregate_mb_s"]

    def plaintext():
        if not ok(plain):
            raise Missing("not measured (see router_security and scalability)")
        return plain

    for r in tcp:
        p = r["pairs"]
        H.append(_pairs_vs_tcp(r, f"cross_host_pairs{p}_vs_tcp", "",
                               f"{p} pairs ib_write_bw {hs_bw}", hs_bw, lambda p=p: routed(p)))
        if p == sec.get("pairs"):
            H.append(_pairs_vs_tcp(r, f"cross_host_plaintext_pairs{p}_vs_tcp",
                                   "plaintext routers, ",
                                   f"{p} pairs ib_write_bw {hs_bw}, --router-plaintext", hs_bw,
                                   plaintext))
    return H


def _pairs_vs_tcp(tcp, id_, routers, vrdma_label, hs_bw, value):
    """A headline entry: the aggregate of tcp["pairs"] routed pairs (`value()`, which raises
    when it was not measured) against as many iperf3 pairs (`tcp`, a pairs_tcp record)."""
    p = tcp["pairs"]
    entry = {"id": id_, "unit": "MB/s", "better": "higher",
             "title": f"Across hosts: aggregate throughput of {p} pairs, {routers}vs TCP",
             "vrdma": vrdma_label, "baseline": f"{p} pairs TCP iperf3 {hs_bw}"}
    try:
        v = value()
        entry.update({"vrdma_value": v, "baseline_value": tcp["aggregate_mb_s"],
                      "ratio": v / tcp["aggregate_mb_s"]})
    except (Missing, ZeroDivisionError, TypeError, KeyError) as e:
        entry["error"] = str(e)
    return entry


def _median(values):
    values = sorted(v for v in values if ok(v))
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def router_security(results):
    """TLS between routers against plaintext: the median of each mode's runs, and their
    ratio (throughput: TLS ÷ plaintext; latency: plaintext ÷ TLS; < 1: TLS costs)."""
    node = results.get("sections", {}).get("router_security")
    if not isinstance(node, dict):
        return None
    out = {}
    for key, field, better in (("write_bw", "mb_s", "higher"), ("write_lat", "p50_us", "lower"),
                               ("write_lat", "p99_us", "lower"),
                               ("pairs_bw", "aggregate_mb_s", "higher")):
        vals = {}
        for mode in ("tls", "plaintext"):
            recs = [r for r in node.get(mode, {}).get(key, []) if isinstance(r, dict)
                    and "error" not in r]
            vals[mode] = _median(r.get(field) for r in recs)
        entry = {"tls": vals["tls"], "plaintext": vals["plaintext"],
                 "ratio": _ratio(vals["tls"], vals["plaintext"], better)}
        out[f"{key}_{field}"] = entry
    out["pairs"] = max((r.get("pairs", 0) for m in ("tls", "plaintext")
                        for r in node.get(m, {}).get("pairs_bw", []) if isinstance(r, dict)),
                       default=None)
    out["ktls"] = any("ktls" in r.get("link_security", [])
                      for r in node.get("tls", {}).get("write_bw", []) if isinstance(r, dict))
    return out


def derive_cpu(results):
    """CPU per GB and per million messages of every transport at the reference sizes,
    taken from the throughput records (which carry each run's CPU)."""
    cpu = results["sections"].setdefault("cpu", {})
    for name, field, size in (("per_gb", "cpu_s_per_gb", REF_BW_SIZE),
                              ("per_million_messages", "cpu_s_per_mmsg", REF_LAT_SIZE)):
        out = {"size": size}
        for topo in ("same_host", "cross_host"):
            row = {}
            for key in ("vrdma_write", "vrdma_read", "vrdma_send", "ucx_posix", "ucx_tcp", "tcp"):
                if records(results, "throughput", topo, key) is None:
                    continue
                try:
                    row[key] = record_at(results, ("throughput", topo, key), size)[field]
                except Missing as e:
                    row[key] = {"error": str(e)}
            out[topo] = row
        cpu[name] = out


def section_status(node):
    """ok / partial / error from the records under a section."""
    good = bad = 0

    def walk(x):
        nonlocal good, bad
        if isinstance(x, dict):
            if "error" in x:
                bad += 1
                return
            if any(ok(v) for v in x.values()):
                good += 1
            for v in x.values():
                if isinstance(v, (dict, list)):
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(node)
    if bad == 0 and good > 0:
        return "ok"
    return "error" if good == 0 else "partial"


# ---- Markdown ----------------------------------------------------------------------

def fmt(x, digits=3):
    if not ok(x):
        return "–"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}".replace(",", " ")
    if a >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def short(err, n=110):
    """The first line of an error, cut for a table cell."""
    line = (err or "").strip().splitlines()[0] if (err or "").strip() else "failed"
    line = line.replace("|", "/")
    return line if len(line) <= n else line[:n - 1] + "…"


def ratio_text(x):
    return f"**{x:.2f}x**" if ok(x) else "–"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def _value(results, path, size, field, key="size"):
    try:
        return record_at(results, path, size, key)[field]
    except (Missing, KeyError):
        return None


def _ratio(v, b, better):
    if not ok(v) or not ok(b) or v <= 0 or b <= 0:
        return None
    return v / b if better == "higher" else b / v


def report_md(results, plots):
    L = []
    mach = results.get("machine", {})
    cfg = results.get("config", {})
    sw = mach.get("software", {})
    L.append(f"# vrdma evaluation ({results.get('mode')} run)")
    L.append("")
    L.append(f"{results.get('started_at', '?')} → {results.get('finished_at', '?')}, "
             f"{results.get('wall_s', '?')} s. Machine: {mach.get('cpu_model', '?')}, "
             f"{mach.get('usable_cpus', '?')} CPUs, {round((mach.get('memory_kib') or 0) / MIB)} "
             f"GiB, {mach.get('os', '?')}, kernel {mach.get('kernel', '?')} "
             f"({mach.get('virtualization', '?')}); load average at start "
             f"{', '.join(f'{x:.2f}' for x in mach.get('load_average_at_start', []))}. "
             f"vrdma {sw.get('vrdma') or '?'} {sw.get('vrdma_git') or ''}, perftest "
             f"{sw.get('perftest') or '?'}, UCX {sw.get('ucx-utils') or '?'}, iperf3 "
             f"{sw.get('iperf3') or '?'}, sockperf {sw.get('sockperf') or '?'}.")
    L.append("")
    sb = cfg.get("sandbox", {})
    L.append(f"Sandbox: {sb.get('hosts')} hosts × {sb.get('containers_per_host')} containers "
             "(network namespaces, one vrdmad per host). Same host: h0c0 (server) ↔ h0c1; "
             "across hosts: h1c0 (server) ↔ h0c0. Each figure is one run (no repetition); this "
             "machine is shared and noisy, so compare figures of the same run only.")
    L.append("")
    L.append("**Ratio convention: > 1 means vrdma is better** (throughput: vrdma ÷ baseline; "
             "latency, CPU: baseline ÷ vrdma). MB/s and GB/s are 10^6 and 10^9 bytes/s.")
    if results.get("interrupted"):
        L.append(f"\n**This run was interrupted ({results['interrupted']}); figures are "
                 "missing.**")
    if results.get("fatal_error"):
        L.append(f"\n**The run failed: {results['fatal_error']}**")
    xh = results.get("cross_host_rdma", {})
    if xh and not xh.get("available"):
        L.append(f"\n**Cross-host RDMA was not measured: {xh.get('reason')}.** "
                 "Cross-host baselines were.")

    L.append("\n## Headline\n")
    rows = []
    for h in results.get("headline", []):
        if "value" in h or ("error" in h and "better" not in h):
            rows.append([h["title"], f"{fmt(h.get('value'))} {h['unit']}" if "value" in h
                         else "error: " + short(h["error"]), "", ""])
            continue
        if "error" in h:
            rows.append([h["title"], h.get("vrdma", ""), h.get("baseline", ""),
                         "error: " + short(h["error"])])
            continue
        rows.append([h["title"], f"{h['vrdma']}: {fmt(h['vrdma_value'])} {h['unit']}",
                     f"{h['baseline']}: {fmt(h['baseline_value'])} {h['unit']}",
                     ratio_text(h["ratio"])])
    L.append(table(["Comparison", "vrdma", "Baseline", "Ratio (>1: vrdma better)"], rows))

    sizes = cfg.get("sizes", [])
    for topo, where in (("same_host", "same host"), ("cross_host", "across hosts")):
        same = topo == "same_host"
        tp = ("throughput", topo)
        L.append(f"\n## Throughput and message rate, {where}\n")
        L.append("GB/s (10^9 bytes/s) by message size; perftest's ib_write_bw, ib_read_bw, "
                 "ib_send_bw; ucx_perftest tag_bw; iperf3 with writes of the size (at most "
                 "1 MiB). Ratios: vrdma WRITE ÷ baseline.\n")
        bases = (["memcpy", "ucx_posix"] if same else []) + ["ucx_tcp", "tcp"]
        head = ["Size", "WRITE", "READ", "SEND"] + [NAMES[b] for b in bases] + \
            [f"WRITE÷{NAMES[b]}" for b in bases]
        rows = []
        for s in sizes:
            w = _value(results, tp + ("vrdma_write",), s, "mb_s")
            row = [human_size(s)] + [fmt((_value(results, tp + (k,), s, "mb_s") or math.nan) / 1e3)
                                     for k in ("vrdma_write", "vrdma_read", "vrdma_send")]
            bv = []
            for b in bases:
                path = ("memcpy", "results") if b == "memcpy" else tp + (b,)
                bv.append(_value(results, path, s, "mb_s"))
            row += [fmt((x or math.nan) / 1e3) for x in bv]
            row += [ratio_text(_ratio(w, x, "higher")) for x in bv]
            rows.append(row)
        L.append(table(head, rows))
        L.append("\nMessage rate (millions of messages per second); ratios: vrdma SEND ÷ "
                 "baseline (both two-sided).\n")
        bases2 = (["ucx_posix"] if same else []) + ["ucx_tcp", "tcp"]
        head = ["Size", "WRITE", "READ", "SEND"] + [NAMES[b] for b in bases2] + \
            [f"SEND÷{NAMES[b]}" for b in bases2]
        rows = []
        for s in sizes:
            sv = _value(results, tp + ("vrdma_send",), s, "mmsg_s")
            row = [human_size(s)] + [fmt(_value(results, tp + (k,), s, "mmsg_s"))
                                     for k in ("vrdma_write", "vrdma_read", "vrdma_send")]
            bv = [_value(results, tp + (b,), s, "mmsg_s") for b in bases2]
            row += [fmt(x) for x in bv] + [ratio_text(_ratio(sv, x, "higher")) for x in bv]
            rows.append(row)
        L.append(table(head, rows))

        lp = ("latency", topo)
        L.append(f"\n## Latency, {where}\n")
        L.append("Microseconds, p50 / p99 / p99.9 (ib_write_lat, ib_send_lat and sockperf: "
                 "half the round trip; ib_read_lat: the whole READ). ucx_perftest reports its "
                 "typical (median) latency only. sockperf sends 14 to 65507 bytes: 8 B is "
                 "measured with 14 B, larger sizes are not measured. Ratios: baseline p50 ÷ "
                 "vrdma SEND p50, and TCP p99.9 ÷ vrdma SEND p99.9.\n")
        ubases = (["ucx_posix"] if same else []) + ["ucx_tcp"]
        head = ["Size", "WRITE", "READ", "SEND"] + [NAMES[b] + " p50" for b in ubases] + \
            ["TCP"] + [f"{NAMES[b]}÷SEND" for b in ubases] + ["TCP÷SEND p50", "TCP÷SEND p99.9"]
        rows = []

        def trio(path, s):
            try:
                r = record_at(results, path, s)
            except Missing:
                return "–"
            if r.get("p99_us") is None:
                return fmt(r.get("p50_us"))
            return f"{fmt(r['p50_us'])} / {fmt(r['p99_us'])} / {fmt(r['p999_us'])}"

        for s in sizes:
            sp50 = _value(results, lp + ("vrdma_send",), s, "p50_us")
            sp999 = _value(results, lp + ("vrdma_send",), s, "p999_us")
            tcp_ok = s <= 65507
            row = [human_size(s)] + [trio(lp + (k,), s) for k in
                                     ("vrdma_write", "vrdma_read", "vrdma_send")]
            uv = [_value(results, lp + (b,), s, "p50_us") for b in ubases]
            row += [fmt(x) for x in uv]
            row.append(trio(lp + ("tcp",), s) if tcp_ok else "not measured")
            row += [ratio_text(_ratio(sp50, x, "lower")) for x in uv]
            t50 = _value(results, lp + ("tcp",), s, "p50_us") if tcp_ok else None
            t999 = _value(results, lp + ("tcp",), s, "p999_us") if tcp_ok else None
            row += [ratio_text(_ratio(sp50, t50, "lower")),
                    ratio_text(_ratio(sp999, t999, "lower"))]
            rows.append(row)
        L.append(table(head, rows))

    L.append("\n## CPU\n")
    cpu = records(results, "cpu") or {}
    idle = cpu.get("idle", {})
    if "error" in idle:
        L.append(f"vrdmad while idle: error: {idle['error']}")
    elif idle:
        L.append(f"vrdmad while idle (no programs): {fmt(idle.get('vrdmad_cpu_s'))} CPU-s in "
                 f"{fmt(idle.get('seconds'))} s for {len(idle.get('daemons', []))} daemons "
                 f"({fmt(idle.get('vrdmad_cpu_percent'))} % of a CPU each).")
    iwc = cpu.get("idle_with_clients")
    if iwc:
        L.append(f"\nWith {iwc['programs']} connected, idle programs: vrdmad "
                 f"{fmt(iwc['vrdmad_cpu_s'])} CPU-s, the programs {fmt(iwc['programs_cpu_s'])} "
                 f"CPU-s in {fmt(iwc['seconds'])} s.")
    # The short run the perftest figures at the headline sizes are net of (perftest_bw, net_of).
    net_of = next((r["cpu_net_of"] for topo in ("same_host", "cross_host")
                   for key in ("vrdma_write", "vrdma_read", "vrdma_send")
                   for r in records(results, "throughput", topo, key) or []
                   if isinstance(r, dict) and "cpu_net_of" in r), None)
    net_text = (f" At {human_size(REF_LAT_SIZE)} and {human_size(REF_BW_SIZE)} the perftest "
                f"figures are net of what a {net_of}-iteration run of the same program spends "
                "after that line (perftest busy-loops 0.2 s calibrating its clock before it "
                "reports): the transfer's own CPU." if net_of else "")
    L.append("\nCPU-seconds of every process involved (both programs and every vrdmad) per GB "
             "moved and per million messages, by message size, from the throughput runs: for "
             "perftest and ucx_perftest from the line they print when their setup is done to "
             "their exit, for iperf3 the whole run (its setup is one TCP connection)."
             f"{net_text} perftest and ucx_perftest poll, so each keeps a CPU busy while it "
             "runs. Ratio: TCP ÷ vrdma WRITE.\n")
    for topo, where in (("same_host", "same host"), ("cross_host", "across hosts")):
        keys = ["vrdma_write", "vrdma_read", "vrdma_send"] + \
            (["ucx_posix"] if topo == "same_host" else []) + ["ucx_tcp", "tcp"]
        head = ["Size"] + [NAMES[k] for k in keys] + ["TCP÷WRITE"]
        rows = []
        for s in sizes:
            vals = [_value(results, ("throughput", topo, k), s, "cpu_s_per_gb") for k in keys]
            rows.append([human_size(s)] + [fmt(v) for v in vals] +
                        [ratio_text(_ratio(vals[0], vals[-1], "lower"))])
        L.append(f"CPU-s per GB, {where}:\n")
        L.append(table(head, rows))
        L.append("")
        rows = []
        for s in sizes:
            vals = [_value(results, ("throughput", topo, k), s, "cpu_s_per_mmsg") for k in keys]
            rows.append([human_size(s)] + [fmt(v) for v in vals] +
                        [ratio_text(_ratio(vals[0], vals[-1], "lower"))])
        L.append(f"CPU-s per million messages, {where}:\n")
        L.append(table(head, rows))
        L.append("")

    L.append("\n## Memory\n")
    mem = records(results, "memory") or {}
    rows = []
    base = mem.get("daemon_baseline", {})
    if "error" in base:
        rows.append(["vrdmad, no clients", "error: " + short(base["error"]), "", "", "",
                     ""])
    elif base:
        rows.append(["vrdmad with no clients (absolute)", fmt(base.get("rss_anon_kib")),
                     fmt(base.get("rss_kib")), fmt(base.get("fds")), "–", "–"])
    for key, what in (("per_container", "per container"), ("per_qp", "per QP"),
                      ("per_mr", "per MR (4 KiB)")):
        r = mem.get(key, {})
        if not r:
            continue
        if "error" in r:
            rows.append([what, "error: " + short(r["error"]), "", "", "", ""])
            continue
        if key == "per_container":
            rows.append([f"{what} ({r.get('programs')} containers, one idle program each; "
                         f"resolution {fmt(r.get('resolution_kib'))} KiB)",
                         fmt(r.get("vrdmad_kib_per_container")),
                         fmt(r.get("vrdmad_rss_kib_per_container")),
                         fmt(r.get("vrdmad_fds_per_container")),
                         fmt(r.get("shared_kib_per_container")),
                         fmt(r.get("program_private_kib")) + " (whole program)"])
        else:
            rows.append([f"{what} ({r.get('items')} in one program)",
                         fmt(r.get("vrdmad_kib_per_item")), fmt(r.get("vrdmad_rss_kib_per_item")),
                         fmt(r.get("vrdmad_fds_per_item")), fmt(r.get("shared_kib_per_item")),
                         fmt(r.get("program_private_kib_per_item"))])
    L.append(table(["What", "vrdmad private KiB (RssAnon)", "vrdmad RSS KiB", "vrdmad fds",
                    "Program shared memory KiB (memfds)", "Program private KiB (RssAnon)"], rows))
    L.append("\nGrowth divided by the count, measured while the programs (vrdma-bench-conn "
             "hold) keep their device, QPs or MRs open. vrdmad's RSS also counts code pages "
             "touched for the first time and the arena pages it maps (the programs' shared "
             "memory), so its private memory is the figure that grows with containers. Shared "
             "memory is what the program's memfds hold (allocated pages; the arena is sparse). "
             "An MR's own pages move into a memfd, so 4 KiB of each MR's shared memory is the "
             "registered buffer itself.")

    L.append("\n## Scalability\n")
    for topo, where in (("same_host", "same host (pair k: h0c2k ↔ h0c2k+1)"),
                        ("cross_host", "across hosts (pair k: h1ck ↔ h0ck)")):
        bw = records(results, "scalability", "pairs_bw", topo) or []
        lat = {r.get("pairs"): r for r in records(results, "scalability", "pairs_lat", topo) or []}
        L.append(f"Container pairs running at once, {where}: ib_write_bw 64 KiB (duration mode, "
                 "sum of the pairs' averages) and ib_write_lat 8 B.\n")
        rows = []
        one = None
        for r in bw:
            p = r.get("pairs")
            lr = lat.get(p, {})
            if "error" in r:
                cells = ["error: " + short(r["error"]), "", ""]
            else:
                one = one or (r["aggregate_mb_s"] if p == 1 else None)
                cells = [fmt(r["aggregate_mb_s"] / 1e3),
                         f"{fmt(r['per_pair_mb_s_min'] / 1e3)} – "
                         f"{fmt(r['per_pair_mb_s_max'] / 1e3)}",
                         ratio_text(r["aggregate_mb_s"] / one) if one else "–"]
            if "error" in lr or not lr:
                cells += ["error: " + short(lr["error"]) if lr else "–", ""]
            else:
                cells += [fmt(lr["p50_us_median"]), fmt(lr["p99_us_max"])]
            rows.append([p] + cells)
        L.append(table(["Pairs", "Aggregate GB/s", "Per pair GB/s (min – max)", "vs 1 pair",
                        "p50 µs (median of pairs)", "p99 µs (worst pair)"], rows))
        for t in records(results, "scalability", "pairs_tcp", topo) or []:
            if "error" in t:
                L.append(f"\nTCP (iperf3) pairs: error: {short(t['error'])}")
                continue
            v = next((r for r in bw if r.get("pairs") == t["pairs"] and "error" not in r), None)
            vs = (f"; vrdma's {t['pairs']} pairs: "
                  f"{ratio_text(v['aggregate_mb_s'] / t['aggregate_mb_s'])}") if v else ""
            L.append(f"\n{t['pairs']} TCP pairs (iperf3, 64 KiB writes) between the same "
                     f"containers at once: {fmt(t['aggregate_mb_s'] / 1e3)} GB/s aggregate "
                     f"({fmt(t['per_pair_mb_s_min'] / 1e3)} – "
                     f"{fmt(t['per_pair_mb_s_max'] / 1e3)} per pair){vs}.")
        L.append("")
    L.append("QPs between one pair of containers (ib_write_bw -q N, 4 KiB messages):\n")
    rows = []
    for topo, where in (("same_host", "same host"), ("cross_host", "across hosts")):
        for r in records(results, "scalability", "qps", topo) or []:
            if "error" in r:
                rows.append([where, r.get("qps"), "error: " + short(r["error"]), "", ""])
            else:
                rows.append([where, r["qps"], fmt(r["mb_s"] / 1e3), fmt(r["mmsg_s"]),
                             fmt(r["total_wall_s"])])
    L.append(table(["Where", "QPs", "GB/s", "Mmsg/s", "Run incl. setup, s"], rows))
    L.append("\nConnection setup rate (connections per second; verbs: RC QPs created and moved "
             "to RTS on both sides, QPNs exchanged over TCP, each then proven with an RDMA "
             "WRITE; rdma_cm: resolve, connect and accept one connection after another):\n")
    rows = []
    for kind in ("verbs", "rdma_cm"):
        for topo, where in (("same_host", "same host"), ("cross_host", "across hosts")):
            r = records(results, "scalability", "setup_rate", kind, topo)
            if not r:
                continue
            if "error" in r:
                rows.append([kind, where, r.get("count"), "error: " + short(r["error"])])
            else:
                rows.append([kind, where, r.get("count"), fmt(r["per_second"])])
    L.append(table(["Through", "Where", "Connections", "Per second"], rows))

    sec = router_security(results)
    if sec is not None:
        node = results["sections"]["router_security"]
        runs = max(len(node.get(m, {}).get("write_bw", [])) for m in ("tls", "plaintext"))
        L.append("\n## Encryption between routers\n")
        L.append(f"The routed path across hosts (h1c0 ↔ h0c0; vrdmad `--no-direct-path`, as an "
                 f"operator who wants TLS between hosts sets): routers linked over mutual TLS 1.3 "
                 f"against --router-plaintext, each mode in a two-host sandbox of its own, alternating "
                 f"({runs} run(s) each; the median). Kernel TLS: "
                 f"{'used' if sec['ktls'] else 'not offered here (TLS in user space)'}"
                 ". Ratio: TLS ÷ plaintext for throughput, plaintext ÷ TLS for latency (< 1: what "
                 "TLS costs).\n")
        rows = []
        for key, what, unit in (("write_bw_mb_s", f"ib_write_bw {human_size(REF_BW_SIZE)}",
                                 "MB/s"),
                                ("write_lat_p50_us", f"ib_write_lat {human_size(REF_LAT_SIZE)} p50",
                                 "us"),
                                ("write_lat_p99_us", f"ib_write_lat {human_size(REF_LAT_SIZE)} p99",
                                 "us"),
                                ("pairs_bw_aggregate_mb_s",
                                 f"{sec['pairs'] or '?'} pairs ib_write_bw "
                                 f"{human_size(REF_BW_SIZE)} at once, aggregate", "MB/s")):
            e = sec[key]
            rows.append([what, f"{fmt(e['tls'])} {unit}", f"{fmt(e['plaintext'])} {unit}",
                         ratio_text(e["ratio"])])
        L.append(table(["Measure", "TLS", "Plaintext", "Ratio"], rows))

    fair = records(results, "qos", "fairness")
    if fair:
        L.append("\n## Quality of service: sharing one link between hosts\n")
        L.append("The routed path (vrdmad `--no-direct-path`, the last sandbox of the encryption "
                 "runs), where vrdmad enforces QoS: four senders in containers of h0 "
                 "(`ib_write_bw -D`, 64 KiB) to receivers on h1, "
                 "all through h0's router on the one link between the two hosts, with rules set "
                 "by `vrdma qos set`; bytes per container from h0's `vrdma status` while all four "
                 "sent (fairness.png: the whole run).\n")
        if "error" in fair:
            L.append(f"Not measured: {short(fair['error'], 300)}")
        else:
            L += bench_fairness.report_md(fair)
    lat = records(results, "qos", "latency_class")
    if lat:
        L.append("")
        if "error" in lat:
            L.append(f"Latency class under bulk not measured: {short(lat['error'], 300)}")
        else:
            L += bench_fairness.latency_md(lat)

    errs = results.get("errors", [])
    if errs:
        L.append(f"\n## Errors ({len(errs)})\n")
        L.append("Steps that failed or were skipped; their figures are absent from the tables "
                 "(results.json has each one's full message).\n")
        groups = {}
        for e in errs:
            groups.setdefault(short(e["error"], 300), []).append(e)
        for msg, es in groups.items():
            if len(es) == 1:
                L.append(f"- {es[0]['part']} — {es[0]['step']}: {msg}")
            else:
                parts = sorted({x["part"] for x in es})
                L.append(f"- {len(es)} steps ({', '.join(parts)}): {msg}")
    L += [""] + bench_clients.report_md(results)
    if plots:
        L.append("\n## Plots\n")
        for p in plots:
            L.append(f"![{p}]({p})")
    if results.get("plots_error"):
        L.append(f"\nPlots failed: {results['plots_error']}")
    return "\n".join(L) + "\n"


# ---- the headline as a page of the documentation ---------------------------------------

# A file holding both markers gets the table between them (the rest of the file is kept);
# any other file is replaced by the table alone.
MARKDOWN_BEGIN = "<!-- vrdma bench --markdown: begin -->"
MARKDOWN_END = "<!-- vrdma bench --markdown: end -->"


def machine_text(mach):
    """'AMD EPYC, 2 CPUs, 7 GiB, Debian GNU/Linux 12 (bookworm), kernel 6.1.0 (kvm)'."""
    cpus = mach.get("usable_cpus") or mach.get("logical_cpus") or "?"
    mem = mach.get("memory_kib")
    parts = [mach.get("cpu_model") or "unknown CPU", f"{cpus} CPUs"]
    if mem:
        parts.append(f"{round(mem / MIB)} GiB")
    parts.append(mach.get("os") or "unknown OS")
    virt = mach.get("virtualization")
    kernel = f"kernel {mach.get('kernel', '?')}"
    parts.append(f"{kernel} ({virt})" if virt and virt != "none" else kernel)
    return ", ".join(parts)


def headline_md(results):
    """The headline table with when, where and how it was measured: what `vrdma bench
    --markdown FILE` writes (docs/performance.md holds one)."""
    mach = results.get("machine", {})
    sw = mach.get("software", {})
    version = (sw.get("vrdma") or "vrdma ?") + (f" (git {sw['vrdma_git']})"
                                                   if sw.get("vrdma_git") else "")
    errs = results.get("errors", [])
    L = [f"Measured {results.get('started_at', '?')} ({results.get('mode', '?')} run, "
         f"{results.get('wall_s', '?')} s) on {machine_text(mach)}; {version}, perftest "
         f"{sw.get('perftest') or '?'}, UCX {sw.get('ucx-utils') or '?'}, iperf3 "
         f"{sw.get('iperf3') or '?'}, sockperf {sw.get('sockperf') or '?'}. "
         f"Command: `{results.get('command') or 'vrdma bench'}`.", ""]
    if results.get("interrupted") or results.get("fatal_error"):
        L += [f"**The run did not finish ({results.get('interrupted') or results['fatal_error']}); "
              "figures are missing.**", ""]
    rows = []
    for h in results.get("headline", []):
        if "value" in h or ("error" in h and "better" not in h):
            value = (f"{fmt(h.get('value'))} {h['unit']}" if "value" in h
                     else "error: " + short(h["error"], 60))
            rows.append([h["title"], value, "", ""])
        elif "error" in h:
            rows.append([h["title"], h.get("vrdma", ""), h.get("baseline", ""),
                         "error: " + short(h["error"], 60)])
        else:
            rows.append([h["title"], f"{h['vrdma']}: {fmt(h['vrdma_value'])} {h['unit']}",
                         f"{h['baseline']}: {fmt(h['baseline_value'])} {h['unit']}",
                         ratio_text(h["ratio"])])
    L.append(table(["Comparison", "vrdma", "Baseline", "Ratio (>1: vrdma better)"], rows))
    L.append("")
    clients = bench_clients.ratios(results)
    if clients:
        rows = []
        for topo, entries in clients.items():
            where = "Same host" if topo == "same_host" else "Across hosts"
            for what, v, x, unit, ratio in entries:
                rows.append([f"{where}: {what}",
                             f"{fmt(v)} {unit}" if ok(v) else "not measured",
                             f"{fmt(x)} {unit}" if ok(x) else "not measured",
                             ratio_text(ratio)])
        L.append("Real clients: UCX 1.13 (ucx_perftest) over vrdma against UCX's own shared memory "
                 "and tcp transports, and Open MPI 4.1 ping-pong with pml ucx over vrdma against "
                 "Open MPI over TCP.")
        L.append("")
        L.append(table(["Comparison", "vrdma", "Baseline", "Ratio (>1: vrdma better)"], rows))
        L.append("")
    L.append("One run of each figure, on a machine shared with other work: compare figures of "
             "the same run only. " + (f"{len(errs)} step(s) of the run failed or were skipped "
                                      "(its report.md lists them)." if errs
                                      else "No step of the run failed."))
    return "\n".join(L) + "\n"


def write_markdown(results, path):
    """Writes headline_md() to `path`: between the markers when the file has both, else as
    the whole file."""
    block = f"{MARKDOWN_BEGIN}\n{headline_md(results)}{MARKDOWN_END}\n"
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = ""
    start, end = old.find(MARKDOWN_BEGIN), old.find(MARKDOWN_END)
    if 0 <= start < end:
        rest = old[end + len(MARKDOWN_END):]
        text = old[:start] + block + (rest[1:] if rest.startswith("\n") else rest)
    else:
        text = block
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _json_safe(x):
    """NaN and infinities become null: results.json stays strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def finish(results, out, plots=True):
    """Computes the derived figures and writes results.json, the plots and report.md."""
    try:
        derive_cpu(results)
    except Exception as e:  # noqa: BLE001 - never lose the measurements
        results["errors"].append({"part": "cpu", "step": "derived figures", "error": str(e)})
    results["headline"] = headline(results)
    for name, node in results.get("sections", {}).items():
        if isinstance(node, dict):
            node["status"] = section_status({k: v for k, v in node.items() if k != "status"})
    path = os.path.join(out, "results.json")

    def dump():
        with open(path + ".tmp", "w") as f:
            json.dump(_json_safe(results), f, indent=1, allow_nan=False)
        os.replace(path + ".tmp", path)

    dump()
    made = []
    if plots:
        try:
            from . import bench_plots
            made = bench_plots.make_all(results, out)
        except Exception as e:  # noqa: BLE001
            results["plots_error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
    results["plots"] = made
    dump()
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(report_md(results, made))
