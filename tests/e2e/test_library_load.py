"""Every file Debian installed that links an RDMA library loads with vrdma's libraries.

For every ELF file of every installed package (dpkg's file lists) whose dynamic section
NEEDs libibverbs, librdmacm, a provider library (libmlx5, libmlx4, libefa, libmana) or
libibumad, the dynamic loader resolves every symbol and version with VRDMA_LIBDIR first
in LD_LIBRARY_PATH (`ldd -r`: LD_BIND_NOW, data and function relocations, "not found",
"version ... not found" and "undefined symbol" all reported), and each library vrdma ships
comes from VRDMA_LIBDIR. A problem counts when the same file has no such problem with
Debian's own libraries; files that cannot resolve even with Debian's libraries (plugins
whose symbols come from the program that loads them) are listed with what they lack.
Then the real clients start: fi_info, ucx_info, pyverbs, rdma-core's own test suite.
"""

import os
import re
import struct
import subprocess
import unittest

LIBDIR = os.environ.get("VRDMA_LIBDIR", "")
# The libraries vrdma ships in its directory, and libibumad, which stays Debian's own.
SHIPPED = ("libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libmlx4.so.1",
           "libefa.so.1", "libmana.so.1")
WATCHED = SHIPPED + ("libibumad.so.3",)
PROBLEM = re.compile(r"not found|undefined symbol|error while loading|cannot open")
# rdma-core 44's own test suite, kept beside the clone (../shared), not in it.
RDMA_CORE_TESTS = os.environ.get("VRDMA_RDMA_CORE_TESTS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "thirdparty",
    "rdma-core-44-tests")


def installed_files():
    """Every regular file that a package of dpkg's database installed, symlinks resolved."""
    packages = subprocess.run(["dpkg-query", "-W", "-f", "${binary:Package}\n"],
                              capture_output=True, text=True, check=True).stdout.split()
    files = set()
    for start in range(0, len(packages), 200):
        listing = subprocess.run(["dpkg-query", "-L", *packages[start:start + 200]],
                                 capture_output=True, text=True).stdout
        for line in listing.splitlines():
            if line.startswith("/") and os.path.isfile(line):
                files.add(os.path.realpath(line))
    return sorted(files)


def elf_needed(path):
    """The DT_NEEDED names of an ELF file (None if it is not an ELF file)."""
    try:
        with open(path, "rb") as f:
            ident = f.read(16)
            if len(ident) < 16 or ident[:4] != b"\x7fELF":
                return None
            wide, little = ident[4] == 2, ident[5] == 1
            e = "<" if little else ">"
            header = f.read(48 if wide else 36)
            if wide:
                shoff, = struct.unpack_from(e + "Q", header, 24)
                shentsize, shnum = struct.unpack_from(e + "HH", header, 42)
            else:
                shoff, = struct.unpack_from(e + "I", header, 16)
                shentsize, shnum = struct.unpack_from(e + "HH", header, 30)
            sections = []
            for i in range(shnum):
                f.seek(shoff + i * shentsize)
                raw = f.read(shentsize)
                if wide:
                    _, kind, _, _, off, size, link, _, _, entsize = struct.unpack_from(
                        e + "IIQQQQIIQQ", raw)
                else:
                    _, kind, _, _, off, size, link, _, _, entsize = struct.unpack_from(
                        e + "IIIIIIIIII", raw)
                sections.append((kind, off, size, link, entsize))
            needed = []
            for kind, off, size, link, entsize in sections:
                if kind != 6 or not entsize or link >= len(sections):  # SHT_DYNAMIC
                    continue
                f.seek(off)
                dynamic = f.read(size)
                _, str_off, str_size, _, _ = sections[link]
                f.seek(str_off)
                strings = f.read(str_size)
                for at in range(0, len(dynamic) - entsize + 1, entsize):
                    tag, value = struct.unpack_from(e + ("qQ" if wide else "iI"), dynamic, at)
                    if tag == 0:
                        break
                    if tag == 1:  # DT_NEEDED
                        needed.append(strings[value:strings.index(b"\0", value)].decode())
            return needed
    except (OSError, struct.error, ValueError):
        return None


def ldd(path, libdir):
    """(problem lines, {library name: resolved path}) of `ldd -r path`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir
    try:
        out = subprocess.run(["ldd", "-r", path], capture_output=True, text=True, env=env,
                             timeout=60)
    except subprocess.TimeoutExpired:
        return {"ldd timed out"}, {}
    problems, resolved = set(), {}
    for line in (out.stdout + out.stderr).splitlines():
        line = line.strip()
        if PROBLEM.search(line):
            problems.add(line)
        match = re.match(r"(\S+) => (\S+) \(0x", line)
        if match:
            resolved[match[1]] = match[2]
    if out.returncode != 0 and not problems:
        problems.add(f"ldd exited with {out.returncode}: {out.stderr.strip()}")
    return problems, resolved


def with_vrdma_libraries():
    # LD_BIND_NOW: every symbol of every library loaded, also by dlopen, resolves at once,
    # not at its first call (which, without a device, may never come).
    env = dict(os.environ, LD_LIBRARY_PATH=LIBDIR, LD_BIND_NOW="1", VRDMA_QUIET="1")
    env.pop("LD_PRELOAD", None)
    return env


@unittest.skipUnless(LIBDIR, "VRDMA_LIBDIR is not set (ctest sets it)")
class EveryLinkedFileResolves(unittest.TestCase):
    def test_every_file_that_links_an_rdma_library(self):
        for name in SHIPPED:
            self.assertTrue(os.path.exists(os.path.join(LIBDIR, name)), f"{name} not built")
        targets = []
        for path in installed_files():
            needed = elf_needed(path)
            if needed and any(n in WATCHED for n in needed):
                targets.append(path)
        print(f"\n{len(targets)} installed ELF files link {', '.join(WATCHED)}")
        self.assertGreater(len(targets), 0, "no installed file links an RDMA library: "
                           "scripts/setup.sh --deps installs the clients")

        failures, unresolved_anyway = [], []
        for path in targets:
            problems, resolved = ldd(path, LIBDIR)
            baseline, _ = ldd(path, "")
            for lib, where in resolved.items():
                if lib in SHIPPED and os.path.dirname(where) != os.path.realpath(LIBDIR) \
                        and os.path.dirname(where) != LIBDIR:
                    failures.append(f"{path}: {lib} resolved to {where}, not to {LIBDIR}")
            new = sorted(problems - baseline)
            if new:
                failures.append(f"{path}:\n    " + "\n    ".join(new))
            if baseline:
                unresolved_anyway.append((path, sorted(baseline)))
        if unresolved_anyway:
            print(f"{len(unresolved_anyway)} files do not resolve with Debian's own libraries "
                  "either (their symbols come from the program that loads them); with vrdma's "
                  "libraries they lack the same and nothing more:")
            for path, lines in unresolved_anyway:
                lacking = sorted({m[1] for m in (re.search(r"undefined symbol: (\S+)", line)
                                                 for line in lines) if m})
                shown = ", ".join(lacking[:6]) + (", ..." if len(lacking) > 6 else "")
                other = [line for line in lines if "undefined symbol" not in line]
                print(f"  {path}: {len(lacking)} undefined ({shown}){' ' if other else ''}"
                      f"{'; '.join(other)}")
        print(f"checked {len(targets)} files: {len(targets) - len(failures)} resolve, "
              f"{len(failures)} do not")
        if failures:
            self.fail(f"{len(failures)} files do not resolve with vrdma's libraries:\n"
                      + "\n".join(failures))


@unittest.skipUnless(LIBDIR, "VRDMA_LIBDIR is not set (ctest sets it)")
class ClientsStart(unittest.TestCase):
    """The real clients start with vrdma's libraries (no vrdmad here: no device)."""

    def run_client(self, *command, timeout=60):
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                             env=with_vrdma_libraries())
        text = out.stdout + out.stderr
        self.assertNotRegex(text, r"error while loading shared libraries|symbol lookup error|"
                            r"version `?'?\S+'? not found|undefined symbol")
        self.assertEqual(out.returncode, 0, text[-2000:])
        return out.stdout

    def test_libfabric(self):
        out = self.run_client("fi_info", "-l")
        self.assertRegex(out, r"(?m)^tcp:|^sockets:|^udp:")

    def test_ucx_loads_its_verbs_transport(self):
        env = dict(with_vrdma_libraries(), LD_DEBUG="files")
        out = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True, timeout=60,
                             env=env)
        errors = "\n".join(line.strip() for line in out.stderr.splitlines() if "error" in line)
        self.assertEqual(out.returncode, 0, errors)
        self.assertIn("Transport: self", out.stdout)
        # libuct_ib (which links libmlx5 and libibverbs) was opened and initialized. (UCX
        # itself looks up symbols that may not exist, which LD_DEBUG shows as errors too.)
        self.assertRegex(out.stderr, r"calling init: \S*/ucx/libuct_ib\.so", errors)
        self.assertRegex(out.stderr, rf"calling init: {re.escape(LIBDIR)}/libmlx5\.so\.1", errors)

    def test_pyverbs_imports(self):
        out = self.run_client("/usr/bin/python3", "-c",
                              "import pyverbs.device, pyverbs.cmid, pyverbs.qp; "
                              "import pyverbs.providers.mlx5.mlx5dv; "
                              "import pyverbs.providers.efa.efadv; print('imported')")
        self.assertIn("imported", out)

    @unittest.skipUnless(os.path.isdir(RDMA_CORE_TESTS),
                         "rdma-core's test suite is not beside this clone (../shared)")
    def test_rdma_core_test_suite_loads(self):
        out = self.run_client("/usr/bin/python3", os.path.join(RDMA_CORE_TESTS, "tests",
                                                               "run_tests.py"), "--list-tests")
        self.assertGreater(len(out.splitlines()), 100, out[-2000:])


if __name__ == "__main__":
    unittest.main()
