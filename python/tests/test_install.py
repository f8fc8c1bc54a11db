"""What `pip install qobs` gives a user: the `qobs` command in the environment's bin/
next to the interpreter, and `qobs.llmcompressor` saying what to install when
llm-compressor or torch is missing."""

import json
import pathlib
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qobs

SOURCE_PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "qobs"


def _qobs_command():
    if pathlib.Path(qobs.__file__).resolve().parent == SOURCE_PACKAGE:
        pytest.skip("qobs is imported from the source tree (PYTHONPATH), not installed: no command to check")
    # sys.executable unresolved: a venv's bin/python is a link into the base interpreter.
    bin_dir = pathlib.Path(sys.executable).parent
    found = shutil.which("qobs", path=str(bin_dir))
    assert found, f"pip install did not put the qobs command into {bin_dir}"
    return found


def _write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def test_qobs_command_reports_its_version():
    out = subprocess.run([_qobs_command(), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"qobs {qobs.__version__} ")


def test_qobs_command_quantizes_a_checkpoint(tmp_path):
    cmd = _qobs_command()
    model = tmp_path / "model"
    model.mkdir()
    rng = np.random.default_rng(0)
    _write_safetensors(model / "model.safetensors", {
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((8, 128)).astype(np.float32),
        "model.norm.weight": np.ones(128, np.float32),
    })
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = tmp_path / "out"
    subprocess.run([cmd, "quantize", str(model), "-o", str(out), "--scheme", "W4A16", "--quiet"],
                   capture_output=True, text=True, check=True)
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == "pack-quantized"
    inspected = subprocess.run([cmd, "inspect", str(out), "--tensors"], capture_output=True, text=True,
                               check=True).stdout
    assert "model.layers.0.mlp.down_proj.weight_packed" in inspected


# Runs in a fresh interpreter in which torch and llmcompressor cannot be imported,
# whether or not they are installed here.
_HIDDEN = textwrap.dedent("""
    import importlib.abc, sys

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "llmcompressor"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    try:
        import qobs.llmcompressor
    except ImportError as e:
        print(e)
    else:
        print("imported")
""")


def test_llmcompressor_module_says_what_to_install():
    out = subprocess.run([sys.executable, "-c", _HIDDEN], capture_output=True, text=True, check=True).stdout
    assert "pip install qobs[llmcompressor]" in out
    assert "No module named 'torch'" in out  # the cause stays visible


def test_qobs_imports_without_torch():
    code = _HIDDEN.replace("import qobs.llmcompressor", "import qobs, numpy; qobs.QuantizationArgs(num_bits=4)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "imported"
