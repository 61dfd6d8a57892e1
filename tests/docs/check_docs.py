#!/usr/bin/env python3
"""The documentation's checks (ctest docs_check; no root):

- every relative link and image of README.md and of every page under docs/ points to a file or
  directory that exists, and every anchor (`page.md#anchor`, `#anchor`) to a heading of that
  page, by GitHub's rules for heading anchors (or an HTML id/name);
- README.md has at most 250 lines;
- every option that `vrdmad --help` prints is named on docs/configuration.md;
- every `docs/PAGE.md#anchor` that the help of vrdma (and of each of its subcommands, at every
  depth) and of vrdmad points to exists.

Before all that it checks a made-up tree with a broken link and a broken anchor, which must be
reported: the check can fail.

Usage: check_docs.py --source DIR --vrdma PROGRAM --vrdmad PROGRAM
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

README_MAX_LINES = 250
CONFIG_PAGE = os.path.join("docs", "configuration.md")

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HTML_ID = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.I)
HELP_DOC_LINK = re.compile(r"\bdocs/([\w./-]+\.md)(?:#([\w-]+))?")
HELP_OPTION = re.compile(r"^\s+(?:-\w,\s*)?(--[A-Za-z0-9][\w-]*)")


def text_lines(text):
    """The lines of a Markdown text outside fenced code blocks, with their numbers, and with
    indented code (four spaces or more) blanked."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.startswith("\t"):
            continue
        yield number, line


def heading_text(raw):
    """What GitHub renders of a heading's Markdown: code spans as their text, links as their
    text, emphasis markers gone."""
    raw = CODE_SPAN.sub(lambda m: m.group(2), raw)
    raw = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    raw = re.sub(r"<[^>]+>", "", raw)
    return re.sub(r"(\*\*|__|\*|_(?=\W)|(?<=\W)_)", "", raw)


def slug(text):
    """GitHub's anchor of a heading: lower case, punctuation removed (letters, digits, '_', '-'
    and spaces stay), each space a '-'."""
    s = heading_text(text).strip().lower()
    s = "".join(ch for ch in s if ch.isalnum() or ch in "_- ")
    return s.replace(" ", "-")


def anchors(text):
    """Every anchor a page has: its headings' slugs (repeats numbered -1, -2, ... as GitHub
    does) and HTML ids."""
    found, seen = set(), {}
    for _, line in text_lines(text):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        found.update(HTML_ID.findall(line))
    return found


def links(text):
    """(line number, target) of every link and image of a page (code excluded)."""
    for number, line in text_lines(text):
        stripped = CODE_SPAN.sub("", line)
        for m in INLINE_LINK.finditer(stripped):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(stripped)
        if m:
            yield number, m.group(1)


def is_external(target):
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) is not None


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for base, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def check_links(root):
    """Problems of the links of README.md and docs/ under root, one text each."""
    problems = []
    cache = {}

    def anchors_of(path):
        if path not in cache:
            with open(path, encoding="utf-8") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    for page in markdown_files(root):
        with open(page, encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(page, root)
        for number, target in links(text):
            if not target or is_external(target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                problems.append(f"{where}:{number}: {target}: no such file")
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                problems.append(f"{where}:{number}: {target}: no heading with anchor "
                                f"'{anchor}' in {os.path.relpath(dest, root)}")
    return problems


def self_test():
    """The link check on a made-up tree must find its broken link and its broken anchor, and
    nothing else."""
    with tempfile.TemporaryDirectory(prefix="vrdma-docs-check-") as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# Top\n\nSee [a](docs/a.md#the-options-of-a), [gone](docs/gone.md) and "
                    "[b](docs/a.md#no-such-heading).\n\n```sh\n[not](a-link.md)\n```\n")
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# A\n\n## The options of `a`\n\nBack to [the top](../README.md#top).\n")
        found = check_links(root)
    expected = ["README.md:3: docs/gone.md: no such file",
                "README.md:3: docs/a.md#no-such-heading: no heading with anchor "
                "'no-such-heading' in docs/a.md"]
    if sorted(found) != sorted(expected):
        raise SystemExit("docs_check: the link check does not find what it should on a broken "
                         f"tree:\n  found {found}\n  expected {expected}")


def run_help(program, *args):
    p = subprocess.run([program, *args, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"docs_check: {program} {' '.join(args)} --help failed "
                         f"({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def subcommands(help_text):
    names, on = [], False
    for line in help_text.splitlines():
        if re.match(r"^Subcommands:", line, re.I):
            on = True
            continue
        if on and line and not line.startswith(" "):
            on = False
        m = re.match(r"^  ([a-z][a-z0-9-]*)(\s|$)", line) if on else None
        if m:
            names.append(m.group(1))
    return names


def all_helps(program, *path):
    """{"vrdma sandbox up": its help, ...} for the program and every subcommand below it."""
    text = run_help(program, *path)
    out = {" ".join([os.path.basename(program), *path]): text}
    for sub in subcommands(text):
        out.update(all_helps(program, *path, sub))
    return out


def check_help_links(root, helps):
    problems = []
    for command, text in helps.items():
        for page, anchor in HELP_DOC_LINK.findall(text):
            dest = os.path.join(root, "docs", page)
            if not os.path.exists(dest):
                problems.append(f"{command} --help: docs/{page}: no such page")
            elif anchor:
                with open(dest, encoding="utf-8") as f:
                    if anchor not in anchors(f.read()):
                        problems.append(f"{command} --help: docs/{page}#{anchor}: no heading "
                                        "with that anchor")
    return problems


def check_options(root, vrdmad_help):
    options = sorted({m.group(1) for line in vrdmad_help.splitlines()
                      if (m := HELP_OPTION.match(line))})
    if len(options) < 20:
        return [f"vrdmad --help: only {len(options)} options found; has its format changed?"]
    with open(os.path.join(root, CONFIG_PAGE), encoding="utf-8") as f:
        page = f.read()
    return [f"{CONFIG_PAGE}: vrdmad's option {o} is not named" for o in options
            if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", page)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--vrdma", required=True)
    ap.add_argument("--vrdmad", required=True)
    args = ap.parse_args()
    root = os.path.abspath(args.source)

    self_test()
    problems = check_links(root)
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = f.read().count("\n")
    if lines > README_MAX_LINES:
        problems.append(f"README.md: {lines} lines, more than {README_MAX_LINES}")
    vrdmad_help = run_help(args.vrdmad)
    problems += check_options(root, vrdmad_help)
    helps = all_helps(args.vrdma)
    helps["vrdmad"] = vrdmad_help
    problems += check_help_links(root, helps)
    linked = sum(len(HELP_DOC_LINK.findall(t)) for t in helps.values())

    pages = markdown_files(root)
    print(f"docs_check: {len(pages)} pages, README.md {lines} lines, {len(helps)} help texts "
          f"({linked} links to docs/)")
    for p in problems:
        print(p)
    if problems:
        print(f"docs_check: {len(problems)} problem(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
