"""QoS fairness on one link between two hosts: per-container throughput over time.

Four senders in containers of host 0 (h0c0..h0c3) run `ib_write_bw -D` to receivers on host 1,
with rules set at run time by `vrdma qos set`: h0c0 weight 1, h0c1 weight 3, h0c2 limited to
100 MB/s, h0c3 weight 1 starting a third of the way in and stopping a third later. h0's
`vrdma status` is sampled every `interval` seconds; the bytes each container's flows sent give
its throughput. Used by `vrdma bench` (its QoS section and fairness.png) and by
bench/qos_fairness.py (the same run alone)."""

import json
import time

from .sandbox import container_ip, vrdma

RULES = {0: "weight=1", 1: "weight=3", 2: "rate=100M", 3: "weight=1"}
LIMIT_MB_S = 100.0  # the rate=100M rule, in 10^6 bytes/s


def _sample():
    st = json.loads(vrdma("status", "--host", "h0", "--json").stdout)
    out = {}
    for f in st.get("qos", []):
        out[f["container"]] = out.get(f["container"], 0) + f["bytes"]
    return time.monotonic(), out


def _start_pair(sb, i, seconds):
    srv = sb.start(f"h1c{i}", "ib_write_bw", "-F", "-D", str(seconds))
    if not sb.wait_listening(f"h1c{i}", 18515, timeout=20):
        srv.kill()
        raise RuntimeError(f"ib_write_bw server on h1c{i} never listened")
    cli = sb.start(f"h0c{i}", "ib_write_bw", "-F", "-D", str(seconds), container_ip(f"h1c{i}"))
    return [srv, cli]


def measure(sb, seconds=24, interval=0.5):
    """Runs the four senders in `sb` (two hosts, at least four containers each) and returns
    the record: rules, samples, the late sender's window and the summary (see summarize).
    The rules are reset to the defaults afterwards, also on failure."""
    if seconds < 6:
        raise ValueError("seconds must be at least 6 (three windows of two seconds)")
    ips = {i: container_ip(f"h0c{i}") for i in RULES}
    late_start, late_len = seconds // 3, seconds // 3
    samples, procs = [], []
    try:
        for i, rule in RULES.items():
            vrdma("qos", "set", "--host", "h0", f"container={ips[i]}:{rule}")
        for i in (0, 1, 2):
            procs += _start_pair(sb, i, seconds)
        t_start = time.monotonic()
        late = False
        while time.monotonic() - t_start < seconds + 2:
            if not late and time.monotonic() - t_start >= late_start:
                procs += _start_pair(sb, 3, late_len)
                late = True
            t, b = _sample()
            samples.append({"t": round(t - t_start, 4),
                            "bytes": {str(i): b.get(ips[i], 0) for i in RULES}})
            time.sleep(interval)
        for p in procs:
            rc = p.wait(60)
            if rc != 0:
                raise RuntimeError(f"{p.name} exited with {rc}: {(p.err or '').strip()[-300:]}")
    finally:
        for p in procs:
            p.kill()
        for i in RULES:
            vrdma("qos", "set", "--host", "h0", f"container={ips[i]}", check=False)
    rec = {"rules": {f"h0c{i}": r for i, r in RULES.items()}, "samples": samples,
           "late_window_s": [late_start, late_len]}
    rec.update(summarize(rec)[2])
    return rec


# The latency class under bulk: an ib_write_lat pair with SL 1 (the latency class, its own lane
# and router thread) while a bulk pair saturates the same link between the hosts.
LAT_PAIR, BULK_PAIR = 5, 4  # containers h0c5 -> h1c5 and h0c4 -> h1c4
LAT_BAR = 2.0  # the target: loaded p99 within 2x the idle p99


def _latency_p99(sb, iters):
    from .perftest_output import lat_rows
    args = ["ib_write_lat", "-F", "--sl", "1", "-n", str(iters), "-s", "8"]
    srv = sb.start(f"h1c{LAT_PAIR}", *args)
    try:
        if not sb.wait_listening(f"h1c{LAT_PAIR}", 18515, timeout=20):
            raise RuntimeError(f"ib_write_lat server on h1c{LAT_PAIR} never listened")
        cli = sb.start(f"h0c{LAT_PAIR}", *args, container_ip(f"h1c{LAT_PAIR}"))
        try:
            for p in (cli, srv):
                if p.wait(120) != 0:
                    raise RuntimeError(f"{p.name} failed: {(p.err or '').strip()[-300:]}")
        finally:
            cli.kill()
    finally:
        srv.kill()
    rows = lat_rows(cli.out)
    if not rows:
        raise RuntimeError(f"no latency figures from ib_write_lat: {cli.out[-300:]}")
    return rows[0][7]  # p99, microseconds


def latency_class(sb, rounds=3, iters=1000, bulk_seconds=40):
    """The latency class's ib_write_lat p99 idle (`rounds` runs) and while a bulk pair sends
    (`rounds` runs), the bulk pair's rate from h0's status, and the ratio of the medians."""
    import statistics
    idle = [_latency_p99(sb, iters) for _ in range(rounds)]
    bulk_ip = container_ip(f"h0c{BULK_PAIR}")
    procs = []
    try:
        srv = sb.start(f"h1c{BULK_PAIR}", "ib_write_bw", "-F", "-D", str(bulk_seconds))
        procs.append(srv)
        if not sb.wait_listening(f"h1c{BULK_PAIR}", 18515, timeout=20):
            raise RuntimeError(f"ib_write_bw server on h1c{BULK_PAIR} never listened")
        procs.append(sb.start(f"h0c{BULK_PAIR}", "ib_write_bw", "-F", "-D", str(bulk_seconds),
                              container_ip(f"h1c{BULK_PAIR}")))
        time.sleep(3)
        t0, b0 = _sample()
        loaded = [_latency_p99(sb, iters) for _ in range(rounds)]
        t1, b1 = _sample()
    finally:
        for p in procs:
            p.kill()
    rec = {"iterations": iters, "idle_p99_us": idle, "loaded_p99_us": loaded,
           "bulk_mb_s": (b1.get(bulk_ip, 0) - b0.get(bulk_ip, 0)) / (t1 - t0) / 1e6}
    rec["ratio"] = statistics.median(loaded) / statistics.median(idle)
    rec["target_met"] = rec["ratio"] <= LAT_BAR
    return rec


def latency_md(rec):
    """Markdown lines: the latency class's p99 idle and under bulk, and the target."""
    def us(xs):
        return ", ".join(f"{x:.0f}" for x in xs)
    met = "met" if rec["target_met"] else "NOT met"
    return [f"Latency class (ib_write_lat 8 B, SL 1) p99, µs: idle {us(rec['idle_p99_us'])}; "
            f"while a bulk pair sends {rec['bulk_mb_s']:.0f} MB/s on the same link "
            f"{us(rec['loaded_p99_us'])}. Ratio of the medians **{rec['ratio']:.2f}x** "
            f"(target <= {LAT_BAR:g}x: {met})."]


def summarize(rec):
    """(times, series {container index: MB/s between consecutive samples}, summary): the
    summary holds each container's mean MB/s while all four sent, the measured weight ratio and the limited one's rate."""
    samples = rec["samples"]
    late_start, late_len = rec["late_window_s"]
    series = {i: [] for i in RULES}
    times = []
    for a, b in zip(samples, samples[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        times.append(b["t"])
        for i in RULES:
            series[i].append((b["bytes"][str(i)] - a["bytes"][str(i)]) / dt / 1e6)
    # The window when all four sent: while the late sender's bytes grew, its first and last
    # interval (partly before it started, after it stopped) left out.
    late = [k for k in range(len(times)) if series[3][k] > 0]
    if not late:
        raise RuntimeError(f"the late sender h0c3 sent nothing (planned from {late_start} s for "
                           f"{late_len} s)")
    window = late[1:-1] or late
    mean = {i: sum(series[i][k] for k in window) / len(window) for i in RULES}
    summary = {"mean_mb_s_all_four": {f"h0c{i}": mean[i] for i in RULES},
               "weight_ratio": mean[1] / mean[0] if mean[0] > 0 else None,
               "limited_mb_s": mean[2]}
    return times, series, summary


def report_md(rec):
    """Markdown lines: the table of shares and the measured ratios."""
    means = rec["mean_mb_s_all_four"]
    lines = ["| Container | Rule | MB/s while all four send |", "| --- | --- | --- |"]
    for i, rule in RULES.items():
        lines.append(f"| h0c{i} | {rule} | {means[f'h0c{i}']:.1f} |")
    ratio = rec.get("weight_ratio")
    lines.append("")
    lines.append(f"Weights 1:3 measured 1:{ratio:.2f}; " if ratio else "Weights 1:3: no figure; ")
    lines[-1] += (f"h0c2, limited to 100 MB/s, got {rec['limited_mb_s']:.1f} MB/s (a limit "
                  "holds a container back only when its fair share is larger).")
    return lines


def plot(rec, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    times, series, _ = summarize(rec)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, rule in RULES.items():
        ax.plot(times, series[i], label=f"h0c{i} ({rule})")
    ax.axhline(LIMIT_MB_S, color="grey", linestyle=":", linewidth=1, label="100 MB/s limit")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MB/s (10^6 bytes/s)")
    ax.set_title("vrdma QoS: per-container throughput on one link between two hosts")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
