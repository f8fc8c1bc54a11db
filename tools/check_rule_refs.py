#!/usr/bin/env python3
"""Checks that every behavioural rule id cited in the repository resolves in docs/RULES.md.

Code comments, tests and documents cite rules as `R4.1`, `R6.10.2`, `R0.4e` (item e of
R0.4), quirks as `Q23` and open points as `A2`. Each cited id must have an explicit
anchor `<a id="..."></a>` in docs/RULES.md, so that `docs/RULES.md#R4.1` links work and
the repository stands on its own. The checker also rejects paths that point at the
specification folder outside the repository (a `shared` folder next to the checkout):
the rules live in docs/RULES.md.

Scanned: src/, include/, python/, cli/, tests/, tools/, bench/, fuzz/, examples/, docs/
and README.md (text files only; base64 payloads of the golden JSON files are skipped).

Recognized forms (word-bounded, so hex literals, base64 and identifiers such as
`W4A16`, `0xA9` or `kQ8` are not references):
  R<n>[.<n>...][<letter>]   a rule, a section (`R4`) or an item of a rule (`R0.4e`;
                            the letter is dropped before the lookup)
  Q<n>                      a quirk
  A<d>                      an open point, a single digit 1-9 (`A16` in `W4A16` and a
                            quoted "A8" are preset-name fragments, not references)

Exit status 0 when everything resolves, 1 otherwise (each problem printed as
`file:line: message`). `--list` prints every cited id with its number of citations.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "RULES.md"
SCAN_DIRS = ["src", "include", "python", "cli", "tests", "tools", "bench", "fuzz", "examples", "docs"]
SCAN_FILES = ["README.md"]
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache"}
SKIP_DIR_PREFIXES = ("build", ".venv", "venv")
BINARY_SUFFIXES = {
    ".safetensors", ".bin", ".so", ".a", ".o", ".pyc", ".png", ".jpg", ".gz", ".zip", ".whl", ".pt",
}

# R / Q ids: not preceded by a letter, digit or underscore (hex literals, identifiers),
# optionally followed by one lower-case item letter, then a word boundary.
RQ_ID = r"(?<![A-Za-z0-9_])(?P<rq>R\d+(?:\.\d+)*|Q\d+)(?P<item>[a-z])?(?![A-Za-z0-9_])"
# A ids: single digit; additionally not preceded by a quote, `*` or `}` (preset-name
# pieces such as "W" + b + "A8", W*n*A16 or W{b}A8).
A_ID = r"(?<![A-Za-z0-9_\"*}])(?P<a>A[1-9])(?![A-Za-z0-9_])"
REF = re.compile(RQ_ID + "|" + A_ID)
ANCHOR = re.compile(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""")
# Paths that leave the repository for the external specification folder.
OUTSIDE = re.compile(r"(?:\.\./)+shared/|(?<![\w./-])shared/SPEC\.md")
B64_VALUE = re.compile(r'"b64"\s*:\s*"[^"]*"')


def iter_files():
    for d in SCAN_DIRS:
        base = ROOT / d
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(
                n for n in dirnames
                if n not in SKIP_DIRS and not n.startswith(SKIP_DIR_PREFIXES) and not n.endswith(".egg-info")
            )
            for name in sorted(filenames):
                p = Path(dirpath) / name
                if p.suffix.lower() not in BINARY_SUFFIXES:
                    yield p
    for f in SCAN_FILES:
        p = ROOT / f
        if p.is_file():
            yield p


def read_text(path: Path):
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def rule_anchors():
    text = read_text(RULES)
    if text is None:
        return None, []
    anchors = defaultdict(list)
    for i, line in enumerate(text.split("\n"), 1):
        for m in ANCHOR.finditer(line):
            anchors[m.group(1)].append(i)
    dups = [(a, lines) for a, lines in anchors.items() if len(lines) > 1]
    return set(anchors), dups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print every cited id and how often it is cited")
    opts = ap.parse_args(argv)

    anchors, dups = rule_anchors()
    if anchors is None:
        print(f"{RULES.relative_to(ROOT)}: missing or unreadable", file=sys.stderr)
        return 1
    problems = []
    for a, lines in dups:
        problems.append(f"docs/RULES.md:{lines[1]}: anchor {a} defined more than once (lines {lines})")

    cited = defaultdict(int)
    nfiles = 0
    for path in iter_files():
        text = read_text(path)
        if text is None:
            continue
        nfiles += 1
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix == ".json":
            text = B64_VALUE.sub('"b64":""', text)
        for lineno, line in enumerate(text.split("\n"), 1):
            for m in OUTSIDE.finditer(line):
                problems.append(f"{rel}:{lineno}: points outside the repository ({m.group(0)}); "
                                "cite docs/RULES.md instead")
            for m in REF.finditer(line):
                rid = m.group("rq") or m.group("a")
                cited[rid] += 1
                if rid not in anchors:
                    shown = rid + (m.group("item") or "")
                    problems.append(f"{rel}:{lineno}: {shown} has no anchor in docs/RULES.md")

    if opts.list:
        key = lambda k: (k[0], [int(x) for x in re.findall(r"\d+", k)])
        for rid in sorted(cited, key=key):
            print(f"{rid}\t{cited[rid]}")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        print(f"check_rule_refs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_rule_refs: {len(cited)} distinct ids cited in {nfiles} files, all resolve in docs/RULES.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
