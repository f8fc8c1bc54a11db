#!/usr/bin/env python3
"""Golden data for qobs' module matching and --config output, from the Python reference.

Run with an interpreter that has llmcompressor 0.14.0.1 on compressed-tensors 0.20.1 and
transformers (the config.json shape is 0.20's, docs/RULES.md R0.6; tools/README.md); CI
never runs it, its output tests/golden/match.json is committed.

* "models": a tiny Llama and a tiny BERT built from a config (no weights downloaded).
  For each, the tensors a checkpoint of it holds (name, shape) and, for each pattern,
  the modules that compressed-tensors' own `is_match` accepts. Only modules that own a
  parameter are listed (a checkpoint shows no other), and only patterns whose class
  names qobs can infer from a checkpoint (Linear, Embedding) or plain names / `re:`.
* "precedence": for a multi-group config, the group compressed-tensors'
  apply_quantization_config gives each module of the Llama (match_targets + the
  target -> scheme dict), and the modules it leaves out.
* "configs": multi-group QuantizationConfigs run through llm-compressor's
  model_free_ptq on the tiny Llama's safetensors, and the quantization_config it writes.
  Their groups' targets are disjoint: model_free_ptq gives a module to the first group
  whose targets match by name (and counts every tensor as `Linear`), which differs from
  the precedence above whenever targets overlap; qobs follows apply_quantization_config,
  the rule loaders use.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402
from compressed_tensors.utils.match import is_match, match_targets  # noqa: E402
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.manual_seed(0)

LLAMA = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
BERT = BertConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=4, max_position_embeddings=64)

PATTERNS = [
    "Linear", "Embedding", "lm_head", "model.layers.0.mlp.down_proj", "re:.*mlp.*", "re:.*self_attn\\..*",
    "re:.*(q|k|v)_proj$", "re:model\\.layers\\.1\\..*", "re:mlp", "re:.*norm", "re:.*embed.*",
    "re:.*attention\\.self\\.(query|key)", "re:.*dense$", "re:encoder\\.layer\\.0\\.output\\..*",
    "embeddings.word_embeddings", "pooler.dense", "re:.*LayerNorm$", "re:.*(?:gate|up)_proj",
]

GROUPS = OrderedDict([
    ("attn", {"targets": ["re:.*self_attn\\..*"], "weights": {"num_bits": 8, "type": "int", "symmetric": True,
                                                              "strategy": "channel"}}),
    ("mlp", {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                "strategy": "group", "group_size": 32}}),
    ("down0", {"targets": ["model.layers.0.mlp.down_proj"],
               "weights": {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel"}}),
])
IGNORE = ["lm_head", "re:.*layers\\.1\\.mlp\\.gate_proj"]


def param_modules(model):
    return [(n, m) for n, m in model.named_modules() if n and any(True for _ in m.parameters(recurse=False))]


def model_entry(model):
    tensors = [[k, list(v.shape)] for k, v in model.state_dict().items()]
    modules = param_modules(model)
    matches = {p: [n for n, m in modules if is_match(n, m, p)] for p in PATTERNS}
    return {"tensors": tensors, "classes": {n: type(m).__name__ for n, m in modules}, "matches": matches}


def precedence(model):
    target_to_group = OrderedDict()
    for g, s in GROUPS.items():
        for t in s["targets"]:
            target_to_group[t] = g
    out = {}
    for n, m in param_modules(model):
        if not isinstance(m, torch.nn.Linear):
            continue
        if not is_match(n, m, list(target_to_group), IGNORE):
            out[n] = None
            continue
        out[n] = target_to_group[match_targets(n, m, list(target_to_group))[0]]
    return out


W8_CHANNEL = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
W4_G128 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
FP8_CHANNEL = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
CONFIGS = {
    # attention W8A16 per channel, MLP W4A16 group 128, an ignore list, a kv cache scheme
    "attn_w8_mlp_w4": {
        "config_groups": {"attention": {"targets": ["re:.*self_attn\\.(q|k|v|o)_proj$"], "weights": W8_CHANNEL},
                          "mlp": {"targets": ["re:.*mlp\\..*"], "weights": W4_G128}},
        "ignore": ["lm_head", "re:.*layers\\.1\\.mlp\\.gate_proj"],
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor",
                            "dynamic": False},
    },
    # two formats: float-quantized and pack-quantized -> "mixed-precision"
    "mixed_formats": {
        "config_groups": {"group_0": {"targets": ["re:.*self_attn\\..*"], "weights": FP8_CHANNEL},
                          "group_1": {"targets": ["re:.*mlp\\..*"], "weights": W4_G128}},
        "ignore": ["lm_head"],
    },
}


def model_free_config(model, cfg):
    from llmcompressor import model_free_ptq
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "in", Path(d) / "out"
        src.mkdir()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(src / "model.safetensors"))
        LLAMA.save_pretrained(src)
        model_free_ptq(str(src), str(dst), config=QuantizationConfig.model_validate(cfg), device="cpu")
        written = json.loads((dst / "config.json").read_text())["quantization_config"]
    return {"input": cfg, "quantization_config": written}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests/golden/match.json")
    llama = LlamaForCausalLM(LLAMA).eval()
    bert = BertModel(BERT, add_pooling_layer=True).eval()
    golden = {
        "patterns": PATTERNS,
        "models": {"llama": model_entry(llama), "bert": model_entry(bert)},
        "groups": GROUPS, "ignore": IGNORE,
        "precedence": precedence(llama),
        "configs": {name: model_free_config(llama, cfg) for name, cfg in CONFIGS.items()},
    }
    out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
