#!/usr/bin/env python3
"""docs/ARCHITECTURE.md's kernel concept table against the tree.

Every path in the table between the kernel-concepts markers exists (paths under
tests/ from the repository root, the others from src/kernels/), and every folder of
src/kernels/ has a row. Exit 1 with one line per problem.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- kernel-concepts:begin -->(.*?)<!-- kernel-concepts:end -->", doc, re.S)
    if not m:
        print("docs/ARCHITECTURE.md: no kernel-concepts table")
        return 1
    problems = []
    concepts = set()
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or cells[0] in ("concept", "") or set(cells[0]) <= set("-"):
            continue
        concepts.add(cells[0].split(":")[0].strip())
        for cell in cells[1:]:
            for path in re.findall(r"`([^`]+)`", cell):
                full = ROOT / path if path.startswith("tests/") else ROOT / "src" / "kernels" / path
                if not full.is_file():
                    problems.append(f"docs/ARCHITECTURE.md: concept {cells[0].split(':')[0]!r} names {path}, which does not exist")
    folders = {p.name for p in (ROOT / "src" / "kernels").iterdir() if p.is_dir() and any(p.iterdir())}
    for f in sorted(folders - concepts):
        problems.append(f"src/kernels/{f}/ has no row in docs/ARCHITECTURE.md's kernel-concepts table")
    for c in sorted(concepts - folders):
        problems.append(f"docs/ARCHITECTURE.md: concept {c!r} has no folder src/kernels/{c}/")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
