#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (standard
library only, deterministic: rerunning it reproduces the committed files).

  python3 fuzz/make_corpus.py [--qobs build/cli/qobs]

With --qobs, the checkpoint corpus also gets compressed checkpoints, written by that
qobs executable from the plain seeds, so that the fuzzer starts inside the dequantize
path too. The container format of the checkpoint target is described in
fuzz/checkpoint_fuzz.cc.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# File ids of fuzz/checkpoint_fuzz.cc (kFiles) and scheme ids (kSchemes).
FILES = ["config.json", "model.safetensors.index.json", "model.safetensors",
         "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
SCHEMES = ["W8A16", "W4A16", "W4A16_ASYM", "W8A8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "MXFP4A16"]
OPEN_FILE = 8  # option bit: open model.safetensors instead of the folder


def bf16(x):
    """The bfloat16 bits of x (round to nearest even), as 2 little-endian bytes."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return struct.pack("<H", u)


def safetensors(tensors):
    """tensors: list of (name, dtype, shape, raw bytes). Laid out in the given order."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def weight(rows, cols, seed):
    """Deterministic, weight-like bf16 values: a few scales and signs, one outlier per row."""
    out = b""
    for r in range(rows):
        for c in range(cols):
            v = math.sin(seed * 7.1 + r * 1.3 + c * 0.37) * 0.05 * (1 + (r % 3))
            if c == (r * 5) % cols:
                v *= 8
            out += bf16(v)
    return out


def llama_tensors(layer, seed):
    p = f"model.layers.{layer}"
    return [
        (f"{p}.mlp.up_proj.weight", "BF16", [8, 128], weight(8, 128, seed)),
        (f"{p}.self_attn.q_proj.weight", "BF16", [4, 128], weight(4, 128, seed + 1)),
        (f"{p}.input_layernorm.weight", "BF16", [4], b"".join(bf16(1.0) for _ in range(4))),
    ]


CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
                     "hidden_size": 128, "num_hidden_layers": 2}, indent=2).encode()


def container(options, files):
    """files: list of (file name, bytes)."""
    out = bytes([options])
    for name, content in files:
        assert len(content) < 1 << 16, name
        out += bytes([FILES.index(name)]) + struct.pack("<H", len(content)) + content
    return out


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def checkpoint_seeds(qobs):
    single = safetensors(llama_tensors(0, 1) + [("lm_head.weight", "BF16", [4, 128], weight(4, 128, 9))])
    for s, scheme in enumerate(SCHEMES):
        write("checkpoint", f"single_{scheme.lower()}", container(s, [("config.json", CONFIG),
                                                                     ("model.safetensors", single)]))
    write("checkpoint", "single_file_path", container(OPEN_FILE, [("model.safetensors", single)]))
    shard1 = safetensors(llama_tensors(0, 1))
    shard2 = safetensors(llama_tensors(1, 2) + [("model.embed_tokens.weight", "F32", [2, 4], struct.pack("<8f", *range(8)))])
    weight_map = {}
    for shard, tensors in ((FILES[3], llama_tensors(0, 1)), (FILES[4], llama_tensors(1, 2))):
        for t in tensors:
            weight_map[t[0]] = shard
    weight_map["model.embed_tokens.weight"] = FILES[4]
    index = json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2).encode()
    write("checkpoint", "sharded", container(1, [("config.json", CONFIG), ("model.safetensors.index.json", index),
                                                 (FILES[3], shard1), (FILES[4], shard2)]))
    if not qobs:
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in")
        os.makedirs(src)
        with open(os.path.join(src, "model.safetensors"), "wb") as f:
            f.write(single)
        with open(os.path.join(src, "config.json"), "wb") as f:
            f.write(CONFIG)
        for s, scheme in enumerate(SCHEMES):
            out = os.path.join(tmp, scheme)
            subprocess.run([qobs, "quantize", src, "-o", out, "--scheme", scheme], check=True,
                           stdout=subprocess.DEVNULL)
            files = []
            for name in ("config.json", "model.safetensors"):
                with open(os.path.join(out, name), "rb") as f:
                    files.append((name, f.read()))
            write("checkpoint", f"compressed_{scheme.lower()}", container(s, files))
            if scheme == "W4A16":
                # The compressed config alone, as the args target's QuantizationConfig seed.
                qc = json.loads(files[0][1])["quantization_config"]
                write("args", "config_compressed_w4a16", b"\x02" + json.dumps(qc).encode())


def args_seeds():
    w4 = {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 128, "strategy": "group",
          "block_structure": None, "dynamic": False, "actorder": None, "scale_dtype": None, "zp_dtype": None,
          "observer": "memoryless_mse", "observer_kwargs": {"maxshrink": 0.2, "grid": 100, "norm": 2.4}}
    fp8_block = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}
    nvfp4 = {"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group",
             "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": "torch.float8_e4m3fn", "dynamic": "local"}
    token = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": False,
             "actorder": "static"}
    for name, a in (("args_w4_group", w4), ("args_fp8_block", fp8_block), ("args_nvfp4", nvfp4),
                    ("args_token", token)):
        write("args", name, b"\x00" + json.dumps(a).encode())
    scheme = {"targets": ["Linear", "re:.*mlp.*"], "weights": w4, "input_activations": token,
              "output_activations": None, "format": "pack-quantized"}
    write("args", "scheme_w4a8", b"\x01" + json.dumps(scheme).encode())
    write("args", "scheme_fp8_block", b"\x01" + json.dumps({"targets": ["Linear"], "weights": fp8_block,
                                                              "input_activations": None, "format": None}).encode())
    config = {"config_groups": {"W4A16": ["Linear"], "group_1": scheme}, "quant_method": "compressed-tensors",
              "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}, "format": "mixed-precision",
              "quantization_status": "compressed", "global_compression_ratio": 1.5, "ignore": ["lm_head"]}
    write("args", "config_mixed", b"\x02" + json.dumps(config).encode())
    for name, s in (("dtype", "torch.bfloat16"), ("block", "128x64"), ("preset", "nvfp4"), ("actorder", "weight")):
        write("args", f"string_{name}", b"\x03" + s.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qobs", help="qobs executable, for compressed checkpoint seeds")
    args = ap.parse_args()
    args_seeds()
    checkpoint_seeds(args.qobs)


if __name__ == "__main__":
    main()
