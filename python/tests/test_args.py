"""QuantizationArgs keywords, inference and presets (RULES section 1) through Python."""

import json

import pytest

import qobs
from qobs import (
    ActivationOrdering,
    DynamicType,
    QuantizationArgs,
    QuantizationStrategy,
    QuantizationType,
)


def test_defaults_are_inferred_by_the_core():
    a = QuantizationArgs()
    assert a.num_bits == 8
    assert a.type == QuantizationType.INT and a.type == "int"
    assert a.symmetric is True
    assert a.strategy == QuantizationStrategy.TENSOR  # R1.3.1-1
    assert a.observer == "memoryless_minmax"  # R1.3.1-8
    assert str(a.zp_dtype).endswith("int8")  # R1.3.1-9 (torch.int8 when torch is present)
    assert a.dynamic is False and a.actorder is None and a.block_structure is None


@pytest.mark.parametrize(
    "kwargs,strategy",
    [
        (dict(group_size=128), "group"),
        (dict(group_size=-1), "channel"),
        (dict(strategy="CHANNEL"), "channel"),
        (dict(strategy=QuantizationStrategy.TENSOR_GROUP, group_size=16, type="float", num_bits=4), "tensor_group"),
        (dict(strategy="block", block_structure="128x64"), "block"),
        (dict(strategy="token", dynamic=True), "token"),
    ],
)
def test_strategy_strings_enums_and_inference(kwargs, strategy):
    assert QuantizationArgs(**kwargs).strategy == strategy


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(group_size=0), ""),  # R1.3.1-1
        (dict(group_size=-2), ""),  # R1.2.2
        (dict(strategy="token"), ""),  # R1.3.1-2 static token
        (dict(strategy="group"), "group_size"),  # R1.3.1-3
        (dict(strategy="channel", group_size=64), ""),  # R1.3.1-4
        (dict(strategy="block"), ""),  # R1.3.1-5
        (dict(block_structure=[2, 4]), ""),  # R1.3.1-5 without block strategy
        (dict(strategy="channel", actorder="group"), ""),  # R1.3.1-6
        (dict(strategy="channel", dynamic=True), ""),  # R1.3.1-7
        (dict(dynamic="local"), ""),  # R1.3.1-7 local needs tensor_group
        (dict(dynamic="maybe"), "local"),
        (dict(type="bfloat"), ""),
        (dict(strategy="rows"), ""),
        (dict(strategy="block", block_structure="0x4"), "positive"),
        (dict(strategy="block", block_structure="2x4x8"), "positive"),
        (dict(strategy="block", block_structure=[2, 4, 8]), "positive"),
        (dict(strategy="block", block_structure=[4, -1]), "positive"),
        (dict(scale_dtype="float7"), ""),
        (dict(unknown_field=1), "unknown"),
    ],
)
def test_invalid_args_raise_value_error(kwargs, needle):
    with pytest.raises(ValueError, match=needle or None):
        QuantizationArgs(**kwargs)


# One parser (R1.2): keywords go through the core's parser, so each bad value gives the
# exception type and the message that the same values give as JSON.
_BAD_ARGS = [
    dict(num_bits="8"),
    dict(num_bits=4.5),
    dict(num_bits=True),
    dict(num_bits=2**40),
    dict(num_bits=2**63),
    dict(num_bits=5, type="float"),
    dict(type="bfloat"),
    dict(type=1),
    dict(symmetric=1),
    dict(symmetric="yes"),
    dict(group_size="128"),
    dict(group_size=-2),
    dict(group_size=0),
    dict(strategy="group", group_size=2**63),
    dict(strategy="rows"),
    dict(strategy="group"),
    dict(strategy=3),
    dict(strategy="block", block_structure=[2, 4, 8]),
    dict(strategy="block", block_structure=[4, -1]),
    dict(strategy="block", block_structure=[2**63, 1]),
    dict(strategy="block", block_structure=[1.5, 2]),
    dict(strategy="block", block_structure="0x4"),
    dict(strategy="block", block_structure=4),
    dict(dynamic="true"),
    dict(dynamic="maybe"),
    dict(dynamic=1),
    dict(actorder="rows"),
    dict(actorder=2),
    dict(strategy="channel", actorder="group"),
    dict(scale_dtype="float7"),
    dict(zp_dtype=8),
    dict(observer=["mse"]),
    dict(observer_kwargs=[1]),
    dict(observer_kwargs={"bad": [1, 2]}),
    dict(num_bits=8, bits=4),
]


def _error(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001 (the type is part of what is compared)
        return type(e), str(e)
    return None


@pytest.mark.parametrize("kwargs", _BAD_ARGS, ids=[json.dumps(k) for k in _BAD_ARGS])
def test_bad_keywords_fail_as_the_same_json_does(kwargs):
    from_json = _error(lambda: QuantizationArgs.model_validate_json(json.dumps(kwargs)))
    assert from_json is not None
    assert _error(lambda: QuantizationArgs(**kwargs)) == from_json
    assert _error(lambda: QuantizationArgs.model_validate(kwargs)) == from_json


def test_bad_values_name_field_value_and_rule():
    with pytest.raises(ValueError, match=r"^QuantizationArgs.num_bits: expected an integer, got 4.5 \(R1.2\)$"):
        QuantizationArgs(num_bits=4.5)
    with pytest.raises(ValueError, match=r"num_bits 1099511627776 is out of the int32 range"):
        QuantizationArgs(num_bits=2**40)
    with pytest.raises(ValueError, match=r"QuantizationArgs.group_size: expected an integer or null, got <object>"):
        QuantizationArgs(group_size=object())


def test_float_bits_without_fp_storage_type_is_not_implemented():
    # R1.3.1-9 / R1.3.2: float with 5 bits has no storage dtype (FP4 and FP6 take FP8's
    # zero-point dtype, R2.8)
    with pytest.raises(NotImplementedError):
        QuantizationArgs(num_bits=5, type="float")


def test_dynamic_forms_and_observer_defaults():
    assert QuantizationArgs(strategy="token", dynamic=True).observer is None  # R1.3.1-7
    local = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, dynamic="LOCAL")
    assert local.dynamic == DynamicType.LOCAL and local.dynamic == "local"
    assert local.observer == "minmax"
    kept = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, dynamic="local",
                            observer="static_minmax")
    assert kept.observer == "static_minmax"


def test_actorder_aliases_and_spelling():
    assert QuantizationArgs(group_size=128, actorder=True).actorder == ActivationOrdering.GROUP
    assert QuantizationArgs(group_size=128, actorder=False).actorder is None
    a = QuantizationArgs(group_size=128, actorder="DYNAMIC")
    assert a.actorder == ActivationOrdering.GROUP  # alias-aware (R1.1.4)
    assert a.actorder == "dynamic"
    assert a.model_dump()["actorder"] == "dynamic"  # spelling preserved
    assert QuantizationArgs(group_size=128, actorder="static").actorder == "weight"


def test_block_structure_forms():
    assert QuantizationArgs(strategy="block", block_structure="2x4").block_structure == [2, 4]
    assert QuantizationArgs(strategy="block", block_structure=(3, 5)).block_structure == [3, 5]


def test_dtype_names():
    a = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn")
    assert str(a.scale_dtype).endswith("float8_e4m3fn")
    assert str(a.zp_dtype).endswith("float8_e4m3fn")  # R1.3.1-9: fp4 -> fp8 zero points
    mx = QuantizationArgs(num_bits=4, type="float", group_size=32, scale_dtype="torch.uint8", zp_dtype="uint8")
    assert str(mx.scale_dtype).endswith("uint8")


def test_torch_dtypes_are_accepted_and_returned(torch):
    a = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                         scale_dtype=torch.float8_e4m3fn)
    assert a.scale_dtype == torch.float8_e4m3fn
    assert a.zp_dtype == torch.float8_e4m3fn
    assert QuantizationArgs(type="float").pytorch_dtype() == torch.float8_e4m3fn  # R1.3.2
    with pytest.raises(NotImplementedError):
        a.pytorch_dtype()  # float with 4 bits has no storage dtype


def test_serialization_round_trip():
    a = QuantizationArgs(num_bits=4, symmetric=True, group_size=128, actorder="weight")
    d = a.model_dump()
    assert list(d) == ["num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic",
                       "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs"]  # R1.3.5 order
    assert d["zp_dtype"] is None  # symmetric: serialized as null
    assert QuantizationArgs.model_validate_json(a.model_dump_json()) == a
    assert QuantizationArgs.model_validate(d) == a
    assert json.loads(a.model_dump_json(indent=2)) == d


def test_copy_update_and_assignment_revalidate():
    a = QuantizationArgs(num_bits=8, strategy="channel")
    b = a.model_copy(update={"strategy": "token", "dynamic": True})
    assert b.strategy == "token" and a.strategy == "channel"
    a.symmetric = False
    assert a.symmetric is False
    with pytest.raises(ValueError):
        a.strategy = "group"  # no group_size
    with pytest.raises(AttributeError):
        a.not_a_field = 1


def test_observer_kwargs_round_trip():
    a = QuantizationArgs(observer="mse", observer_kwargs={"maxshrink": 0.3, "patience": 2, "strict": True})
    assert a.observer_kwargs == {"maxshrink": 0.3, "patience": 2, "strict": True}
    with pytest.raises(ValueError, match="kwarg"):
        QuantizationArgs(observer_kwargs={"bad": [1, 2]})


def test_presets():
    names = set(qobs.PRESET_SCHEMES)
    for n in ["UNQUANTIZED", "W4A16", "W8A8", "INT8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4", "NVFP4A16",
              "MXFP4", "MXFP8", "W4AFP8", "W4A16_ASYM", "W2A4", "W7A8"]:
        assert n in names
    s = qobs.preset_name_to_scheme("nvfp4", ["Linear"])  # case-insensitive (R1.5.1)
    assert s.targets == ["Linear"]
    assert s.weights.strategy == "tensor_group" and s.weights.group_size == 16
    assert s.input_activations.dynamic == "local" and s.input_activations.observer == "static_minmax"
    assert qobs.PRESET_SCHEMES["W8A8"]["input_activations"].strategy == "token"
    assert "input_activations" not in qobs.PRESET_SCHEMES["W4A16"]
    assert qobs.is_preset_scheme("fp8") and not qobs.is_preset_scheme("FP9")
    with pytest.raises(KeyError):
        qobs.preset_name_to_scheme("FP9", ["Linear"])
    # fresh copies: equal, independent objects
    assert qobs.preset_name_to_scheme("W4A16", ["Linear"]) == qobs.preset_name_to_scheme("W4A16", ["Linear"])


def test_scheme_validation():
    w = QuantizationArgs(num_bits=4, group_size=128)
    s = qobs.QuantizationScheme(targets=["Linear"], weights=w)
    assert s.weights == w and s.input_activations is None
    with pytest.raises(ValueError):  # R1.4.2 actorder on activations
        qobs.QuantizationScheme(targets=["Linear"], input_activations=dict(group_size=128, actorder="weight"))


def test_compressed_tensors_args_are_accepted(llmcompressor, torch):
    from compressed_tensors.quantization import QuantizationArgs as CTArgs

    ct = CTArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype=torch.float8_e4m3fn)
    ours = QuantizationArgs.model_validate(ct)
    assert ours.strategy == "tensor_group" and ours.scale_dtype == torch.float8_e4m3fn


def test_reference_versions_name_the_releases_followed():
    # docs/RULES.md R0.6: compressed-tensors for the args, formats and config.json,
    # llm-compressor for the observers
    assert qobs.reference_versions() == {"compressed_tensors": "0.20.1", "llm_compressor": "0.14.0.1"}


def test_mxfp6_presets_and_fp6_args():
    w = qobs.preset_name_to_scheme("MXFP6A16", ["Linear"]).weights
    assert (w.num_bits, w.type, w.group_size) == (6, "float", 32)
    assert qobs.preset_name_to_scheme("mxfp6a8", ["Linear"]).input_activations.num_bits == 8
    assert qobs.preset_name_to_scheme("MXFP4XFP8", ["Linear"]).input_activations.group_size == 128
    # zp_dtype inferred as for FP4 (R1.3.1 step 9)
    assert str(QuantizationArgs(num_bits=6, type="float").zp_dtype).endswith("float8_e4m3fn")
