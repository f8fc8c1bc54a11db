#!/usr/bin/env python3
"""Checks the layering of the library against the table in docs/ARCHITECTURE.md.

The table between `<!-- layers:begin -->` and `<!-- layers:end -->` in
docs/ARCHITECTURE.md is the one statement of which layer may use which: one row per
layer with its folder and the layers it links directly. A layer may include the
private headers of itself and of every layer it reaches through those links; the
public headers (`qobs/...`, include/) are visible to every layer. This script holds the
code and the build to that table:

  * every `#include` of a file in a layer's folder names a header of an allowed layer
    (`core/check.h` is a header of the core layer, `hwy/highway.h` of no layer);
    public headers (include/qobs/) and the `public` rows (cli/, python/src/) include
    only public headers;
  * no include path contains `..`, which would reach around the per-layer include
    roots that make the build reject an upward include (src/CMakeLists.txt);
  * each qobs_layer(...) call in src/**/CMakeLists.txt links (DEPS qobs_*) exactly the
    layers of its row, and compiles only sources inside its own folder; every folder
    under src/ is a row of the table;
  * the umbrella header include/qobs/qobs.h includes every public header.

Exit status 0 when everything agrees, 1 otherwise (each problem printed as
`file:line: message`). `--self-test` runs the checker on a small generated tree with
known violations and fails unless it reports each of them. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = Path("docs") / "ARCHITECTURE.md"
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp"}
PUBLIC_PREFIX = "qobs"  # include/qobs/...: the public headers

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TABLE = re.compile(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", re.S)
OPTIONAL_PUBLIC_HEADERS = {"mpi.h"}
LAYER_CALL = re.compile(r"qobs_layer\s*\((.*?)\)", re.S)


class Layer:
    def __init__(self, name: str, folder: str, deps: list[str], line: int):
        self.name, self.folder, self.deps, self.line = name, folder, deps, line


def parse_table(root: Path, problems: list[str]) -> dict[str, Layer]:
    text = (root / DOC).read_text(encoding="utf-8")
    m = TABLE.search(text)
    if not m:
        problems.append(f"{DOC}: no `<!-- layers:begin -->` ... `<!-- layers:end -->` table")
        return {}
    first_line = text.count("\n", 0, m.start(1)) + 1
    layers: dict[str, Layer] = {}
    for offset, row in enumerate(m.group(1).splitlines()):
        cells = [c.strip().strip("`") for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "") or set(cells[0]) <= set("-: "):
            continue
        name, folder = cells[0], cells[1].rstrip("/")
        deps = [d.strip().strip("`") for d in cells[2].split(",") if d.strip().strip("`") not in ("", "-", "—")]
        layers[name] = Layer(name, folder, deps, first_line + offset)
    for layer in layers.values():
        for d in layer.deps:
            if d not in layers:
                problems.append(f"{DOC}:{layer.line}: layer {layer.name} depends on unknown layer {d}")
    return layers


def reachable(layers: dict[str, Layer], name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur in seen or cur not in layers:
            continue
        seen.add(cur)
        todo.extend(layers[cur].deps)
    return seen


def check_includes(root: Path, layers: dict[str, Layer], problems: list[str]) -> None:
    # layers whose private headers live under src/<name>/ (the others are public-only rows)
    private = {n for n, l in layers.items() if l.folder == f"src/{n}"}
    # the public headers: a row of their own that sees no private header
    scopes = [(l.name, l.folder, reachable(layers, l.name) & private) for l in layers.values()]
    scopes.append(("the public headers", "include", set()))
    for name, folder, allowed in scopes:
        base = root / folder
        if not base.is_dir():
            if name in layers:
                problems.append(f"{DOC}:{layers[name].line}: folder {folder} of layer {name} does not exist")
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(2).strip()
                parts = inc.split("/")
                where = f"{rel}:{lineno}"
                if ".." in parts:
                    problems.append(f"{where}: include \"{inc}\" uses `..`; name the header from its layer root")
                    continue
                top = parts[0]
                if len(parts) == 1:
                    continue  # a header next to the including file, or a system / library header
                if top == PUBLIC_PREFIX or top not in private:
                    continue  # public header, or a header of no layer (hwy/, nlohmann/, ...)
                if top not in allowed:
                    who = f"layer {name}" if name in layers else name
                    problems.append(f"{where}: {who} may not include \"{inc}\" (layer {top}); {DOC} allows "
                                    f"{', '.join(sorted(allowed)) or 'public headers only'}")


def check_cmake(root: Path, layers: dict[str, Layer], problems: list[str]) -> None:
    src = root / "src"
    seen: set[str] = set()
    for cml in sorted(src.rglob("CMakeLists.txt")):
        text = cml.read_text(encoding="utf-8")
        for m in LAYER_CALL.finditer(text):
            where = f"{cml.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1}"
            tokens = m.group(1).split()
            if not tokens or not tokens[0].startswith("qobs_"):
                continue
            name = tokens[0][len("qobs_"):]
            seen.add(name)
            if name not in layers:
                problems.append(f"{where}: qobs_layer({tokens[0]}) has no row in the table of {DOC}")
                continue
            section, sources, deps = None, [], []
            for tok in tokens[1:]:
                if tok in ("SOURCES", "DEPS"):
                    section = tok
                elif section == "SOURCES":
                    sources.append(tok)
                elif section == "DEPS" and tok.startswith("qobs_"):
                    deps.append(tok[len("qobs_"):])
            if sorted(deps) != sorted(layers[name].deps):
                problems.append(f"{where}: qobs_{name} links {', '.join(sorted(deps)) or 'no layer'}; "
                                f"{DOC} says {', '.join(sorted(layers[name].deps)) or 'none'}")
            folder = (root / layers[name].folder).resolve()
            for s in sources:
                if "${" in s:
                    continue  # a list variable (the kernels' sources): not expanded here
                p = (cml.parent / s).resolve()
                if folder not in p.parents:
                    problems.append(f"{where}: qobs_{name} compiles {s}, outside its folder {layers[name].folder}")
    for name, layer in layers.items():
        if layer.folder == f"src/{name}" and name not in seen:
            problems.append(f"{DOC}:{layer.line}: layer {name} has no qobs_layer(qobs_{name} ...) call")
    for d in sorted(p for p in src.iterdir() if p.is_dir()):
        if d.name not in layers:
            problems.append(f"src/{d.name}: folder is no layer of the table in {DOC}")


def check_umbrella(root: Path, problems: list[str]) -> None:
    umbrella = root / "include" / PUBLIC_PREFIX / "qobs.h"
    if not umbrella.is_file():
        return
    included = {m.group(2) for m in map(INCLUDE.match, umbrella.read_text(encoding="utf-8").splitlines()) if m}
    for header in sorted(umbrella.parent.glob("*.h")):
        name = f"{PUBLIC_PREFIX}/{header.name}"
        # qobs/mpi.h needs <mpi.h> and exists only in a QOBS_MPI build's library.
        if header != umbrella and name not in included and header.name not in OPTIONAL_PUBLIC_HEADERS:
            problems.append(f"{umbrella.relative_to(root)}: the umbrella header does not include \"{name}\"")


def check(root: Path) -> list[str]:
    problems: list[str] = []
    layers = parse_table(root, problems)
    if layers:
        check_includes(root, layers, problems)
        check_cmake(root, layers, problems)
    check_umbrella(root, problems)
    return problems


def self_test() -> int:
    """The checker must report each planted violation (and nothing in a clean tree)."""
    table = ("<!-- layers:begin -->\n| layer | folder | depends on |\n|---|---|---|\n"
             "| low | `src/low/` | — |\n| high | `src/high/` | low |\n| app | `app/` | — |\n"
             "<!-- layers:end -->\n")
    cmake = "qobs_layer(qobs_low SOURCES low/a.cc)\nqobs_layer(qobs_high SOURCES high/b.cc DEPS qobs_low)\n"
    clean = {
        "src/low/a.h": "#pragma once\n#include <vector>\n#include \"qobs/x.h\"\n",
        "src/low/a.cc": "#include \"low/a.h\"\n#include \"a.h\"\n#include \"hwy/highway.h\"\n",
        "src/high/b.cc": "#include \"high/b.h\"\n#include \"low/a.h\"\n",
        "src/high/b.h": "#pragma once\n",
        "app/main.cc": "#include \"qobs/x.h\"\n",
        "include/qobs/x.h": "#pragma once\n",
        "include/qobs/qobs.h": "#pragma once\n#include \"qobs/x.h\"\n",
    }
    planted = {
        "src/low/up.cc": ("#include \"high/b.h\"\n", "layer low may not include \"high/b.h\""),
        "src/low/rel.cc": ("#include \"../high/b.h\"\n", "uses `..`"),
        "app/private.cc": ("#include <low/a.h>\n", "layer app may not include \"low/a.h\""),
        "src/orphan/c.cc": ("\n", "src/orphan: folder is no layer"),
        "include/qobs/z.h": ("#include \"low/a.h\"\n", "the public headers may not include \"low/a.h\""),
        "include/qobs/w.h": ("#pragma once\n", "does not include \"qobs/w.h\""),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def write(files: dict[str, str], cm: str) -> None:
            (root / "docs").mkdir(exist_ok=True)
            (root / DOC).write_text(table, encoding="utf-8")
            (root / "src").mkdir(exist_ok=True)
            (root / "src" / "CMakeLists.txt").write_text(cm, encoding="utf-8")
            for rel, body in files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(body, encoding="utf-8")

        write(clean, cmake)
        got = check(root)
        if got:
            print("self-test: the clean tree was reported:\n  " + "\n  ".join(got))
            failures += 1
        write({k: v[0] for k, v in planted.items()}, cmake + "qobs_layer(qobs_high SOURCES ../x.cc DEPS)\n")
        got = check(root)
        expected = [v[1] for v in planted.values()] + ["qobs_high links no layer", "outside its folder"]
        for want in expected:
            if not any(want in p for p in got):
                print(f"self-test: no problem reported containing {want!r}; got:\n  " + "\n  ".join(got))
                failures += 1
    print("self-test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    ap.add_argument("--self-test", action="store_true", help="check the checker on planted violations")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); the table is in {DOC}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
