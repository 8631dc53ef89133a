"""Issue 23's "one vocabulary" rules (tests/test_layout.py is at its 400 lines): every `tidewise.io/`
key is written once, in contracts/annotations.py, and every shipped module imports it from there."""
import ast
import os
import tomllib

from tests.conftest import ROOT
from tests.test_layout import python_files

KEYS_HOME = os.path.join("contracts", "annotations.py")


def shipped():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        include = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({p.rstrip("*").rstrip(".") for p in include})


def key_literals(path):
    """(line, text) of each string in the code (docstrings aside) that starts with `tidewise.io/`."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and n.value.startswith("tidewise.io/") and id(n) not in docs]


def test_key_literals_finds_constants_dict_keys_and_fstrings_not_docstrings(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""About tidewise.io/manage."""\nKEY = "tidewise.io/manage"\n'
                 'def f(x):\n    """tidewise.io/x"""\n    return {"tidewise.io/evict": 1, f"tidewise.io/{x}": 2}\n')
    assert [line for line, _ in key_literals(str(f))] == [2, 5, 5]


def test_annotation_keys_are_written_only_in_contracts_annotations():
    bad = [f"{os.path.relpath(path, ROOT)}:{line}: {text!r}" for pkg in shipped() for path in python_files(pkg)
           if os.path.relpath(path, ROOT) != KEYS_HOME for line, text in key_literals(path)]
    assert not bad, f"import the key from contracts.annotations instead: {bad}"


def test_each_annotation_key_is_defined_once():
    import contracts.annotations as keys

    values = [v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str)]
    assert len(values) >= 10 and len(values) == len(set(values)), values
    assert all(v.startswith(keys.PREFIX) for v in values)
