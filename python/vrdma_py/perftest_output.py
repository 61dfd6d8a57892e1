"""Parsing of perftest result tables."""

import re

_NUM = r"(?:[\d.]+|-?nan|-?inf)"  # perftest prints -nan for a deviation it cannot compute
_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+({_NUM}(?:\s+{_NUM})*)\s*$")


def rows(text):
    """Numeric result rows: (bytes, iterations, [floats...])."""
    out = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), [float(x) for x in m.group(3).split()]))
    return out


def bw_rows(text):
    """[(bytes, iterations, bw_peak_MBps, bw_avg_MBps, msg_rate_Mpps)]"""
    return [(b, n, v[0], v[1], v[2]) for b, n, v in rows(text) if len(v) == 3]


def lat_rows(text):
    """[(bytes, iterations, t_min, t_max, t_typical, t_avg, t_stdev, p99, p999)] in usec"""
    return [(b, n, *v[:7]) for b, n, v in rows(text) if len(v) >= 7]
