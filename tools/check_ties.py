#!/usr/bin/env python3
"""Proves that every group where qobs' MSE grid search chooses another shrink factor
than the reference is a tie of the reference's own f32 accumulation (RULES A2).

    python3 tools/check_ties.py --random 512x4096 --scheme W4A16 --observer memoryless_mse
    python3 tools/check_ties.py --safetensors model.safetensors --tensor model.layers.0.mlp.up_proj.weight \\
        --scheme NVFP4A16 --observer nvfp4_expanded_mse

Runs qobs' observer (this interpreter, or --qobs-python, must import qobs) and the
reference's (--ref-python, must import llmcompressor) on the same weight, compares the
chosen (min, max) of every group, and for each group that differs recomputes both
candidates' errors from the reference's own fake-quantized values: the error terms
|q - x|^norm exactly as the reference forms them (in the observed dtype), their sum S
in f64. The reference sums n terms in f32 in an unspecified order and rounds the result
to the observed dtype, so its value is within B = (n - 1) * 2^-24 / (1 - (n - 1) * 2^-24)
* S of S (terms are non-negative), plus half a unit in the last place of the observed
dtype for the final rounding (bf16 / f16 only). A differing choice is a proven tie
when |S_ref - S_qobs| <= B_ref + B_qobs + ulp(max S): some summation order lets the
reference pick either candidate. Prints total groups, disagreements, proven ties and
non-ties; exits 1 when a non-tie exists (or a chosen range is not on the candidate grid).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SCHEMES = {  # the weight args of the presets, as both sides spell them
    "W4A16": dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True),
    "W4A16_ASYM": dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=False),
    "W8A16": dict(num_bits=8, type="int", strategy="channel", symmetric=True),
    "NVFP4A16": dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True,
                     scale_dtype="float8_e4m3fn"),
}


def load_weight(a, torch):
    if a.safetensors:
        # the file format directly (u64 header length, JSON header, raw bytes): the qobs
        # side's interpreter need not have the safetensors package
        import struct

        with open(a.safetensors, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            info = json.loads(f.read(hlen))[a.tensor]
            b, e = info["data_offsets"]
            f.seek(8 + hlen + b)
            raw = bytearray(f.read(e - b))
        dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[info["dtype"]]
        return torch.frombuffer(raw, dtype=dt).reshape(info["shape"])
    rows, cols = (int(v) for v in a.random.split("x"))
    g = torch.Generator().manual_seed(a.seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    if a.outliers > 0:  # a few outliers per row, as real checkpoints have
        idx = torch.randint(0, cols, (rows, a.outliers), generator=g)
        w.scatter_(1, idx, torch.randn(rows, a.outliers, generator=g) * 0.3)
    return w.to(getattr(torch, a.dtype))


def qobs_side(a):
    """The chosen (min, max) per group from qobs, as f32 arrays."""
    import numpy as np
    import torch
    import qobs
    from qobs.observer import Observer

    w = load_weight(a, torch)
    kw = {k: float(v) for k, v in (x.split("=", 1) for x in a.qobs_kwarg)}
    obs = Observer.load_from_registry(a.observer, base_name="weight", args=qobs.QuantizationArgs(**SCHEMES[a.scheme]),
                                      **kw)
    obs(w)
    np.save(os.path.join(a.tmp, "qobs_min.npy"), obs.min_vals.float().numpy().reshape(-1))
    np.save(os.path.join(a.tmp, "qobs_max.npy"), obs.max_vals.float().numpy().reshape(-1))


def reference_side(a):
    import numpy as np
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers.base import Observer

    torch.set_num_threads(a.threads)
    w = load_weight(a, torch)
    args = QuantizationArgs(**SCHEMES[a.scheme], observer=a.observer)
    obs = Observer.load_from_registry(a.observer, base_name="weight", args=args)
    obs(w)
    ref_min, ref_max = obs.min_vals.reshape(-1), obs.max_vals.reshape(-1)
    q_min = torch.from_numpy(np.load(os.path.join(a.tmp, "qobs_min.npy"))).to(ref_min.dtype)
    q_max = torch.from_numpy(np.load(os.path.join(a.tmp, "qobs_max.npy"))).to(ref_min.dtype)
    print(json.dumps(tie_report(w, args, obs, ref_min, ref_max, q_min, q_max)))


def tie_report(w, args, obs, ref_min, ref_max, other_min, other_max, importance=None):
    """Classifies the groups where (other_min, other_max) differ from the reference's
    chosen (ref_min, ref_max) for weight `w` (unflattened, on any device).

    `obs` is the reference observer that ran (its maxshrink, grid, norm and expand are
    read); `args` its QuantizationArgs. With `importance` (the validated 1-D importance
    sum / count of an imatrix observer) the search is imatrix_mse's (R6.8.6): S + 1
    candidates, terms |f32(q) - f32(x)|^norm times the normalized importance, summed in
    f32 and never rounded to the observed dtype. Without it, the eager MSE search of
    R6.6.6. Returns {"groups", "disagreements", "ties", "tie_details", "non_ties"}."""
    import torch
    from compressed_tensors.quantization import QuantizationStrategy
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams
    from llmcompressor.observers.helpers import flatten_for_calibration

    other_min = other_min.to(device=ref_min.device, dtype=ref_min.dtype)
    other_max = other_max.to(device=ref_max.device, dtype=ref_max.dtype)
    differ = ((ref_min != other_min) | (ref_max != other_max)).nonzero().reshape(-1)
    result = {"groups": ref_min.numel(), "disagreements": int(differ.numel()), "ties": 0, "tie_details": [],
              "non_ties": []}
    if differ.numel() == 0:
        return result

    # the reference's search (llmcompressor.observers.mse_quant._grid_search_mse, or
    # imatrix._grid_search), on the differing groups only: every step is element-wise per group
    search_args, token_args = args, args.model_copy(update={"strategy": QuantizationStrategy.TOKEN})
    if args.strategy == QuantizationStrategy.TENSOR_GROUP and args.scale_dtype is not None:
        search_args = args.model_copy(update={"scale_dtype": None})
        token_args = token_args.model_copy(update={"scale_dtype": None})
    observed = flatten_for_calibration(w, "weight", args)
    weights = None
    if importance is not None:
        imp = importance.to(device=observed.device, dtype=torch.float32)
        imp = imp / (imp.mean() + torch.finfo(torch.float32).tiny)
        weights = flatten_for_calibration(imp.unsqueeze(0).expand(observed.shape[1], -1), "weight", args)
        weights = weights.reshape(weights.shape[0], -1, weights.shape[-1])[:, differ.to(observed.device), :]
    observed = observed.reshape(observed.shape[0], -1, observed.shape[-1])[:, differ.to(observed.device), :]
    n = observed.shape[0] * observed.shape[-1]
    min_val = torch.amin(observed, dim=(0, -1)) * obs.expand
    max_val = torch.amax(observed, dim=(0, -1)) * obs.expand
    steps = int(obs.maxshrink * obs.grid) if weights is None else max(1, int(obs.maxshrink * obs.grid)) + 1
    sums, mins, maxs = [], [], []
    for i in range(steps):
        p = 1 - i / obs.grid
        cm, cM = min_val * p, max_val * p
        s, z = calculate_qparams(min_vals=cm, max_vals=cM, quantization_args=search_args, global_scale=None)
        q = fake_quantize(observed, s.unsqueeze(-1), z.unsqueeze(-1), token_args)
        if weights is None:
            terms = (q.to(observed.dtype) - observed).abs().pow(obs.norm)  # as the reference forms them
        else:
            terms = (q.float() - observed.float()).abs().pow(obs.norm) * weights
        sums.append(terms.double().sum(dim=(0, -1)))
        mins.append(cm)
        maxs.append(cM)
    S, M, X = torch.stack(sums).cpu(), torch.stack(mins).cpu(), torch.stack(maxs).cpu()  # [step, group]
    ref_min, ref_max, other_min, other_max = (t.cpu() for t in (ref_min, ref_max, other_min, other_max))
    g32 = (n - 1) * 2.0 ** -24
    bound = S * (g32 / (1 - g32)) + S * (n * 2.0 ** -52)  # f32 accumulation + the f64 sum here
    finfo = torch.finfo(observed.dtype)
    for k, g in enumerate(differ.tolist()):
        def chosen(lo, hi):
            hit = ((M[:, k] == lo) & (X[:, k] == hi)).nonzero()
            return int(hit[0]) if hit.numel() else None

        i_ref, i_q = chosen(ref_min[g], ref_max[g]), chosen(other_min[g], other_max[g])
        if i_ref is None or i_q is None:
            result["non_ties"].append({"group": g, "why": "chosen range not on the candidate grid"})
            continue
        s_r, s_q = float(S[i_ref, k]), float(S[i_q, k])
        # final rounding of the f32 sum to the observed dtype: half an ulp each (the
        # imatrix search keeps its f32 sum)
        ulp = 0.0 if observed.dtype == torch.float32 or weights is not None else max(s_r, s_q) * finfo.eps
        slack = float(bound[i_ref, k]) + float(bound[i_q, k]) + ulp
        if abs(s_r - s_q) <= slack:
            result["ties"] += 1
            result["tie_details"].append({"group": g, "ref_step": i_ref, "qobs_step": i_q, "ref_err": s_r,
                                          "qobs_err": s_q, "slack": slack})
        else:
            result["non_ties"].append({"group": g, "ref_step": i_ref, "qobs_step": i_q, "ref_err": s_r, "qobs_err": s_q,
                                       "slack": slack})
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--random", metavar="ROWSxCOLS", help="random N(0, 0.02) weight with --outliers outliers per row")
    src.add_argument("--safetensors", help="a .safetensors file (with --tensor)")
    p.add_argument("--tensor", help="tensor name in --safetensors")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--outliers", type=int, default=3,
                   help="outliers per row of --random (0: the plain weight of bench/compare_reference.py)")
    p.add_argument("--scheme", default="W4A16", choices=sorted(SCHEMES))
    p.add_argument("--observer", default="memoryless_mse", choices=("memoryless_mse", "nvfp4_expanded_mse"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ref-python", default="/work/refenv/bin/python")
    p.add_argument("--qobs-python", default=sys.executable)
    p.add_argument("--qobs-kwarg", action="append", default=[], metavar="K=V",
                   help="observer kwarg for the qobs side only: a deliberate mismatch that shows the "
                        "checker reports non-ties (e.g. norm=2.5)")
    p.add_argument("--side", choices=("qobs", "ref"), help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.safetensors and not a.tensor:
        p.error("--safetensors needs --tensor")
    if a.side == "qobs":
        return qobs_side(a)
    if a.side == "ref":
        return reference_side(a)
    with tempfile.TemporaryDirectory() as tmp:
        base = [os.path.abspath(__file__)] + [x for x in sys.argv[1:]] + ["--tmp", tmp]
        env = dict(os.environ, QOBS_NUM_THREADS=str(a.threads))
        for side, py in (("qobs", a.qobs_python), ("ref", a.ref_python)):
            r = subprocess.run([py] + base + ["--side", side], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.exit(f"{side} side failed:\n{r.stderr[-3000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
    what = a.tensor or f"random {a.random} {a.dtype} seed {a.seed}"
    print(f"{what}: {a.scheme} {a.observer}: {res['groups']} groups, {res['disagreements']} disagreements, "
          f"{res['ties']} proven ties, {len(res['non_ties'])} non-ties")
    for t in res["tie_details"][:10]:
        print(f"  tie: {t}")
    for nt in res["non_ties"][:10]:
        print(f"  non-tie: {nt}")
    return 1 if res["non_ties"] else 0


if __name__ == "__main__":
    sys.exit(main())
