"""Shared fixtures for the qobs Python tests.

torch and llmcompressor are optional: tests that need them request the `torch` /
`llmcompressor` fixtures and are skipped when the package is not installed.
"""

import importlib
import os
import pathlib

import pytest

# tests/golden of the source tree (the package is tested from a checkout).
GOLDEN_DIR = pathlib.Path(os.environ.get("QOBS_GOLDEN_DIR", pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden"))


def _optional(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")


@pytest.fixture(scope="session")
def torch():
    return _optional("torch")


@pytest.fixture(scope="session")
def llmcompressor():
    _optional("torch")
    return _optional("llmcompressor")


@pytest.fixture(scope="session")
def qobs_cli():
    """The built qobs executable ($QOBS_CLI, else build/cli/qobs of the checkout); the
    test is skipped when it was not built."""
    p = pathlib.Path(os.environ.get("QOBS_CLI", pathlib.Path(__file__).resolve().parents[2] / "build" / "cli" / "qobs"))
    if not p.exists():
        pytest.skip(f"qobs CLI not built at {p}")
    return p
