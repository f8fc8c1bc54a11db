#!/usr/bin/env python3
"""`qobs quantize` against llm-compressor's `model_free_ptq`, side by side on CPU.

Run with the reference's interpreter (torch, safetensors, llmcompressor):

    /work/refenv/bin/python bench/cli_vs_model_free.py --qobs build/cli/qobs \\
        --layers 2 --hidden 1024 --intermediate 2816 --scheme W4A16 \\
        --observer memoryless_mse --threads 2

It writes a Llama-shaped bf16 checkpoint (random N(0, 0.02) weights with a few outliers
per row, fixed seed), quantizes it with both tools using the same scheme, observer and
thread count (`--threads N` for qobs; torch.set_num_threads(N) and one worker for the
reference), each in its own process (peak RSS is each process's own, from GNU time), then
compares every tensor of the two outputs byte for byte (embeddings excluded on both
sides: model_free_ptq and qobs differ in whether they quantize them). Where a scale of
an MSE observer differs, tools/check_ties.py decides on that weight whether every
differing group is a tie of the reference's f32 error accumulation (RULES A2).
Prints both times, the ratio, peak RSS and the read bandwidth (input bytes / time).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def write_checkpoint(path, layers, hidden, inter, vocab, seed):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)

    def weight(rows, cols):
        w = torch.randn(rows, cols, generator=g) * 0.02
        # a few outliers per row, as real checkpoints have
        idx = torch.randint(0, cols, (rows, 3), generator=g)
        w.scatter_(1, idx, torch.randn(rows, 3, generator=g) * 0.3)
        return w.to(torch.bfloat16)

    t = {"model.embed_tokens.weight": weight(vocab, hidden), "model.norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
         "lm_head.weight": weight(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + f"self_attn.{n}.weight"] = weight(hidden, hidden)
        t[p + "mlp.gate_proj.weight"] = weight(inter, hidden)
        t[p + "mlp.up_proj.weight"] = weight(inter, hidden)
        t[p + "mlp.down_proj.weight"] = weight(hidden, inter)
        t[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    os.makedirs(path, exist_ok=True)
    save_file(t, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    heads = max(1, hidden // 128)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": heads, "vocab_size": vocab, "torch_dtype": "bfloat16",
           "rms_norm_eps": 1e-5, "max_position_embeddings": 2048}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return sum(v.numel() * v.element_size() for v in t.values())


def reference_worker(a):
    """Child process: model_free_ptq on CPU with the scheme's preset and the observer."""
    import torch
    from compressed_tensors.quantization import preset_name_to_scheme
    from llmcompressor.entrypoints.model_free import model_free_ptq

    torch.set_num_threads(a.threads)
    scheme = preset_name_to_scheme(a.scheme, ["Linear"])
    scheme.weights.observer = a.observer
    t0 = time.perf_counter()
    model_free_ptq(a.model, a.out, scheme=scheme, ignore=["lm_head"], max_workers=1, device="cpu")
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def timed(cmd, env=None):
    """Runs cmd; wall seconds, the child's own peak RSS (MB) and its stdout. The peak
    comes from GNU time run between this process and the child: wait4's ru_maxrss of a
    direct child counts the pages of this (torch-sized) interpreter it was forked from."""
    gnu_time = "/usr/bin/time"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        r = subprocess.run([gnu_time, "-f", "QOBS_MAXRSS_KB=%M"] + cmd, env=env, stdout=out, stderr=err, text=True)
        secs = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        errs = err.read()
        if r.returncode != 0:
            sys.exit(f"{cmd[0]} failed ({r.returncode}):\n{errs[-3000:]}")
        kb = [line.split("=", 1)[1] for line in errs.splitlines() if line.startswith("QOBS_MAXRSS_KB=")]
        return secs, float(kb[-1]) / 1024.0, out.read()


def load_all(folder):
    from safetensors import safe_open

    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), "pt") as h:
                for k in h.keys():
                    out[k] = h.get_tensor(k)
    return out


def compare(ref_dir, qobs_dir, model_dir, a):
    """Byte comparison of every non-embedding tensor; differing MSE scales go to the
    tie checker. Returns the number of unexplained differences."""
    import torch

    ref, q = load_all(ref_dir), load_all(qobs_dir)
    keys = sorted(k for k in set(ref) | set(q) if "embed_tokens" not in k)
    bad, differing_weights = 0, set()
    for k in keys:
        if k not in ref or k not in q:
            print(f"  only in {'qobs' if k in q else 'reference'}: {k}")
            bad += 1
            continue
        x, y = ref[k], q[k]
        same = x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.uint8) if x.dtype != torch.uint8 else x,
                                                                          y.view(torch.uint8) if y.dtype != torch.uint8 else y)
        if not same:
            module = k.rsplit(".", 1)[0]
            differing_weights.add(module + ".weight")
            print(f"  differs: {k} {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}")
    print(f"  {len(keys)} tensors compared (embeddings excluded), {len(differing_weights)} modules differ")
    if differing_weights and a.observer in ("memoryless_mse", "nvfp4_expanded_mse"):
        for w in sorted(differing_weights):
            cmd = [a.check_ties_python, os.path.join(ROOT, "tools", "check_ties.py"), "--safetensors",
                   os.path.join(model_dir, "model.safetensors"), "--tensor", w, "--scheme", a.scheme, "--observer",
                   a.observer, "--ref-python", sys.executable]
            r = subprocess.run(cmd, capture_output=True, text=True)
            print("  " + (r.stdout.strip() or r.stderr.strip()[-2000:]).replace("\n", "\n  "))
            bad += r.returncode != 0
    else:
        bad += len(differing_weights)
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qobs", default=os.path.join(ROOT, "build", "cli", "qobs"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--scheme", default="W4A16")
    p.add_argument("--observer", default="memoryless_minmax")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", help="keep the checkpoint and outputs here (default: a temporary folder)")
    p.add_argument("--check-ties-python", default=os.environ.get("QOBS_PYTHON", sys.executable),
                   help="interpreter with the qobs package, for tools/check_ties.py")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return reference_worker(a)

    work = a.workdir or tempfile.mkdtemp(prefix="qobs_cli_vs_mf_")
    model = os.path.join(work, "model")
    nbytes = write_checkpoint(model, a.layers, a.hidden, a.intermediate, a.vocab, a.seed)
    ref_out, qobs_out = os.path.join(work, "ref"), os.path.join(work, "qobs")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), QOBS_NUM_THREADS=str(a.threads))
    t_q, rss_q, _ = timed([a.qobs, "quantize", model, "-o", qobs_out, "--scheme", a.scheme, "--observer", a.observer,
                           "--threads", str(a.threads), "--overwrite", "--quiet", "--no-baseline"], env)
    t_r, rss_r, out = timed([sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--out", ref_out,
                             "--scheme", a.scheme, "--observer", a.observer, "--threads", str(a.threads)], env)
    t_r_inner = json.loads(out.strip().splitlines()[-1])["seconds"]
    mb = nbytes / 1e6
    print(f"# {a.layers} layers, hidden {a.hidden}, intermediate {a.intermediate}, vocab {a.vocab}: {mb:.1f} MB bf16; "
          f"{a.scheme} {a.observer}, {a.threads} threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  qobs quantize     {t_q:8.2f} s  peak RSS {rss_q:8.1f} MB  read {mb / t_q:8.1f} MB/s")
    print(f"  model_free_ptq    {t_r:8.2f} s  peak RSS {rss_r:8.1f} MB  read {mb / t_r:8.1f} MB/s "
          f"(in-process {t_r_inner:.2f} s, the rest is Python / torch import)")
    print(f"  ratio (reference / qobs): {t_r / t_q:.1f}x end to end, {t_r_inner / t_q:.1f}x without the reference's imports")
    bad = compare(ref_out, qobs_out, model, a)
    print(f"  unexplained differences: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
