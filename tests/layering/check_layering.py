#!/usr/bin/env python3
"""The layers of src/ and the arrows between them (docs/design.md, "Layers").

Fails when a source file includes a header of a folder its folder may not depend on, or when
vrdmad's binary holds code of the client library: every symbol that libvrdma_engine.a defines
must be absent from vrdmad.

  check_layering.py SRC_DIR VRDMAD_BINARY ENGINE_ARCHIVE
"""

import os
import re
import subprocess
import sys

# Folder -> the folders (or single headers) its files may include. A folder may always include
# its own headers; includes without a folder ("internal.h") are the folder's own.
ALLOWED = {
    "common": [],
    "config": [],
    "shm": ["common"],
    "transport": ["shm", "common"],
    "engine": ["transport", "shm", "common"],
    "compat/verbs": ["engine", "shm", "common"],
    "compat/rdmacm": ["common", "compat/verbs"],
    "compat/stubs": [],
    "daemon/identity": ["common"],
    "daemon/registry": ["shm", "common"],
    "pki": [],
    "etcd": ["common"],
    "daemon/directory": ["etcd", "pki", "common"],
    "daemon/qos": ["common"],
    "daemon/router": ["daemon/directory", "daemon/qos", "transport", "shm", "common"],
    "daemon/cm": ["daemon/directory", "transport/wire.h", "common"],
    "daemon/direct": ["transport", "common"],
    "daemon/metrics": ["common"],
    "daemon/core": ["daemon/identity", "daemon/registry", "daemon/directory", "daemon/router",
                    "daemon/direct",
                    "daemon/qos", "daemon/cm", "daemon/metrics", "config", "transport", "shm",
                    "common"],
    "ctl": ["platform", "etcd", "pki", "common"],
    "platform": ["common"],
    "k8s": ["platform", "common"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path, src):
    rel = os.path.relpath(path, src)
    parts = rel.split(os.sep)
    for depth in (2, 1):
        key = "/".join(parts[:depth])
        if key in ALLOWED:
            return key
    return None


def include_violations(src):
    bad = []
    seen_files = 0
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(root, name)
            folder = folder_of(path, src)
            rel = os.path.relpath(path, src)
            if folder is None:
                bad.append(f"{rel}: in a folder the layer map does not know")
                continue
            seen_files += 1
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                if inc.startswith(("./", "../")):  # relative to the file: where does it land?
                    inc = os.path.relpath(os.path.normpath(os.path.join(root, inc)), src)
                if "/" not in inc or inc.startswith(folder + "/"):
                    continue
                if any(inc == a or inc.startswith(a + "/") for a in ALLOWED[folder]):
                    continue
                bad.append(f"{rel}: includes \"{inc}\" ({folder} may include "
                           f"{', '.join(ALLOWED[folder]) or 'nothing outside itself'})")
    if seen_files == 0:
        bad.append(f"no source files under {src}")
    return bad


def defined_symbols(path, kinds):
    """Code symbols of the given nm kinds defined in a binary or archive."""
    out = subprocess.run(["nm", "--defined-only", "-C", path], capture_output=True, text=True,
                         check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in kinds:
            syms.add(parts[2])
    return syms


def main():
    src, vrdmad, engine = sys.argv[1:4]
    problems = include_violations(src)
    # What the client library's own sources define: strong code symbols. Weak ones (inline
    # functions and templates of shared headers, emitted where unoptimized builds use them)
    # may be defined by both sides.
    engine_syms = {s for s in defined_symbols(engine, "Tt") if s.startswith("vrdma::")}
    if not engine_syms:
        problems.append(f"{engine} defines no vrdma:: code: wrong archive?")
    daemon_syms = defined_symbols(vrdmad, "TtWw")
    leaked = sorted(engine_syms & daemon_syms)
    for s in leaked[:20]:
        problems.append(f"vrdmad holds client-library code: {s}")
    if len(leaked) > 20:
        problems.append(f"... and {len(leaked) - 20} more client-library symbols in vrdmad")
    for p in problems:
        print(p)
    print(f"layering: {len(engine_syms)} client-library symbols checked against vrdmad; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
