#!/usr/bin/env python3
"""Two `qobs quantize` runs compared byte for byte, over a matrix of schemes and observers.

The check behind every change that must not move a result: a refactor (two builds,
before and after), another device (`--b-args "--device cuda"`), another thread count.
Run with an interpreter that has torch and safetensors (for the synthetic checkpoint):

    python bench/cli_identity.py --a /path/to/old/qobs --b build/cli/qobs \\
        --schemes W4A16 NVFP4A16 \\
        --observers memoryless_minmax memoryless_mse nvfp4_expanded_mse lsq_mse imatrix_lsq

It writes one Llama-shaped bf16 checkpoint (bench/cli_vs_model_free.py's generator:
random N(0, 0.02) weights with a few outliers per row, fixed seed), runs both binaries
on it for every (scheme, observer) pair the first binary accepts (the
importance-weighted observers with a synthetic importance file), and compares every
file of the two outputs byte for byte, except the run's report (qobs-report.*, which
holds timings) and the names given to --skip. A pair the first binary refuses (an
observer that does not take the scheme's format) is listed as skipped; a pair the second
refuses while the first took it is a difference. Prints one line per pair and exits 1 on any difference.
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cli_vs_model_free import write_checkpoint  # noqa: E402


# The observers that need an input importance file (docs/CLI.md, "Importance").
IMPORTANCE_OBSERVERS = {"imatrix_mse", "nvfp4_expanded_imatrix", "imatrix_lsq"}


def write_importance(model, path, seed):
    """A synthetic importance file for every 2-D Linear weight of the checkpoint:
    E[x^2]-like positive sums (a few large features, as real activations have) and a
    row count, in the format of docs/CLI.md ("Importance")."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed + 1)
    out = {}
    with safe_open(os.path.join(model, "model.safetensors"), "pt") as f:
        for name in f.keys():
            if not name.endswith("proj.weight"):
                continue
            cols = f.get_slice(name).get_shape()[1]
            s = torch.rand(cols, generator=g) * 50 + 1
            s[torch.randint(0, cols, (4,), generator=g)] *= 100
            module = name[: -len(".weight")]
            out[module + ".importance_sum"] = s.to(torch.float32)
            out[module + ".importance_count"] = torch.tensor(512, dtype=torch.int64)
    save_file(out, path, metadata={"qobs.format": "qobs-importance", "qobs.format_version": "1"})


def run(binary, extra, model, out, scheme, observer, threads, importance):
    cmd = [binary, "quantize", model, "-o", out, "--scheme", scheme, "--observer", observer,
           "--threads", str(threads), "--overwrite"] + extra
    if observer in IMPORTANCE_OBSERVERS:
        cmd += ["--importance", importance]
    return subprocess.run(cmd, capture_output=True, text=True)


def outputs(folder, skip=()):
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            if n.startswith("qobs-report.") or n in skip:
                continue
            full = os.path.join(root, n)
            files[os.path.relpath(full, folder)] = full
    return files


def compare(a_dir, b_dir, skip=()):
    fa, fb = outputs(a_dir, skip), outputs(b_dir, skip)
    problems = [f"only in A: {k}" for k in sorted(set(fa) - set(fb))]
    problems += [f"only in B: {k}" for k in sorted(set(fb) - set(fa))]
    for k in sorted(set(fa) & set(fb)):
        with open(fa[k], "rb") as x, open(fb[k], "rb") as y:
            if x.read() != y.read():
                problems.append(f"differs: {k}")
    return problems, len(set(fa) & set(fb))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="the first qobs binary")
    p.add_argument("--b", required=True, help="the second qobs binary")
    p.add_argument("--a-args", default="", help="extra arguments for the first binary")
    p.add_argument("--b-args", default="", help="extra arguments for the second binary")
    p.add_argument("--schemes", nargs="+", default=["W4A16", "NVFP4A16"])
    p.add_argument("--observers", nargs="+",
                   default=["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "lsq_mse", "imatrix_lsq"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="keep the checkpoint and outputs here (default: a temporary folder)")
    p.add_argument("--skip", nargs="*", default=[],
                   help="file names left out of the comparison, for a change that alters them on purpose "
                        "(e.g. config.json across a new compressed-tensors config shape)")
    a = p.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="qobs-cli-identity-")
    model = os.path.join(work, "model")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        size = write_checkpoint(model, a.layers, a.hidden, a.intermediate, a.vocab, a.seed)
        print(f"checkpoint: {model} ({size / 1e6:.1f} MB bf16, {a.layers} layers, hidden {a.hidden})")
    importance = os.path.join(work, "importance.safetensors")
    if not os.path.exists(importance):
        write_importance(model, importance, a.seed)
    differences = compared = 0
    for scheme in a.schemes:
        for observer in a.observers:
            out_a = os.path.join(work, f"a-{scheme}-{observer}")
            out_b = os.path.join(work, f"b-{scheme}-{observer}")
            ra = run(a.a, shlex.split(a.a_args), model, out_a, scheme, observer, a.threads, importance)
            if ra.returncode != 0:
                print(f"{scheme:10} {observer:22} skipped: A refused ({ra.stderr.strip().splitlines()[-1:]})")
                continue
            rb = run(a.b, shlex.split(a.b_args), model, out_b, scheme, observer, a.threads, importance)
            if rb.returncode != 0:
                print(f"{scheme:10} {observer:22} DIFFERENT: B failed: {rb.stderr.strip()}")
                differences += 1
                continue
            problems, n = compare(out_a, out_b, set(a.skip))
            compared += 1
            if problems:
                differences += 1
                print(f"{scheme:10} {observer:22} DIFFERENT ({len(problems)} of {n} files): " + "; ".join(problems[:5]))
            else:
                print(f"{scheme:10} {observer:22} identical ({n} files)")
    skipped = f" (not compared: {', '.join(a.skip)})" if a.skip else ""
    print(f"{compared} pairs compared, {differences} with differences{skipped}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
