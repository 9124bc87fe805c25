"""The layering of the tree: the contract is a leaf, fpga and hls_ref stand on it alone, tests stay tests.

hwcontract  <-  fpga, hls_ref  <-  specdec (runtime, drivers, backends, CLI)  <-  tb, tests

Checked on the import statements of every module (top-level and function-local imports alike).
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("hwcontract", "fpga", "hls_ref", "specdec", "tb", "tests")


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Top-level project packages that ``path`` imports (relative imports resolve inside its own package)."""
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out & set(PROJECT)


@pytest.mark.parametrize("folder, allowed", [
    ("hwcontract", {"hwcontract"}),
    ("fpga", {"hwcontract", "fpga"}),
    ("hls_ref", {"hwcontract", "hls_ref"}),
    ("host/specdec", {"hwcontract", "fpga", "hls_ref", "specdec"}),
    ("scripts", {"hwcontract", "specdec"}),
])
def test_layers(folder, allowed):
    bad = {str(p.relative_to(ROOT)): sorted(_imports(p) - allowed) for p in _modules(folder)}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{folder} may import only {sorted(allowed)}: {bad}"


def test_no_test_module_imports_another():
    """A test module (test_*.py) imports shared helpers, never another test module."""
    bad = []
    for p in _modules("tb") + _modules("tests"):
        tree = ast.parse(p.read_text(), str(p))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[-1].startswith("test_"):
                    bad.append(f"{p.relative_to(ROOT)}: from {node.module}")
            elif isinstance(node, ast.Import):
                bad += [f"{p.relative_to(ROOT)}: import {a.name}" for a in node.names
                        if a.name.split(".")[-1].startswith("test_")]
    assert not bad, bad


def _setup_cfg(key: str) -> str:
    """``setup.cfg``'s ``[options]`` value ``key`` (the package's metadata lives there)."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg["options"][key]


def test_tb_is_not_installed():
    packages, package_dir = _setup_cfg("packages").split(), _setup_cfg("package_dir")
    assert not [p for p in packages if p.split(".")[0] in ("tb", "tests")]
    assert "tb" not in [line.split("=")[0].strip() for line in package_dir.splitlines()]


#: What a board runs: setup.cfg's python_requires (3.10, a PYNQ-Z2's PYNQ 3.0 image) holds for all of it.
PRODUCT = ("hwcontract", "fpga", "hls_ref", "host/specdec")


def test_product_code_keeps_to_python_310():
    """Every product module parses with Python 3.10's grammar, and exceptions take notes (PEP 678, 3.11) only
    through ``specdec.errors.add_note``: on 3.10 a bare ``error.add_note(...)`` raised AttributeError in place
    of the error it annotated."""
    assert _setup_cfg("python_requires") == ">=3.10"
    bad = []
    for p in [m for folder in PRODUCT for m in _modules(folder)]:
        tree = ast.parse(p.read_text(), str(p), feature_version=(3, 10))
        if p == ROOT / "host/specdec/errors.py":
            continue
        bad += [f"{p.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_note"]
    assert not bad, f"call specdec.errors.add_note(error, note) instead of error.add_note(note): {bad}"


def test_pyflakes_clean():
    """No unused or undefined names, no unused imports and no placeholder-less f-strings anywhere in the tree
    (ruff's pyflakes rules, pyproject.toml's ``[tool.ruff.lint]``; .gitignore'd paths such as build/ are skipped)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff, "ruff is not installed: `make setup` installs it (scripts/requirements-base.txt)"
    r = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
