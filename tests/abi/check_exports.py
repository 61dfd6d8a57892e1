#!/usr/bin/env python3
"""Compares the exports of vrdma's drop-in libraries with Debian's own.

    check_exports.py --ours BUILD/lib [--allow-extra LIB:NODE]... LIB...

For each LIB (libibverbs.so.1, libmlx5.so.1, ...) it reads, with readelf, the dynamic
symbol table and the version definitions of the system's library (found through the
dynamic loader's cache) and of ours, and fails when they differ: a symbol version missing
from ours or added by ours, a default version (@@) that is a compatibility version (@) in
the other, a function that is data in the other, a version node missing or with another
parent. --allow-extra names a version node that exists only in ours (vrdma's own
interfaces); its symbols are allowed too.
"""

import argparse
import os
import re
import subprocess
import sys


def readelf(*args):
    out = subprocess.run(["readelf", "-W", *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"readelf {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def exported_symbols(path):
    """{(name, version or None, is_default): type} of every symbol the library defines."""
    symbols = {}
    for line in readelf("--dyn-syms", path).splitlines():
        fields = line.split()
        if len(fields) < 8 or not re.fullmatch(r"\d+:", fields[0]) or fields[6] == "UND":
            continue
        kind, name = fields[3], fields[7]
        if fields[6] == "ABS" and "@" not in name:
            continue  # the symbol a version node defines for itself
        match = re.fullmatch(r"([^@]+)(@@?)(.+)", name)
        if match:
            symbols[(match[1], match[3], match[2] == "@@")] = kind
        else:
            symbols[(name, None, True)] = kind  # unversioned
    return symbols


def version_nodes(path):
    """{node: parent or None} of the library's version definitions (the base one left out)."""
    text = readelf("-V", path)
    if "Version definition section" not in text:
        return {}
    section = text.split("Version definition section", 1)[1].split("Version needs section")[0]
    nodes, current = {}, None
    for line in section.splitlines():
        definition = re.search(r"Flags: (\S+)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", line)
        if definition:
            current = None if definition[1] == "BASE" else definition[2]
            if current:
                nodes[current] = None
            continue
        parent = re.search(r"Parent 1: (\S+)", line)
        if parent and current:
            nodes[current] = parent[1]
    return nodes


def system_library(name):
    """The path of the library the dynamic loader would use without LD_LIBRARY_PATH."""
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in cache.splitlines():
        match = re.match(rf"\s*{re.escape(name)} \((.*)\) => (\S+)", line)
        if match and "x86-64" in match[1]:
            return match[2]
    return None


def describe(key):
    name, version, default = key
    return name if version is None else f"{name}{'@@' if default else '@'}{version}"


def compare(name, ours_dir, allowed_nodes):
    """Returns the list of differences for one library (empty when they agree)."""
    real = system_library(name)
    ours = os.path.join(ours_dir, name)
    if real is None:
        return [f"the system has no {name} (scripts/setup.sh --deps installs Debian's)"]
    if not os.path.exists(ours):
        return [f"{ours} does not exist (build it first)"]
    if os.path.realpath(real) == os.path.realpath(ours):
        return [f"the loader's cache resolves {name} to ours ({real}); cannot compare"]

    problems = []
    real_syms, our_syms = exported_symbols(real), exported_symbols(ours)
    for key in sorted(set(real_syms) - set(our_syms), key=describe):
        problems.append(f"missing: {describe(key)} ({real_syms[key]})")
    for key in sorted(set(our_syms) - set(real_syms), key=describe):
        if key[1] not in allowed_nodes:
            problems.append(f"not in Debian's: {describe(key)} ({our_syms[key]})")
    for key in sorted(set(real_syms) & set(our_syms), key=describe):
        if real_syms[key] != our_syms[key]:
            problems.append(f"{describe(key)} is {our_syms[key]}, Debian's is {real_syms[key]}")

    real_nodes, our_nodes = version_nodes(real), version_nodes(ours)
    for node, parent in real_nodes.items():
        if node not in our_nodes:
            problems.append(f"missing version node {node}")
        elif our_nodes[node] != parent:
            problems.append(f"version node {node}: parent {our_nodes[node]}, Debian's {parent}")
    for node in our_nodes.keys() - real_nodes.keys() - allowed_nodes:
        problems.append(f"version node {node} is not in Debian's")

    if not problems:
        print(f"{name}: {len(real_syms)} symbol versions in {len(real_nodes)} version nodes, "
              f"as {real} exports them")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True, help="the directory of vrdma's libraries")
    parser.add_argument("--allow-extra", action="append", default=[], metavar="LIB:NODE",
                        help="a version node only ours has (e.g. libibverbs.so.1:VRDMA_PRIVATE_1)")
    parser.add_argument("libraries", nargs="+", help="library file names, e.g. libmlx5.so.1")
    args = parser.parse_args()

    failed = 0
    for name in args.libraries:
        allowed = {extra.split(":", 1)[1] for extra in args.allow_extra if extra.split(":", 1)[0] == name}
        problems = compare(name, args.ours, allowed)
        for problem in problems:
            print(f"{name}: {problem}")
        failed += bool(problems)
    print(f"{len(args.libraries) - failed} libraries export what Debian's do, {failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
