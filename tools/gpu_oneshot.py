#!/usr/bin/env python3
"""llm-compressor `oneshot` on a randomly initialised Llama, with the reference's or
qobs' weight observers: wall times and whether the qparams agree.

    python3 tools/gpu_oneshot.py --observers ref  --scheme W4A16    --dir /tmp/os
    python3 tools/gpu_oneshot.py --observers qobs --scheme W4A16    --dir /tmp/os
    python3 tools/gpu_oneshot.py --compare --dir /tmp/os

The model comes from a transformers LlamaConfig with a fixed seed (no download), is
saved to a temporary folder and loaded from there (oneshot reads the config from the
model's path), and is calibrated by a QuantizationModifier with the preset scheme whose
weight observer is memoryless_mse (W4A16) or nvfp4_expanded_mse (NVFP4A16), or their
qobs_* counterparts (`import qobs.llmcompressor`). Weight-only schemes need no data, so
oneshot runs its data-free pipeline: no tokenizer, no dataset. llm-compressor moves the
weights to its main device (the GPU when there is one), so the reference's observers see
CUDA tensors there (docs/RULES.md R6.6.10) and the qobs plugin copies them to the host.
Each run appends one JSON line to DIR/runs.jsonl (wall time of oneshot and of the
compressed save_pretrained) and saves every quantized Linear's weight_scale /
weight_zero_point / weight_global_scale to DIR/<observers>-<scheme>.pt. --compare prints
a markdown table of the runs and, per scheme, how many modules' qparams are byte-identical
between the two observer sets (they need not be on CUDA: the reference's Triton search
has its own selection rule, R6.6.9).
"""
import argparse
import json
import os
import sys
import tempfile
import time

OBSERVER = {"W4A16": "memoryless_mse", "NVFP4A16": "nvfp4_expanded_mse"}
SIZES = {  # hidden, intermediate, layers, heads, kv heads, vocab
    "tiny": (128, 256, 2, 4, 2, 512),
    "small": (1024, 2816, 4, 8, 2, 4096),
    "medium": (2048, 5632, 4, 16, 4, 8192),
}


def run(a):
    import torch
    from compressed_tensors.quantization import preset_name_to_scheme
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import LlamaConfig, LlamaForCausalLM

    observer = OBSERVER[a.scheme]
    if a.observers == "qobs":
        import qobs.llmcompressor  # noqa: F401  registers the qobs_* observers

        observer = "qobs_" + observer
    hidden, inter, layers, heads, kv, vocab = SIZES[a.size]
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                      max_position_embeddings=512)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "model")
        LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(src)
        model = LlamaForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
        if torch.cuda.is_available():  # calibrate where users do; llm-compressor may still offload
            model.to("cuda")
        params_m = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
        scheme = preset_name_to_scheme(a.scheme, ["Linear"])
        scheme.weights.observer = observer
        recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
        t0 = time.perf_counter()
        oneshot(model=model, recipe=recipe)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t_oneshot = time.perf_counter() - t0
        qparams = {}
        devices = set()
        for name, mod in model.named_modules():
            if hasattr(mod, "weight_scale"):
                devices.add(str(mod.weight.device))
                qparams[name] = {k: getattr(mod, k).detach().to("cpu").clone()
                                 for k in ("weight_scale", "weight_zero_point", "weight_global_scale")
                                 if getattr(mod, k, None) is not None}
        torch.save(qparams, os.path.join(a.dir, f"{a.observers}-{a.scheme}.pt"))
        t0 = time.perf_counter()
        model.save_pretrained(os.path.join(tmp, "out"), save_compressed=True)
        t_save = time.perf_counter() - t0
    row = {"observers": a.observers, "scheme": a.scheme, "observer": observer, "size": a.size,
           "params_m": params_m, "oneshot_s": round(t_oneshot, 2),
           "save_compressed_s": round(t_save, 2), "modules": len(qparams), "weight_devices": sorted(devices),
           "cuda": torch.cuda.is_available()}
    with open(os.path.join(a.dir, "runs.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row))


def compare(a):
    import torch

    runs = [json.loads(line) for line in open(os.path.join(a.dir, "runs.jsonl"))] \
        if os.path.exists(os.path.join(a.dir, "runs.jsonl")) else []
    lines = ["| observers | scheme | size | params (M) | oneshot s | save_compressed s | weights on |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['observer']} | {r['scheme']} | {r['size']} | {r['params_m']} | {r['oneshot_s']} | "
                     f"{r['save_compressed_s']} | {','.join(r['weight_devices'])} |")
    lines.append("")
    for scheme in OBSERVER:
        paths = [os.path.join(a.dir, f"{o}-{scheme}.pt") for o in ("ref", "qobs")]
        if not all(os.path.exists(p) for p in paths):
            continue
        ref, qo = (torch.load(p) for p in paths)
        same = sum(1 for m in ref if m in qo and all(
            k in qo[m] and ref[m][k].dtype == qo[m][k].dtype and torch.equal(ref[m][k], qo[m][k]) for k in ref[m]))
        elems = sum(int((ref[m]["weight_scale"] != qo[m]["weight_scale"]).sum()) for m in ref
                    if m in qo and ref[m]["weight_scale"].shape == qo[m]["weight_scale"].shape)
        total = sum(ref[m]["weight_scale"].numel() for m in ref)
        lines.append(f"{scheme}: {same} of {len(ref)} modules with byte-identical qparams (reference vs qobs); "
                     f"{elems} of {total} weight_scale elements differ")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--observers", choices=("ref", "qobs"))
    p.add_argument("--scheme", choices=sorted(OBSERVER))
    p.add_argument("--size", default="small", choices=sorted(SIZES),
                   help="tiny 0.4M, small ~53M, medium ~210M parameters")
    p.add_argument("--dir", required=True, help="folder for runs.jsonl and the saved qparams")
    p.add_argument("--compare", action="store_true", help="print the table of the runs in --dir")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if a.compare:
        return compare(a)
    if not (a.observers and a.scheme):
        p.error("--observers and --scheme are needed (or --compare)")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
