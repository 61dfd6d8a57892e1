#!/usr/bin/env python3
"""vrdmad's systemd unit (deploy/systemd/vrdmad.service) as systemd reads it.

`systemd-analyze verify` must accept it without a word (it exits 0 on unknown keys and bad
values, so any line naming the unit is a failure too), with ExecStart's /usr/sbin/vrdmad
replaced by the build's vrdmad (verify checks that the program exists). A copy with a bad value
must be reported, so that this check can fail. The hardening the unit promises is checked by
key. Needs systemd-analyze (Debian's systemd package); it does not need systemd to be PID 1.

Usage: verify_unit.py UNIT VRDMAD
"""

import os
import shutil
import subprocess
import sys
import tempfile


def verify(path):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        sys.exit("systemd-analyze not found (scripts/setup.sh --deps installs systemd)")
    p = subprocess.run([analyze, "verify", path], capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def settings(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def main():
    unit, vrdmad = sys.argv[1], os.path.realpath(sys.argv[2])
    with open(unit) as f:
        text = f.read()
    if "ExecStart=/usr/sbin/vrdmad " not in text:
        sys.exit(f"{unit}: ExecStart does not run /usr/sbin/vrdmad")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "vrdmad.service")
        with open(good, "w") as f:
            f.write(text.replace("/usr/sbin/vrdmad", vrdmad))
        rc, out = verify(good)
        if rc != 0 or "vrdmad.service" in out:
            failures.append(f"systemd-analyze verify refuses the unit ({rc}):\n{out}")
        else:
            print(f"systemd-analyze verify: {unit} accepted")
        bad = os.path.join(d, "bad", "vrdmad.service")
        os.makedirs(os.path.dirname(bad))
        with open(bad, "w") as f:
            f.write(text.replace("/usr/sbin/vrdmad", vrdmad)
                    .replace("ProtectSystem=strict", "ProtectSystem=strictest"))
        rc, out = verify(bad)
        if "strictest" not in out:
            failures.append(f"a bad value is not reported ({rc}): {out!r}")

    s = settings(text)
    expected = {
        "ExecStart": ["/usr/sbin/vrdmad --config /etc/vrdma/vrdmad.yaml"],
        "ExecReload": ["/bin/kill -HUP $MAINPID"],
        "Restart": ["on-failure"],
        "RuntimeDirectory": ["vrdma"],
        "ProtectSystem": ["strict"],
        "ProtectHome": ["yes"],
        "NoNewPrivileges": ["yes"],
        "RestrictNamespaces": ["net"],
        "CapabilityBoundingSet": ["CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_SYS_NICE CAP_CHOWN"],
    }
    for k, v in expected.items():
        if s.get(k) != v:
            failures.append(f"{k}={s.get(k)}, expected {v}")
    for k in ("User", "AmbientCapabilities", "ReadWritePaths"):
        if k in s:
            failures.append(f"{k} is set: {s[k]}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
