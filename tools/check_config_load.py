#!/usr/bin/env python3
"""The config.json `qobs quantize` writes, loaded by compressed-tensors 0.19.0 and 0.20.1.

For every preset it quantizes a tiny Llama-shaped bf16 checkpoint with the qobs CLI,
then, in each reference interpreter, reads the output's quantization_config through
`QuantizationConfig.model_validate` and through the path transformers' loader takes
(`CompressedTensorsConfig.from_dict`, then `ModelCompressor.from_compression_config`),
and compares each group's args, as that release serializes them, with its own preset of
the same name, and the group's format with the one qobs wrote. Prints a preset x release matrix (docs/RULES.md R8.7.6):

    python3 tools/check_config_load.py --qobs build/cli/qobs \\
        --old-python /work/venv-ref/bin/python --new-python /work/venv-ct020/bin/python

The old interpreter has compressed-tensors 0.19.0, the new one 0.20.1; both need torch,
transformers and safetensors (the new one writes the checkpoint). A preset that qobs
refuses (static input activations need calibration data) is listed as such. 0.19.0 has
no FP6: its own validation refuses float args of 6 bits, so it cannot load an MXFP6
config from any writer; those two cells are reported as "no FP6 in 0.19.0" and do not
fail the run. Exits 1 on any other failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The preset names of compressed-tensors 0.20.1, R1.5's order.
PRESETS = ["UNQUANTIZED", "W2A4", "W2A8", "W2A16", "W3A4", "W3A8", "W3A16", "W4A4", "W4A8", "W4A16", "W5A8", "W5A16",
           "W6A8", "W6A16", "W7A8", "W7A16", "W8A16", "W4A16_ASYM", "W8A8", "INT8", "W4AFP8", "FP8", "FP8_DYNAMIC",
           "FP8_BLOCK", "NVFP4A16", "NVFP4", "MXFP4A16", "MXFP4", "MXFP4XFP8", "MXFP6A16", "MXFP6A8", "MXFP8A16",
           "MXFP8"]
FP6_PRESETS = {"MXFP6A16", "MXFP6A8"}

WRITE_CHECKPOINT = """
import sys
sys.path.insert(0, {bench!r})
from cli_vs_model_free import write_checkpoint
write_checkpoint({path!r}, layers=1, hidden=256, inter=512, vocab=128, seed=0)
"""

# Run in a reference interpreter: one JSON line per output folder.
LOAD = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import compressed_tensors
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import QuantizationConfig
from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES, preset_name_to_scheme
from transformers.utils.quantization_config import CompressedTensorsConfig

for line in sys.stdin:
    preset, folder = line.split()
    r = {"preset": preset, "version": compressed_tensors.__version__}
    try:
        with open(folder + "/config.json") as f:
            qc = json.load(f)["quantization_config"]
        cfg = QuantizationConfig.model_validate(qc)
        mc = ModelCompressor.from_compression_config(CompressedTensorsConfig.from_dict(qc))
        assert mc.quantization_config is not None, "the loader found no quantization config"
        assert mc.quantization_config == cfg, "the loader's config and model_validate's disagree"
        (name, scheme), = cfg.config_groups.items()
        if preset.upper() in PRESET_SCHEMES:
            want = preset_name_to_scheme(preset, ["Linear"])
            # compared as this release serializes them: a symmetric zp_dtype (the MX
            # presets' uint8) is never written, so parsing infers another in memory
            for role in ("weights", "input_activations", "output_activations"):
                got_a, want_a = getattr(scheme, role), getattr(want, role)
                dump = lambda x: None if x is None else x.model_dump(mode="json")  # noqa: E731
                assert dump(got_a) == dump(want_a), f"{role}: {dump(got_a)} != preset {dump(want_a)}"
            r["compared"] = "args equal this release's preset"
        else:
            r["compared"] = "preset unknown to this release"
        assert scheme.format == qc["config_groups"][name]["format"], "format"
        r["ok"] = True
    except Exception as e:  # noqa: BLE001 - every failure is the result
        r["ok"] = False
        r["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    print(json.dumps(r), flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qobs", required=True, help="the qobs CLI")
    ap.add_argument("--old-python", required=True, help="interpreter with compressed-tensors 0.19.0")
    ap.add_argument("--new-python", required=True, help="interpreter with compressed-tensors 0.20.1")
    ap.add_argument("--work", help="working folder (default: a temporary one)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="qobs-config-load-")
    model = os.path.join(work, "model")
    subprocess.run([a.new_python, "-c", WRITE_CHECKPOINT.format(bench=os.path.join(ROOT, "bench"), path=model)],
                   check=True)
    outputs, refused = [], {}
    for p in PRESETS:
        out = os.path.join(work, p)
        r = subprocess.run([a.qobs, "quantize", model, "-o", out, "--scheme", p, "--threads", "2", "--overwrite", "--quiet", "--no-baseline"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            refused[p] = (r.stderr.strip().splitlines() or ["?"])[-1][:120]
        else:
            outputs.append((p, out))
    results = {}
    for label, py in (("0.19.0", a.old_python), ("0.20.1", a.new_python)):
        r = subprocess.run([py, "-c", LOAD], input="".join(f"{p} {o}\n" for p, o in outputs), capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"{py}: {r.stderr}")
        for line in r.stdout.splitlines():
            d = json.loads(line)
            results[(d["preset"], label)] = d
    bad = 0
    print(f"{'preset':<12} {'compressed-tensors 0.19.0':<48} compressed-tensors 0.20.1")
    for p in PRESETS:
        if p in refused:
            print(f"{p:<12} refused by qobs: {refused[p]}")
            continue
        cells = []
        for label in ("0.19.0", "0.20.1"):
            d = results[(p, label)]
            if d["ok"]:
                cells.append("loads, " + d["compared"])
            elif label == "0.19.0" and p in FP6_PRESETS:
                cells.append("no FP6 in 0.19.0: " + d["error"][:60])
            else:
                cells.append("FAILS: " + d["error"])
                bad += 1
        print(f"{p:<12} {cells[0]:<48} {cells[1]}")
    print(f"\n{len(outputs)} configs written, {len(refused)} presets refused by qobs, {bad} unexpected failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
