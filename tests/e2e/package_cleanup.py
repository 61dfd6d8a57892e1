#!/usr/bin/env python3
"""Cleanup after e2e_package, also when it timed out or was killed: when its marker says that
the test installed the vrdma package, the package is purged (with its CDI spec) and the marker
removed. A vrdma package installed otherwise (no marker) is left alone."""

import os
import subprocess
import sys

MARKER = "/var/lib/vrdma-package-test.installed"

if not os.path.exists(MARKER):
    sys.exit(0)
installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "vrdma"], capture_output=True,
                           text=True).stdout.strip()
if installed:
    print(f"e2e_package left the package installed ({installed}): purging it")
    subprocess.run(["dpkg", "--purge", "vrdma"], timeout=300, check=False)
os.remove(MARKER)
