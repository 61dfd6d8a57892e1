"""PNG plots of the evaluation suite (vrdma bench), one figure per topic:
throughput.png, latency.png, cpu.png, scalability.png, memory.png. A panel
whose data failed says so instead of staying empty."""

import os
import re
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from . import bench_fairness  # noqa: E402
from .bench_report import NAMES, human_size, ok, records  # noqa: E402

STYLE = {
    "vrdma_write": dict(color="#1f5fbf", ls="-", marker="o"),
    "vrdma_read": dict(color="#17a2b8", ls="-", marker="s", mfc="none", lw=1.2),
    "vrdma_send": dict(color="#2a9d3a", ls="-", marker="^"),
    "memcpy": dict(color="#222222", ls=":", marker="."),
    "ucx_posix": dict(color="#e8820c", ls="--", marker="D"),
    "ucx_tcp": dict(color="#c0392b", ls="--", marker="v"),
    "tcp": dict(color="#8e44ad", ls="-.", marker="x"),
}
TOPOS = (("same_host", "same host"), ("cross_host", "across hosts"))
DPI = 110


def _size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    if sizes:
        ax.xaxis.set_major_locator(FixedLocator(sizes))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_size(int(round(v)))))
        ax.set_xlim(min(sizes) / 1.5, max(sizes) * 1.5)
    for lab in ax.get_xticklabels():
        lab.set_rotation(0)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def _missing(ax, title, text):
    """Panel title, with what is missing from the panel in small red letters under it."""
    if not text:
        ax.set_title(title, fontsize=11)
        return
    ax.set_title(title, fontsize=11, pad=16)
    # "h0c0: ib_write_bw -s ... failed (exit 1): why" -> "ib_write_bw failed (exit 1): why"
    text = re.sub(r"\bh\d+c\d+: (?:stdbuf -oL )?(\S+)[^:]*? (failed \(exit -?\d+\)|did not finish)",
                  r"\1 \2", text)
    text = textwrap.shorten("missing: " + text, 110, placeholder="…")
    ax.annotate(text, xy=(0.5, 1.0), xycoords="axes fraction", xytext=(0, 3),
                textcoords="offset points", ha="center", va="bottom", fontsize=7.5,
                color="#a00000")


def _no_data(ax, why):
    text = "\n".join(textwrap.wrap(f"not measured: {why}", 48)[:6])
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9,
            color="#777777")


def _series(results, path, field, scale=1.0):
    node = records(results, *path)
    if not isinstance(node, list):
        return [], [], (node or {}).get("error") if isinstance(node, dict) else None
    xs, ys, err = [], [], None
    for r in node:
        if "error" in r:
            err = err or r["error"].splitlines()[0]
            continue
        v = r.get(field)
        if ok(v) and v > 0:
            xs.append(r["size"])
            ys.append(v * scale)
    return xs, ys, err


def _size_panel(ax, results, sizes, lines, field, scale, ylabel, title):
    errors = []
    plotted = 0
    for key, path in lines:
        xs, ys, err = _series(results, path, field, scale)
        if xs:
            ax.plot(xs, ys, label=NAMES[key], **{"lw": 1.8, "ms": 5, **STYLE[key]})
            plotted += 1
        elif err:
            errors.append(f"{NAMES[key]}: {err}")
    _size_axis(ax, sizes)
    ax.set_ylabel(ylabel)
    if plotted:
        ax.set_yscale("log")
        note = None
        if errors:
            names = [e.split(": ", 1)[0] for e in errors]
            note = f"{', '.join(names)} ({errors[0].split(': ', 1)[1]})"
        _missing(ax, title, note)
    else:
        _missing(ax, title, None)
        _no_data(ax, errors[0] if errors else "no data")


def _legend(fig, axes):
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    order = [NAMES[k] for k in STYLE if NAMES[k] in seen]
    if order:
        fig.legend([seen[k] for k in order], order, loc="lower center", ncol=len(order),
                   frameon=False, fontsize=9)


def _lines(topo, metric):
    base = "throughput" if metric == "throughput" else metric
    out = [(k, (base, topo, k)) for k in ("vrdma_write", "vrdma_read", "vrdma_send")]
    if topo == "same_host" and metric == "throughput":
        out.append(("memcpy", ("memcpy", "results")))
    if topo == "same_host":
        out.append(("ucx_posix", (base, topo, "ucx_posix")))
    out += [("ucx_tcp", (base, topo, "ucx_tcp")), ("tcp", (base, topo, "tcp"))]
    return out


def throughput(results, sizes, path):
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for col, (topo, where) in enumerate(TOPOS):
        _size_panel(axes[0][col], results, sizes, _lines(topo, "throughput"), "mb_s", 1e-3,
                    "throughput (GB/s, log)", f"Throughput, {where}")
        lines = [x for x in _lines(topo, "throughput") if x[0] != "memcpy"]
        _size_panel(axes[1][col], results, sizes, lines, "mmsg_s", 1.0,
                    "message rate (million msg/s, log)", f"Message rate, {where}")
    _legend(fig, axes.flat)
    fig.suptitle("vrdma (perftest) vs memcpy, UCX and TCP, by message size", fontsize=13)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def latency(results, sizes, path):
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for col, (topo, where) in enumerate(TOPOS):
        lines = [x for x in _lines(topo, "latency")]
        _size_panel(axes[0][col], results, sizes, lines, "p50_us", 1.0, "latency p50 (µs, log)",
                    f"Latency p50, {where}")
        lines = [x for x in lines if not x[0].startswith("ucx")]  # UCX reports no percentiles
        _size_panel(axes[1][col], results, sizes, lines, "p999_us", 1.0,
                    "latency p99.9 (µs, log)", f"Latency p99.9, {where}")
    _legend(fig, axes.flat)
    fig.suptitle("Latency by message size (one way; ib_read_lat: whole READ; TCP: sockperf, "
                 "14 B to 65507 B)", fontsize=12)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def cpu(results, sizes, path):
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    for col, (topo, where) in enumerate(TOPOS):
        lines = [x for x in _lines(topo, "throughput") if x[0] != "memcpy"]
        _size_panel(axes[0][col], results, sizes, lines, "cpu_s_per_gb", 1.0,
                    "CPU-seconds per GB (log)", f"CPU per GB moved, {where}")
        _size_panel(axes[1][col], results, sizes, lines, "cpu_s_per_mmsg", 1.0,
                    "CPU-seconds per million messages (log)", f"CPU per million messages, {where}")
    _legend(fig, axes.flat)
    fig.suptitle("CPU of every process involved (both programs and every vrdmad); lower is "
                 "better", fontsize=12)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _xy(node, xkey, ykey, scale=1.0):
    """Points of a curve, and the first error among its records (with its x)."""
    xs, ys, err = [], [], None
    for r in node or []:
        if "error" in r:
            err = err or f"{r.get(xkey)}: {r['error'].splitlines()[0]}"
        elif ok(r.get(ykey)):
            xs.append(r[xkey])
            ys.append(r[ykey] * scale)
    return xs, ys, err


def _count_axis(ax, values, label):
    ax.set_xscale("log", base=2)
    if values:
        ax.xaxis.set_major_locator(FixedLocator(values))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
        ax.set_xlim(min(values) / 1.4, max(values) * 1.4)
    ax.set_xlabel(label)
    ax.grid(True, alpha=0.3)


def scalability(results, cfg, path):
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    colors = {"same_host": "#1f5fbf", "cross_host": "#c0392b"}
    pairs = cfg.get("pairs", [])

    ax = axes[0][0]
    missing = []
    for topo, where in TOPOS:
        xs, ys, err = _xy(records(results, "scalability", "pairs_bw", topo), "pairs",
                          "aggregate_mb_s", 1e-3)
        if xs:
            ax.plot(xs, ys, marker="o", color=colors[topo], label=where)
        if err:
            missing.append(f"{where}: {err}")
    _count_axis(ax, pairs, "container pairs running at once")
    ax.set_ylabel("aggregate throughput (GB/s, log)")
    if ax.lines:
        ax.set_yscale("log")
    _missing(ax, "Aggregate ib_write_bw 64 KiB vs pairs", missing[0] if missing else None)
    if ax.lines:
        ax.legend(loc="best", fontsize=9)
    else:
        _no_data(ax, missing[0] if missing else "no data")

    ax = axes[0][1]
    missing = []
    for topo, where in TOPOS:
        node = records(results, "scalability", "pairs_lat", topo)
        xs, ys, err = _xy(node, "pairs", "p50_us_median")
        if xs:
            ax.plot(xs, ys, marker="o", color=colors[topo], label=f"{where} p50 (median pair)")
            xs2, ys2, _ = _xy(node, "pairs", "p99_us_max")
            ax.plot(xs2, ys2, marker="x", ls="--", color=colors[topo],
                    label=f"{where} p99 (worst pair)")
        if err:
            missing.append(f"{where}: {err}")
    _count_axis(ax, pairs, "container pairs running at once")
    ax.set_ylabel("ib_write_lat 8 B (µs, log)")
    cpus = (results.get("machine") or {}).get("usable_cpus")
    _missing(ax, f"Latency vs pairs (all pairs share {cpus or 'the'} CPUs)",
             missing[0] if missing else None)
    if ax.lines:
        ax.set_yscale("log")
        ax.legend(loc="best", fontsize=8)
    else:
        _no_data(ax, missing[0] if missing else "no data")

    ax = axes[1][0]
    missing = []
    for topo, where in TOPOS:
        xs, ys, err = _xy(records(results, "scalability", "qps", topo), "qps", "mb_s", 1e-3)
        if xs:
            ax.plot(xs, ys, marker="s", color=colors[topo], label=where)
        if err:
            missing.append(f"{where}: {err}")
    _count_axis(ax, cfg.get("qps", []), "QPs between one pair of containers")
    ax.set_ylabel("throughput (GB/s, log), 4 KiB writes")
    if ax.lines:
        ax.set_yscale("log")
    _missing(ax, "ib_write_bw with many QPs", missing[0] if missing else None)
    if ax.lines:
        ax.legend(loc="best", fontsize=9)
    else:
        _no_data(ax, missing[0] if missing else "no data")

    ax = axes[1][1]
    labels, values, notes = [], [], []
    for kind in ("verbs", "rdma_cm"):
        for topo, where in TOPOS:
            r = records(results, "scalability", "setup_rate", kind, topo)
            labels.append(f"{kind}\n{where}")
            if isinstance(r, dict) and ok(r.get("per_second")):
                values.append(r["per_second"])
                notes.append(None)
            else:
                values.append(0)
                err = r.get("error", "") if isinstance(r, dict) else ""
                notes.append("skipped" if err.startswith("skipped") else
                             "failed" if err else "not measured")
    bars = ax.bar(range(len(labels)), values,
                  color=[colors["same_host"], colors["cross_host"]] * 2)
    top = max(values) if any(values) else 1
    for b, v, n in zip(bars, values, notes):
        ax.text(b.get_x() + b.get_width() / 2, v + top * 0.02 if v else top * 0.02,
                f"{v:,.0f}/s" if not n else n, ha="center", va="bottom", fontsize=9,
                color="black" if not n else "#a00000")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=9)
    ax.set_ylim(0, top * 1.18)
    ax.set_ylabel("connections per second")
    ax.set_title("Connection setup rate", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Scalability", fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def memory(results, path):
    mem = records(results, "memory") or {}
    groups = [("per_container", "per container", "vrdmad_kib_per_container",
               "shared_kib_per_container", None),
              ("per_qp", "per QP", "vrdmad_kib_per_item", "shared_kib_per_item",
               "program_private_kib_per_item"),
              ("per_mr", "per MR (4 KiB)", "vrdmad_kib_per_item", "shared_kib_per_item",
               "program_private_kib_per_item")]
    series = [("vrdmad private (RssAnon)", "#1f5fbf"), ("program shared (memfds)", "#e8820c"),
              ("program private (RssAnon)", "#8e8e8e")]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.26
    errors = []
    allv = []
    for gi, (key, label, f_d, f_s, f_a) in enumerate(groups):
        r = mem.get(key, {})
        if not r or "error" in r:
            errors.append(f"{label}: {r.get('error', 'not measured').splitlines()[0]}")
            ax.text(gi, 0, "not measured", ha="center", va="bottom", color="#a00000", fontsize=9)
            continue
        anon = r.get(f_a) if f_a else None  # per container: growth not measured
        for si, v in enumerate((r.get(f_d), r.get(f_s), anon)):
            if not ok(v):
                continue
            x = gi + (si - 1) * width
            v = max(v, 0.0)
            allv.append(v)
            ax.bar(x, v if v > 0 else 0, width, color=series[si][1],
                   label=series[si][0] if gi == 0 or si == 2 else None)
            ax.text(x, v, f"{v:,.2f}" if v < 1 else f"{v:,.1f}", ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[1] for g in groups])
    ax.set_ylabel("KiB (linear below 1, log above)")
    if allv and max(allv) > 0:
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, max(allv) * 4)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), loc="upper right", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    _missing(ax, "Memory: vrdmad and the program, per container / QP / MR",
             "; ".join(errors) if errors else None)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def make_all(results, out):
    cfg = results.get("config", {})
    sizes = cfg.get("sizes", [])
    made = []
    for name, fn in (("throughput.png", lambda p: throughput(results, sizes, p)),
                     ("latency.png", lambda p: latency(results, sizes, p)),
                     ("cpu.png", lambda p: cpu(results, sizes, p)),
                     ("scalability.png", lambda p: scalability(results, cfg, p)),
                     ("memory.png", lambda p: memory(results, p))):
        fn(os.path.join(out, name))
        made.append(name)
    fair = records(results, "qos", "fairness")
    if isinstance(fair, dict) and "error" not in fair:
        bench_fairness.plot(fair, os.path.join(out, "fairness.png"))
        made.append("fairness.png")
    return made
