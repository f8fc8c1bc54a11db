"""The checked-in type stub of the extension (python/qobs/_qobs.pyi) names exactly
what the extension exports, so that type checkers see the real binding.

Regenerate after changing the binding:
    PYTHONPATH=python pybind11-stubgen qobs._qobs -o /tmp/stubs && cp /tmp/stubs/qobs/_qobs.pyi python/qobs/
"""

import ast
import pathlib

import qobs
from qobs import _qobs

STUB = pathlib.Path(qobs.__file__).with_name("_qobs.pyi")


def _public(names):
    # dunders differ by pybind11 version (e.g. a raising __init__ for classes without
    # a constructor) and are not part of the API the stub documents
    return {n for n in names if not n.startswith("_")}


def _stub_names():
    tree = ast.parse(STUB.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {
                n.name if isinstance(n, (ast.FunctionDef, ast.ClassDef)) else n.target.id
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
    return top, members


def test_stub_lists_every_export():
    top, members = _stub_names()
    exported = _public(dir(_qobs))
    assert exported == _public(top)
    for cls in (c for c in top if isinstance(getattr(_qobs, c, None), type)):
        have = _public(vars(getattr(_qobs, cls)))
        assert have == _public(members[cls]), cls
