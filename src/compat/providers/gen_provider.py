#!/usr/bin/env python3
"""Generates a failing provider library from its symbol list.

    gen_provider.py SPEC --clang CLANG --include-dir DIR --out-dir DIR

SPEC (libmlx5.symbols, ...) names the library, the rdma-core header that declares its
functions, its version nodes with their parents, and the symbols of each node. The
function prototypes come from the header itself, through clang's AST dump, so every
definition has the header's exact signature (the C++ compiler checks it again when it
compiles the definitions against the same header). Writes, into --out-dir:

    <stem>_stubs.cc       one failing definition per exported symbol version
    <stem>.map            the version script: the nodes, their parents, their symbols
    <stem>_calls_test.cc  a program that calls every symbol version of a built library
                          through dlvsym and checks that it fails as the list says

How a function fails ("convention"), unless its line in SPEC says otherwise:
    pointer return    NULL, errno = EOPNOTSUPP
    bool              false (errno untouched: a question, not a failure)
    void              nothing
    integer           EOPNOTSUPP, errno = EOPNOTSUPP (rdma-core's "0 or the value of errno")
and, named after the symbol in SPEC:
    returns -1        -1, errno = EOPNOTSUPP (read(2) style)
    returns -errno    -EOPNOTSUPP, errno = EOPNOTSUPP
"""

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

CONVENTIONS = ("null", "false", "void", "errno", "-1", "-errno")


@dataclass
class Symbol:
    name: str
    node: str
    convention: str | None  # from SPEC; None = decided by the return type
    line: int


@dataclass
class Spec:
    library: str = ""
    header: str = ""
    nodes: list[tuple[str, str | None]] = field(default_factory=list)  # (node, parent)
    symbols: list[Symbol] = field(default_factory=list)


def fail(path, line, message):
    sys.exit(f"{path}:{line}: {message}")


def parse_spec(path):
    spec = Spec()
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            words = raw.split("#", 1)[0].split()
            if not words:
                continue
            key = words[0]
            if key in ("library", "header") and len(words) == 2:
                setattr(spec, key, words[1])
            elif key == "version" and len(words) in (2, 4):
                if len(words) == 4 and words[2] != "inherits":
                    fail(path, number, "expected: version NODE [inherits PARENT]")
                parent = words[3] if len(words) == 4 else None
                known = {n for n, _ in spec.nodes}
                if words[1] in known:
                    fail(path, number, f"version {words[1]} defined twice")
                if parent is not None and parent not in known:
                    fail(path, number, f"parent {parent} is not defined above")
                spec.nodes.append((words[1], parent))
            elif not raw[0].isspace():
                fail(path, number, f"unknown line: {raw.strip()}")
            elif not spec.nodes:
                fail(path, number, "symbol before the first version line")
            elif len(words) == 1:
                spec.symbols.append(Symbol(key, spec.nodes[-1][0], None, number))
            elif len(words) == 3 and words[1] == "returns" and words[2] in ("-1", "-errno"):
                spec.symbols.append(Symbol(key, spec.nodes[-1][0], words[2], number))
            else:
                fail(path, number, "expected: SYMBOL [returns -1|returns -errno]")
    if not spec.library or not spec.header or not spec.nodes:
        fail(path, 0, "needs library, header and at least one version")
    seen = set()
    for s in spec.symbols:
        if (s.name, s.node) in seen:
            fail(path, s.line, f"{s.name} listed twice in {s.node}")
        seen.add((s.name, s.node))
    return spec


@dataclass
class Prototype:
    result: str  # return type, as C spells it
    params: list[str]  # parameter types


def header_prototypes(clang, include_dir, header, names):
    """The prototypes of `names` as the header declares them (clang's AST, JSON)."""
    source = f"#include <{header}>\n"
    command = [clang, "-x", "c", "-fsyntax-only", "-Xclang", "-ast-dump=json"]
    if include_dir:
        command.append(f"-I{include_dir}")
    dump = subprocess.run(command + ["-"], input=source, capture_output=True, text=True)
    if dump.returncode != 0:
        sys.exit(f"{clang} could not parse <{header}>:\n{dump.stderr}")
    found = {}
    for decl in json.loads(dump.stdout).get("inner", []):
        name = decl.get("name")
        if decl.get("kind") != "FunctionDecl" or name not in names or name in found:
            continue
        if decl.get("variadic"):
            sys.exit(f"{name}: variadic functions are not supported")
        full = decl["type"]["qualType"]  # "int (struct ibv_context *, size_t)"
        result = full[: full.index("(")].strip()
        params = [p["type"]["qualType"] for p in decl.get("inner", []) if p.get("kind") == "ParmVarDecl"]
        found[name] = Prototype(result, params)
    missing = sorted(set(names) - set(found))
    if missing:
        sys.exit(f"<{header}> does not declare: {', '.join(missing)}")
    return found


def convention(symbol, proto, spec_path):
    by_type = "errno"
    if proto.result.endswith("*"):
        by_type = "null"
    elif proto.result == "bool":
        by_type = "false"
    elif proto.result == "void":
        by_type = "void"
    elif not re.fullmatch(r"(unsigned |signed )?(int|long|ssize_t|__ssize_t|int\d+_t|uint\d+_t)", proto.result):
        fail(spec_path, symbol.line, f"{symbol.name} returns {proto.result}: no failure convention")
    if symbol.convention is None:
        return by_type
    if by_type != "errno":
        fail(spec_path, symbol.line, f"{symbol.name} returns {proto.result}, not an integer")
    return symbol.convention


FAILURE_BODY = {
    "null": "errno = EOPNOTSUPP; return nullptr",
    "false": "return false",
    "void": "",
    "errno": "errno = EOPNOTSUPP; return EOPNOTSUPP",
    "-1": "errno = EOPNOTSUPP; return -1",
    "-errno": "errno = EOPNOTSUPP; return -EOPNOTSUPP",
}


def c_ident(text):
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def plan(spec):
    """(symbol, is_default, internal name) for every symbol version. A symbol listed in
    several nodes is the default (@@) in the last one and a compatibility version (@) in
    the earlier ones, as in rdma-core's own version scripts."""
    last = {s.name: s.node for s in spec.symbols}
    count = {}
    for s in spec.symbols:
        count[s.name] = count.get(s.name, 0) + 1
    out = []
    for s in spec.symbols:
        default = last[s.name] == s.node
        # A symbol with one version is defined under its own name; the versions of a
        # symbol with several get internal names, bound to theirs by .symver.
        internal = s.name if count[s.name] == 1 else f"vrdma_{s.name}_{c_ident(s.node)}"
        out.append((s, default, internal))
    return out


def write_stubs(spec, protos, conventions, path, spec_name):
    lines = [
        f"// Generated by gen_provider.py from {spec_name}: do not edit.",
        f"// {spec.library}: every symbol of rdma-core's library, each failing as the real",
        "// library fails for a device that is not its own.",
        "#include <errno.h>",
        "",
        f"#include <{spec.header}>",
        "",
        '#define VRDMA_EXPORT __attribute__((visibility("default")))',
        "",
        'extern "C" {',
        "",
    ]
    for s, default, internal in plan(spec):
        proto = protos[s.name]
        params = ", ".join(proto.params) if proto.params else "void"
        tag = "" if default else " (compatibility version)"
        lines.append(f"// {s.name}@{'@' if default else ''}{s.node}{tag}")
        head = f"VRDMA_EXPORT {proto.result}{'' if proto.result.endswith('*') else ' '}{internal}({params})"
        body = FAILURE_BODY[conventions[(s.name, s.node)]]
        if body:
            lines.append(head + " {")
            lines.extend(f"  {statement};" for statement in body.split("; "))
            lines.append("}")
        else:
            lines.append(head + " {}")
        if internal != s.name:
            lines.append(f'__asm__(".symver {internal}, {s.name}@{"@" if default else ""}{s.node}");')
        lines.append("")
    lines.append('}  // extern "C"')
    write(path, lines)


def write_map(spec, path, spec_name):
    lines = [f"/* Generated by gen_provider.py from {spec_name}: do not edit. */"]
    for index, (node, parent) in enumerate(spec.nodes):
        names = sorted({s.name for s in spec.symbols if s.node == node})
        lines.append(f"{node} {{")
        if names:
            lines.append("\tglobal:")
            lines.extend(f"\t\t{n};" for n in names)
        if index == 0:
            lines.append("\tlocal: *;")
        lines.append(f"}}{' ' + parent if parent else ''};")
        lines.append("")
    write(path, lines)


EXPECT = {
    "null": "r == nullptr && errno == EOPNOTSUPP",
    "false": "!r && errno == 0",
    "void": "errno == 0",
    "errno": "r == EOPNOTSUPP && errno == EOPNOTSUPP",
    "-1": "r == -1 && errno == EOPNOTSUPP",
    "-errno": "r == -EOPNOTSUPP && errno == EOPNOTSUPP",
}


def write_calls_test(spec, protos, conventions, path, spec_name):
    lines = [
        f"// Generated by gen_provider.py from {spec_name}: do not edit.",
        f"// Loads a built {spec.library} (the path is argv[1]), finds every symbol version",
        "// of the list with dlvsym and calls it with zero/NULL arguments; each call must",
        "// fail as the list says. Prints one line per symbol; exits 1 on any mismatch.",
        "#include <dlfcn.h>",
        "#include <errno.h>",
        "#include <stdio.h>",
        "",
        f"#include <{spec.header}>",
        "",
        "int main(int argc, char** argv) {",
        "  if (argc != 2) {",
        f'    fprintf(stderr, "usage: %s PATH/{spec.library}\\n", argv[0]);',
        "    return 2;",
        "  }",
        "  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);",
        "  if (lib == nullptr) {",
        '    fprintf(stderr, "%s\\n", dlerror());',
        "    return 1;",
        "  }",
        "  int checked = 0, failed = 0;",
        "  auto report = [&](const char* name, const char* node, bool ok) {",
        "    ++checked;",
        "    if (!ok) ++failed;",
        '    printf("%s %s@%s\\n", ok ? "ok  " : "FAIL", name, node);',
        "  };",
    ]
    for s, _default, _internal in plan(spec):
        proto = protos[s.name]
        conv = conventions[(s.name, s.node)]
        args = ", ".join("{}" for _ in proto.params)
        lines.append("  {")
        lines.append(f'    auto fn = reinterpret_cast<decltype(&{s.name})>(dlvsym(lib, "{s.name}", "{s.node}"));')
        lines.append("    errno = 0;")
        lines.append("    if (fn == nullptr) {")
        lines.append(f'      report("{s.name}", "{s.node}", false);')
        lines.append("    } else {")
        if conv == "void":
            lines.append(f"      fn({args});")
        else:
            lines.append(f"      auto r = fn({args});")
        lines.append(f'      report("{s.name}", "{s.node}", {EXPECT[conv]});')
        lines.append("    }")
        lines.append("  }")
    lines += [
        f'  printf("{spec.library}: %d symbol versions called, %d failed as listed\\n", checked,',
        "         checked - failed);",
        "  dlclose(lib);",
        "  return failed == 0 && checked > 0 ? 0 : 1;",
        "}",
    ]
    write(path, lines)


def write(path, lines):
    text = "\n".join(lines) + "\n"
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return  # unchanged: keep the timestamp, so nothing rebuilds
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="the symbol list, e.g. libmlx5.symbols")
    parser.add_argument("--clang", default="clang", help="clang, for the header's AST (default: clang)")
    parser.add_argument("--include-dir", default="", help="where <infiniband/...> headers are")
    parser.add_argument("--out-dir", required=True, help="where the generated files go")
    args = parser.parse_args()

    spec = parse_spec(args.spec)
    names = sorted({s.name for s in spec.symbols})
    protos = header_prototypes(args.clang, args.include_dir, spec.header, names)
    conventions = {(s.name, s.node): convention(s, protos[s.name], args.spec) for s in spec.symbols}

    stem = spec.library.split(".so")[0]
    spec_name = os.path.basename(args.spec)
    os.makedirs(args.out_dir, exist_ok=True)
    write_stubs(spec, protos, conventions, os.path.join(args.out_dir, f"{stem}_stubs.cc"), spec_name)
    write_map(spec, os.path.join(args.out_dir, f"{stem}.map"), spec_name)
    write_calls_test(spec, protos, conventions, os.path.join(args.out_dir, f"{stem}_calls_test.cc"), spec_name)


if __name__ == "__main__":
    main()
