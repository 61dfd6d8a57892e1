"""The attack suites' common ground: a victim pair that keeps checked traffic flowing while an
attack runs, and the table every suite prints (attacks tried, attacks that succeeded, victims
disturbed).

An attack test:

    with Victims(SB, [("h0c0", "h0c1")]) as victims:
        outcome = try_the_attack()              # True when the attack succeeded
    REPORT.record("name", succeeded=outcome, victims=victims)

`Victims` runs vrdma_stress (every opcode, every byte checked) between each pair for the
whole attack and, on leaving, checks that every pair finished with 0 errors and 0 corrupted
or lost operations. A suite's tearDownModule prints REPORT.table() and fails if any attack
succeeded or any victim was disturbed.
"""

import os
import re
import signal
import time

from .sandbox import container_ip

STRESS = os.environ.get("VRDMA_STRESS", "vrdma_stress")
STRESS_PORT = 18600
SUMMARY = re.compile(r"stress: role=(\w+) .*?errors=(\d+) corrupt=(\d+) lost=(\d+)")


class Victims:
    """vrdma_stress between each (server, client) pair of containers while the block runs."""

    def __init__(self, sb, pairs, seconds=None, min_seconds=3, gid=True):
        self.sb = sb
        self.pairs = list(pairs)
        self.min_seconds = min_seconds
        self.seconds = seconds  # None: until the block ends (bounded by a generous limit)
        self.gid = gid
        self.procs = []
        self.results = []  # (pair, client rc, server rc, client out, server out)
        self.disturbed = []  # what went wrong, per disturbed pair

    def __enter__(self):
        self.t0 = time.monotonic()
        budget = self.seconds or 120
        for server, client in self.pairs:
            s = self.sb.start(server, STRESS)
            if not self.sb.wait_listening(server, STRESS_PORT, timeout=30):
                s.kill()
                raise AssertionError(f"victim server in {server} never listened")
            args = [STRESS, "--seconds", str(budget)]
            if self.gid:
                args += ["--gid-index", "0"]
            c = self.sb.start(client, *args, container_ip(server))
            self.procs.append(((server, client), s, c))
        # Let traffic flow before the attack starts.
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        # The victims keep going at least min_seconds; then they are stopped by a signal the
        # stress program handles (SIGINT ends its run early and still prints its summary).
        while time.monotonic() - self.t0 < self.min_seconds:
            time.sleep(0.1)
        for _, s, c in self.procs:
            if self.seconds is None:
                c.kill(signal.SIGINT)
        for pair, s, c in self.procs:
            crc = c.wait(self.seconds + 60 if self.seconds else 60)
            src = s.wait(60)
            self.results.append((pair, crc, src, c.out + c.err, s.out + s.err))
            problems = []
            if crc != 0 or src != 0:
                problems.append(f"exit status client {crc} server {src}")
            for out in (c.out, s.out):
                m = SUMMARY.search(out)
                if not m:
                    problems.append("no summary line")
                elif any(int(x) for x in m.groups()[1:]):
                    problems.append(m.group(0))
            if problems:
                self.disturbed.append(f"{pair[1]} -> {pair[0]}: {'; '.join(problems)}\n"
                                      f"client:\n{c.out}{c.err}\nserver:\n{s.out}{s.err}")
        return False


class Report:
    """Attacks tried by one suite and how they ended."""

    def __init__(self, suite):
        self.suite = suite
        self.rows = []  # (attack, succeeded, victims disturbed, detail)

    def record(self, attack, succeeded, victims=None, detail=""):
        disturbed = bool(victims and victims.disturbed)
        if victims and victims.disturbed:
            detail = (detail + "\n" if detail else "") + "\n".join(victims.disturbed)
        self.rows.append((attack, bool(succeeded), disturbed, detail))
        return not succeeded and not disturbed

    def table(self):
        tried = len(self.rows)
        won = sum(1 for r in self.rows if r[1])
        hurt = sum(1 for r in self.rows if r[2])
        lines = [f"\n{self.suite}: attacks tried {tried}, attacks that succeeded {won}, "
                 f"victims disturbed {hurt}"]
        width = max([len(r[0]) for r in self.rows] + [6])
        for attack, succeeded, disturbed, _ in self.rows:
            lines.append(f"  {attack:<{width}}  {'SUCCEEDED' if succeeded else 'failed'}"
                         f"{'  victims DISTURBED' if disturbed else ''}")
        return "\n".join(lines)

    def failures(self):
        return [r for r in self.rows if r[1] or r[2]]
