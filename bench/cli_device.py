#!/usr/bin/env python3
"""`qobs quantize --device cuda` against `--device cpu` on one generated checkpoint.

The device path's promise (docs/CLI.md, "Devices"): the output folder is the CPU run's
byte for byte, and it is faster. This writes one Llama-shaped bf16 checkpoint
(bench/cli_vs_model_free.py's generator), reads its files once as a plain read would
(the floor of any run that reads them; the page cache is warm for the read and both
runs alike), runs the CLI with --device cpu and with --device cuda on it, compares every
output file but the report (qobs-report.*, which holds timings) byte for byte, and
prints per run: wall seconds, the input's GB/s, and seconds per 8B parameters (scaled,
as docs/PERFORMANCE.md does, to Llama-3-8B's 6.98B Linear parameters).

    python bench/cli_device.py --qobs build/cli/qobs --layers 28 --hidden 2048 \\
        --intermediate 8192 --vocab 32000        # ~2.0B parameters, 4 GB bf16

Exit status: 0 when the folders are identical, 1 when they differ or a run fails, 77
(--allow-no-device) when --device cuda is refused because the machine has no usable
GPU: the refusal is printed, and the CPU run is still made and timed.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cli_identity import compare  # noqa: E402
from cli_vs_model_free import write_checkpoint  # noqa: E402

LLAMA3_8B_LINEAR_PARAMS = 6.98e9


def plain_read_seconds(folder):
    """Seconds to read every .safetensors file of the folder once, in 64 MiB pieces."""
    buf = bytearray(64 << 20)
    view = memoryview(buf)
    t0 = time.perf_counter()
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb", buffering=0) as f:
            while f.readinto(view):
                pass
    return time.perf_counter() - t0


def run(qobs, model, out, device, a):
    cmd = [qobs, "quantize", model, "-o", out, "--scheme", a.scheme, "--observer", a.observer, "--device", device,
           "--overwrite", "--no-baseline"]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qobs", default=os.path.join(os.path.dirname(HERE), "build", "cli", "qobs"))
    p.add_argument("--device", default="cuda", help="the device of the second run (default cuda)")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--scheme", default="NVFP4A16")
    p.add_argument("--observer", default="nvfp4_expanded_mse")
    p.add_argument("--threads", type=int, default=0, help="--threads of both runs (default: the CLI's, every core)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="keep the checkpoint and outputs here (default: a temporary folder)")
    p.add_argument("--allow-no-device", action="store_true",
                   help="a refused --device cuda (no usable GPU) exits 77 instead of 1")
    a = p.parse_args()

    work = a.workdir or tempfile.mkdtemp(prefix="qobs-cli-device-")
    model = os.path.join(work, "model")
    t0 = time.perf_counter()
    nbytes = write_checkpoint(model, a.layers, a.hidden, a.intermediate, a.vocab, a.seed)
    params = nbytes // 2
    linear = a.layers * (4 * a.hidden * a.hidden + 3 * a.hidden * a.intermediate)  # lm_head is not quantized
    print(f"checkpoint: {a.layers} layers, hidden {a.hidden}, intermediate {a.intermediate}, vocab {a.vocab}: "
          f"{params / 1e6:.1f}M parameters ({linear / 1e6:.1f}M in quantized Linears), {nbytes / 1e9:.3f} GB bf16, "
          f"written in {time.perf_counter() - t0:.1f} s; {a.scheme} {a.observer}", flush=True)
    gb = nbytes / 1e9
    per8b = LLAMA3_8B_LINEAR_PARAMS / linear

    def line(what, secs):
        print(f"  {what:22} {secs:8.2f} s  {gb / secs:7.2f} GB/s  {secs * per8b:8.1f} s per 8B parameters", flush=True)

    read = min(plain_read_seconds(model) for _ in range(2))
    line("plain read", read)
    outs = {}
    status = 0
    for device in ("cpu", a.device):
        out = os.path.join(work, "out-" + device.replace(":", "-"))
        secs, r = run(a.qobs, model, out, device, a)
        if r.returncode != 0:
            err = r.stderr.strip()
            refused = device != "cpu" and f"--device {device}" in err
            print(f"  --device {device:13} FAILED (exit {r.returncode}): {err}", flush=True)
            if refused and a.allow_no_device:
                status = status or 77
            else:
                status = 1
            continue
        line(f"--device {device}", secs)
        for note in r.stderr.strip().splitlines():
            if note.startswith("qobs: --device") or " stay" in note:
                print(f"    {note}")
        outs[device] = out
    if len(outs) == 2:
        problems, n = compare(outs["cpu"], outs[a.device])
        if problems:
            print(f"DIFFERENT ({len(problems)} of {n} files): " + "; ".join(problems[:5]))
            return 1
        print(f"identical: {n} files of --device cpu and --device {a.device}")
    return status


if __name__ == "__main__":
    sys.exit(main())
