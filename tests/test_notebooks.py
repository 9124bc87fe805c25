"""The notebooks (``notebooks/*.ipynb``, docs/notebooks.md): committed clean, delivered by ``specdec notebooks DIR``
and by pynq's ``pynq.notebooks`` entry point, and executed cell by cell on the golden backend.

Execution is nbclient's, in a kernel of this interpreter, every cell in order as "Run All" runs them: a cell that
raises, a failing ``assert`` included, fails the test. Off a board (no emulation: the backend is picked as a
newcomer's kernel picks it) the cells tagged ``board`` each print that they were skipped and how to run them
emulated, and the notebook runs to its end; under ``long`` every cell, the board's included, runs on both
emulated boards (``SPECDEC_EMULATE``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from hwcontract import board as bd  # noqa: E402
from specdec import cli, paths  # noqa: E402
from specdec.app import notebook, runner  # noqa: E402
from specdec.decoding.tree import Tree  # noqa: E402
from specdec.hw import cores, hwh, overlay, selftest  # noqa: E402
from specdec.models import loading  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
#: The notebooks issue #17 asks for, in their order, and the PYNQ-Z2's replay of recorded rounds.
NAMES = ["01_getting_started", "02_speculative_generation", "03_token_trees", "04_kv_page_table",
         "05_draft_engine", "06_recorded_rounds"]
#: The notebooks that draw (an image/png output once executed).
PLOTS = {"02_speculative_generation", "03_token_trees", "04_kv_page_table", "05_draft_engine", "06_recorded_rounds"}
CELL_TIMEOUT_S = 300


def read(name: str):
    return nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


def is_board(cell) -> bool:
    return notebook.BOARD_TAG in cell.metadata.get("tags", [])


def execute(nb, cwd: Path) -> None:
    """Run every code cell of ``nb`` in a fresh kernel, as "Run All" does (outputs land in ``nb``);
    CellExecutionError on the first cell that raises."""
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()


def text(cell) -> str:
    """What a code cell printed."""
    return "".join(o.get("text", "") for o in cell.outputs)


#: The notebooks a PYNQ-Z2 runs (README: its ARMv7 image has no torch wheels; these need no model).
Z2_NOTEBOOKS = {"01_getting_started", "04_kv_page_table", "06_recorded_rounds"}
#: What a PYNQ-Z2 lacks: the models' stack (what ``specdec.models`` requires) and the tokenizers.
ML_STACK = (*loading.ML_STACK, "tokenizers")


def without_ml_stack(monkeypatch, tmp_path: Path) -> None:
    """Kernels started from now on cannot import :data:`ML_STACK`, as on a PYNQ-Z2: a ``sitecustomize`` first
    on their ``PYTHONPATH`` marks each absent (``None`` in ``sys.modules``: ``import`` raises
    ModuleNotFoundError, ``importlib.util.find_spec`` answers None)."""
    shim = tmp_path / "no-ml-stack"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({ML_STACK!r}))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])))


def record_rounds(path: Path) -> None:
    """What a host writes for notebook 6 (``specdec generate ... --record``): the notebook's own recording job."""
    job = {"prompts": ["To be, or not to be"], "max_new_tokens": 24, "gamma": 4, "seed": 0}
    runner.record(job, "ref")[0].save(path)


@pytest.fixture
def golden_env(monkeypatch):
    """The kernel's environment: the golden backend chosen explicitly, no emulated board, one torch thread (as
    every model test here)."""
    monkeypatch.setenv(notebook.BACKEND_ENV, "ref")
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def newcomer_env(monkeypatch):
    """A newcomer's kernel off a board: no backend chosen, no emulated board (the first cell picks ``ref`` as pynq
    finds no device), one torch thread."""
    if overlay.pynq_board_here():
        pytest.skip("pynq finds a board here: the notebooks pick it")
    monkeypatch.delenv(notebook.BACKEND_ENV, raising=False)
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# ------------------------------------------------------------------------------------------------
# The files
# ------------------------------------------------------------------------------------------------
def test_the_notebooks_are_committed_clean():
    """The notebooks, numbered, without outputs, small; the first code cell picks the backend (notebook 1's
    second runs the self-test); every code cell asserts what it shows; the board's cells are tagged, come last
    and run their body only on a board."""
    assert sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")) == NAMES
    for name in NAMES:
        path = NOTEBOOK_DIR / f"{name}.ipynb"
        assert path.stat().st_size < 16_000, f"{name}: {path.stat().st_size} bytes"
        nb = read(name)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
        code = [c for c in nb.cells if c.cell_type == "code"]
        for c in code:
            assert c.outputs == [] and c.execution_count is None, f"{name}: a cell was committed with outputs"
            assert "assert " in c.source, f"{name}: a code cell asserts nothing:\n{c.source}"
        assert "notebook.pick_backend()" in code[0].source and "notebook.connect(" in code[0].source
        board = [i for i, c in enumerate(code) if is_board(c)]
        assert board, f"{name}: no cell tagged {notebook.BOARD_TAG!r}"
        assert board == list(range(board[0], len(code))), f"{name}: the board's cells must come last"
        assert all(code[i].source.startswith("if notebook.board_cell(backend):\n") for i in board)
        assert all(ln.startswith("    ") or not ln for i in board for ln in code[i].source.split("\n")[1:])
    second = [c for c in read(NAMES[0]).cells if c.cell_type == "code"][1]
    assert "report = selftest.run(backend.overlay)" in second.source


# ------------------------------------------------------------------------------------------------
# Delivery
# ------------------------------------------------------------------------------------------------
def test_specdec_notebooks_copies_them_and_refuses_to_overwrite(tmp_path, capsys):
    dest = tmp_path / "nbs"
    assert cli.main(["notebooks", str(dest)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    for name in NAMES:
        assert (dest / f"{name}.ipynb").read_bytes() == (NOTEBOOK_DIR / f"{name}.ipynb").read_bytes()
        assert f"wrote {dest / name}.ipynb" in out
    mine = dest / f"{NAMES[0]}.ipynb"
    mine.write_text("edited by its user")
    assert cli.main(["notebooks", str(dest)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--force" in err and str(mine) in err
    assert mine.read_text() == "edited by its user"
    assert cli.main(["notebooks", str(dest), "--force"]) == cli.EXIT_OK
    assert mine.read_bytes() == (NOTEBOOK_DIR / mine.name).read_bytes()
    assert cli.main(["notebooks", str(mine)]) == cli.EXIT_USAGE           # a file is no directory
    assert "is a file" in capsys.readouterr().err
    assert cli.main(["notebooks", "/proc/specdec-notebooks"]) == cli.EXIT_USAGE   # /proc takes no new directory
    assert "DIR /proc/specdec-notebooks: cannot be written (" in capsys.readouterr().err
    # a directory where a notebook goes: --force refuses before writing any (it wrote the notebooks before it)
    fresh = tmp_path / "fresh"
    (fresh / f"{NAMES[-1]}.ipynb").mkdir(parents=True)
    assert cli.main(["notebooks", str(fresh), "--force"]) == cli.EXIT_USAGE
    assert f"a directory stands where a notebook goes: {fresh / NAMES[-1]}.ipynb" in capsys.readouterr().err
    assert sorted(p.name for p in fresh.iterdir()) == [f"{NAMES[-1]}.ipynb"]


def test_specdec_notebooks_help_names_every_notebook(capsys):
    """The command's help lists the notebooks it copies, all of them (it once named five of six by hand)."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    # the names, comma-separated, up to the next command's help (``waves``) or the options
    listed = re.search(r"notebooks copy the Jupyter notebooks into DIR: (\w+(?:, \w+)*)", text)
    assert listed, text
    assert listed.group(1).split(", ") == NAMES


@pytest.mark.filterwarnings("ignore:pkg_resources is deprecated:DeprecationWarning")
def test_pynq_get_notebooks_finds_and_delivers_them(tmp_path):
    """The ``pynq.notebooks`` entry point resolves (as pynqutils resolves it) to the installed notebooks, and
    ``pynq get-notebooks specdec`` copies them all, without the package's ``__init__.py``."""
    from pynqutils.setup_utils import ExtensionsManager
    ext = {e.name: e for e in ExtensionsManager("pynq.notebooks").list}
    assert "specdec" in ext, "no pynq.notebooks entry point: reinstall specdec (scripts/setup.sh)"
    src = Path(ExtensionsManager.extension_path(ext["specdec"].module_name))
    assert sorted(p.stem for p in src.glob("*.ipynb")) == NAMES
    script = Path(sys.executable).with_name("pynq-get-notebooks")
    subprocess.run([str(script), "specdec", "--path", str(tmp_path), "--ignore-overlays", "--quiet"], check=True,
                   capture_output=True, timeout=120)
    got = tmp_path / "specdec"
    assert sorted(p.name for p in got.iterdir()) == [f"{n}.ipynb" for n in NAMES]
    assert all((got / f"{n}.ipynb").read_bytes() == (NOTEBOOK_DIR / f"{n}.ipynb").read_bytes() for n in NAMES)


# ------------------------------------------------------------------------------------------------
# The helper module
# ------------------------------------------------------------------------------------------------
def test_pick_backend(monkeypatch):
    monkeypatch.setattr(notebook, "on_board", lambda environ=None: False)
    assert notebook.pick_backend({}) == "ref"
    assert notebook.pick_backend({notebook.BACKEND_ENV: "pynq"}) == "pynq"
    monkeypatch.setattr(notebook, "on_board", lambda environ=None: True)
    assert notebook.pick_backend({}) == "pynq"
    assert notebook.pick_backend({notebook.BACKEND_ENV: "ref"}) == "ref"
    with pytest.raises(ValueError, match=r"SPECDEC_BACKEND='sim'.*ref, pynq"):
        notebook.pick_backend({notebook.BACKEND_ENV: "sim"})


def test_pick_backend_reads_the_emulation_from_the_environment_it_is_given(monkeypatch):
    """``pick_backend(environ)`` had read SPECDEC_EMULATE from the process's environment, not ``environ``."""
    monkeypatch.setattr(overlay, "pynq_board_here", lambda: False)
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    assert notebook.pick_backend({paths.EMULATE_ENV: "kv260"}) == "pynq"
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    assert notebook.pick_backend({}) == "ref"
    assert notebook.pick_backend() == "pynq"


def test_on_board_is_pynqs_device_or_the_emulation(monkeypatch):
    import warnings
    from pynq import Device
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    assert notebook.on_board()
    monkeypatch.delenv(paths.EMULATE_ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert notebook.on_board() == bool(Device.devices)


def test_board_cell_runs_on_a_board_and_says_why_it_skips_elsewhere(monkeypatch, capsys):
    """Off a board a board cell's body is skipped with a line saying why and how to run it emulated; on the
    emulated board it runs."""
    assert notebook.board_cell(notebook.connect("ref")) is False
    assert capsys.readouterr().out == (
        "skipped: this cell needs a board (tag 'board'), and the notebook runs on backend 'ref', the golden models. "
        "On a PYNQ board it runs as it is; off a board, start Jupyter with SPECDEC_EMULATE=kv260 (or "
        "SPECDEC_EMULATE=pynq-z2) to run it on the emulated board.\n")
    monkeypatch.setenv(paths.EMULATE_ENV, "pynq-z2")
    assert notebook.board_cell(notebook.connect("pynq")) is True
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="backend 'sim'"):
        notebook.connect("sim")


def test_cycles_become_time_at_the_clock_pynq_reports(monkeypatch):
    """On a board the notebooks convert cycles at PL clock 0 as pynq reports it (here set to PLL / 9 after the
    download); on ref, which has no clock, at the KV260's first clock rung."""
    from pynq.ps import Clocks
    ref = notebook.connect("ref")
    assert ref.fclk_mhz == bd.design("kv260").fclk.mhz and ref.seconds(1000) == 1000 / (ref.fclk_mhz * 1e6)
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    board = notebook.connect("pynq")
    assert board.fclk_mhz == pytest.approx(bd.design("kv260").fclk.mhz)
    Clocks.set_pl_clk(0, 9, 1)
    ninth = hwh.ps(bd.design("kv260")).pll_mhz / 9
    assert board.fclk_mhz == pytest.approx(ninth) and board.seconds(1000) == pytest.approx(1000 / (ninth * 1e6))
    assert "PL clock 0 of the kv260 as pynq reports it" == board.clock_source


def test_replay_rounds_keeps_the_accepted_rows_only():
    pytest.importorskip("torch")            # specdec.kv.paged
    kv = cores.golden_kvpage()
    rounds = notebook.replay_rounds(kv, [4, 0, 2, 4, 1], gamma=4, prompt_tokens=7, block=4)
    assert [r["tokens"] for r in rounds] == [6 + 5, 11 + 1, 12 + 3, 15 + 5, 20 + 2]
    assert all(r["pages"] == -(-r["tokens"] // 4) and r["free_pages"] == kv.pages - r["pages"] for r in rounds)
    # a WRITE a new row, FORK + COMMIT where the rejected tokens leave rows (rounds 2, 3 and 5); no copies
    assert [r["ops"] for r in rounds] == [1, 3, 4, 1, 4] and [r["copies"] for r in rounds] == [0] * 5
    assert kv.free_pages == kv.pages and kv.live() == ([], [])
    with pytest.raises(ValueError, match="accepts 0..gamma=4"):
        notebook.replay_rounds(kv, [5], gamma=4, prompt_tokens=7, block=4)
    # 1.5 accepted tokens had given a round of 5.5 tokens; an iterator was spent by the check (its message
    # showed [] and nothing ran)
    with pytest.raises(ValueError, match="accepted must be integers"):
        notebook.replay_rounds(kv, [1.5], gamma=4, prompt_tokens=7, block=4)
    assert [r["accepted"] for r in notebook.replay_rounds(kv, iter([1, 2]), gamma=4, prompt_tokens=7, block=4)] == [1, 2]
    # a gamma or block of 2.5 had run (rounds of 3.5 tokens, pages of 2); a negative gamma blamed `accepted`
    for kw, what in (({"gamma": 2.5}, "gamma must be an integer, got 2.5"),
                     ({"block": 2.5}, "paged KV cache: block must be an integer, got 2.5"),
                     ({"block": True}, "paged KV cache: block must be an integer, got the bool True"),
                     ({"prompt_tokens": "7"}, "prompt_tokens must be an integer, got '7'"),
                     ({"gamma": -1}, "gamma must be >= 0 draft tokens a round, got -1")):
        with pytest.raises(ValueError, match=re.escape(what)):
            notebook.replay_rounds(kv, [], **{"gamma": 4, "prompt_tokens": 7, "block": 4, **kw})
    assert kv.free_pages == kv.pages and kv.live() == ([], [])


def test_agreeing_rows_walk_the_chosen_path():
    tree = Tree((-1, 0, 0, 1, 1, 3), (9, 5, 6, 7, 8, 4))
    rows = notebook.agreeing_rows(tree, 5, 2, 10)
    assert rows.argmax(axis=1)[[0, 1, 3, 5]].tolist() == [5, 7, 4, 2]
    ver = cores.golden_verifier()
    res = ver.verify_tree(tree.parents, tree.tokens, rows, greedy=True)
    assert (res.path, res.next_token, res.rows) == ((1, 3, 5), 2, 4)
    with pytest.raises(ValueError, match="child of node 1"):
        notebook.agreeing_rows(tree, 1, 7, 10)
    # node 9 had been a bare IndexError, node -1 built the rows of node 5, 7.0 a numpy IndexError
    for node in (9, -1):
        with pytest.raises(ValueError, match=f"node {node} is not a node of the tree"):
            notebook.agreeing_rows(tree, node, 2, 10)
    with pytest.raises(ValueError, match="next_token must be an integer, got 7.0"):
        notebook.agreeing_rows(tree, 3, 7.0, 10)
    with pytest.raises(ValueError, match="2 labels for 6 nodes"):
        notebook.plot_tree(tree, ["a", "b"])
    # a vocabulary of 16.5 had raised numpy's TypeError, naming no argument
    with pytest.raises(ValueError, match="vocab must be an integer, got 16.5"):
        notebook.agreeing_rows(tree, 3, 2, 16.5)


def test_pictures_refuse_what_they_would_draw_wrong():
    """Each had drawn a wrong picture, or failed inside matplotlib naming no argument: a path through a node the
    tree does not have (drawn as nothing), acceptance values that are no probabilities (the string "x" drawn as
    a category), a mask that is no square matrix (matplotlib's "Invalid shape")."""
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    tree = Tree((-1, 0, 0, 1), (9, 5, 6, 7))
    labels = list("abcd")
    with pytest.raises(ValueError, match=r"path \[0, 9\]: nodes of the tree are 0..3"):
        notebook.plot_tree(tree, labels, path=[0, 9])
    with pytest.raises(ValueError, match="path must be integers, got"):
        notebook.plot_tree(tree, labels, path=[1.0])
    for bad in ("x", 1.5, -0.1, True):
        with pytest.raises(ValueError, match=re.escape(f"probabilities in [0, 1] or None, got {bad!r}")):
            notebook.plot_acceptance([0.5, bad])
    with pytest.raises(ValueError, match=r"mask must be a square \(N, N\) matrix, got shape \(4,\)"):
        notebook.plot_mask(np.ones(4, bool))
    assert notebook.plot_tree(tree, labels, path=np.array([1, 3])).texts
    assert notebook.plot_acceptance([0.5, None, np.float32(0.25), 1]).patches
    assert notebook.plot_mask(np.eye(3, dtype=bool), list("abc")).images


# ------------------------------------------------------------------------------------------------
# Execution
# ------------------------------------------------------------------------------------------------
#: The notebooks the default suite runs; the others (each 15-35 s of models and plots) run under ``long``.
QUICK = {"01_getting_started", "04_kv_page_table"}


@pytest.mark.ml
@pytest.mark.parametrize("name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.long) for n in NAMES])
def test_run_all_off_a_board_runs_to_the_end(name, tmp_path, newcomer_env, monkeypatch):
    """"Run All" in a newcomer's kernel off a board: the first cell picks the golden backend, every cell runs
    without error (so every assert holds), each board cell printing that it was skipped and how to run it on the
    emulated board (they had stopped the notebook with BoardRequired); notebook 1's self-test passes on the
    golden models; the notebooks that plot show their plots. The PYNQ-Z2's notebooks run in a kernel without
    torch, transformers and tokenizers, notebook 6 on a recording made here first, as a host would."""
    pytest.importorskip("torch")
    nb = read(name)
    if name in Z2_NOTEBOOKS:
        without_ml_stack(monkeypatch, tmp_path)
        if name == "06_recorded_rounds":
            record_rounds(tmp_path / "rounds.npz")
    execute(nb, tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert "backend ref" in text(code[0])
    for c in code:
        if is_board(c):
            assert text(c).startswith("skipped: this cell needs a board") and "SPECDEC_EMULATE=kv260" in text(c)
            assert [o for o in c.outputs if o.output_type != "stream"] == []
    if name == NAMES[0]:
        checks = len(selftest.CORE_CHECKS) + sum(len(c) for c in selftest.CORE_CHECKS.values())
        assert text(code[1]).rstrip().endswith(f"passed: {checks} checks")
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert bool(images) == (name in PLOTS)


@pytest.mark.long
def test_recorded_rounds_without_torch_or_a_recording_says_where_to_make_one(tmp_path, golden_env, monkeypatch):
    without_ml_stack(monkeypatch, tmp_path)
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="rounds.npz is missing and this machine "
                       "cannot run the models: write it on a host with `specdec generate ... --record"):
        execute(read("06_recorded_rounds"), tmp_path)
    assert not (tmp_path / "rounds.npz").exists()


@pytest.mark.long
@pytest.mark.ml
@pytest.mark.parametrize("board", ["kv260", "pynq-z2"])
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_on_the_emulated_board(name, board, tmp_path, monkeypatch):
    """Every cell, the board's included, on the emulated board: pynq's Overlay, DMA and buffers over the golden
    register models (``SPECDEC_EMULATE``; the backend is picked as on a board). On the PYNQ-Z2 the draft
    engine's layers stream (notebook 5); its notebooks 1, 4 and 6 run without the models' stack, notebook 6 on
    a recording made first, as a host would (README: the PYNQ-Z2, without the models)."""
    pytest.importorskip("torch")
    monkeypatch.delenv(notebook.BACKEND_ENV, raising=False)
    monkeypatch.setenv(paths.EMULATE_ENV, board)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = read(name)
    if board == "pynq-z2" and name in Z2_NOTEBOOKS:     # as on the board: no torch, a host's recording
        without_ml_stack(monkeypatch, tmp_path)
        if name == "06_recorded_rounds":
            record_rounds(tmp_path / "rounds.npz")
    execute(nb, tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert f"backend pynq: the specdec overlay on the {board}, emulated" in text(code[0])
    assert not any("skipped" in text(c) for c in code if is_board(c))
    if name == NAMES[0]:        # the self-test, and the clock pynq reports
        d = bd.design(board)
        checks = len(d.cells) + sum(len(selftest.CORE_CHECKS[c.name]) for c in d.cells) + len(d.dmas) + 1
        assert text(code[1]).rstrip().endswith(f"passed: {checks} checks")
        assert f"fabric clock {d.fclk.mhz:.3f} MHz as pynq reports it" in text(code[-2])
