"""Project rules checked on every run: functorch-free, lint-clean, type-clean."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("aot", "wrappers", "meta")
FORBIDDEN = ("torch._functorch", "functorch", "torch.func", "torch._subclasses.functional_tensor")


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            # torch._functorch.x used without an import of its own
            parts = []
            value: ast.AST = node
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                names.append(".".join([value.id, *reversed(parts)]))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            if isinstance(node.args[0], ast.Constant):
                names.append(str(node.args[0].value))
    return names


def _is_forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def test_forbidden_import_detector_works():
    assert _is_forbidden("torch._functorch.aot_autograd")
    assert _is_forbidden("functorch.compile")
    assert _is_forbidden("torch.func")
    assert not _is_forbidden("torch.functional")
    assert not _is_forbidden("torch.fx")


def test_package_is_functorch_free():
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imports(path)
        if _is_forbidden(name)
    ]
    assert not offenders, "functorch-free rule broken:\n" + "\n".join(offenders)


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return [sys.executable, "-m", name]


def test_ruff():
    result = subprocess.run([*_tool("ruff"), "check", "."], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_meta_and_wrappers():
    result = subprocess.run([*_tool("mypy"), "meta", "wrappers", "aot"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
