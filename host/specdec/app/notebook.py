"""What the notebooks call: the backend they run on, their delivery, and the few pictures they draw.

The notebooks (``notebooks/*.ipynb``, installed with the package as ``specdec.notebooks``) are delivered
the PYNQ way: ``pynq get-notebooks specdec`` (the ``pynq.notebooks`` entry point) or
``specdec notebooks DIR`` (:func:`deliver`). Each one starts with::

    from specdec.app import notebook
    BACKEND = notebook.pick_backend()        # "pynq" on a board, "ref" (the golden models) elsewhere
    backend = notebook.connect(BACKEND)

and every later cell runs on either backend.

Backend choice (:func:`pick_backend`): ``SPECDEC_BACKEND`` (``ref`` or ``pynq``) when set; else ``pynq``
when ``SPECDEC_EMULATE`` names a board to emulate (:mod:`specdec.hw.emuboard`) or pynq finds a device (the
PYNQ board the kernel runs on); else ``ref``.

The first cells of notebook 1 run the board's self-test (:func:`specdec.hw.selftest.run` of ``backend.overlay``:
the overlay's on a board, the golden models' on ``ref``).

Cells that need a board carry the cell tag ``board`` (:data:`BOARD_TAG`), come last in their notebook and
run their body under ``if notebook.board_cell(backend):`` (:func:`board_cell`): off a board "Run All" runs
every cell to the end, each board cell printing that it was skipped, why, and how to run it on the emulated
board. Cycles become time at :attr:`Backend.fclk_mhz`: on a board the fabric clock pynq reports.
"""
from __future__ import annotations

import importlib.resources
import numbers
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from hwcontract import board as bd
from hwcontract.regmap import integer, integers

from ..decoding.tree import Tree
from ..hw import overlay
from ..hw.cores import Cores, Fabric, golden_draftengine
from ..hw.drivers import DraftEngine, KVPage, TreeMask, Verifier
from ..kv.pagetable import PagedKV
from ..paths import EMULATE_ENV
from . import runner
from .job import Job, as_job

if TYPE_CHECKING:
    from .pairs import Pair

#: The backends a notebook runs on: the golden register models, or a board (real or emulated); the backends whose
#: cores run in this process.
BACKENDS = runner.HERE
#: Set to ``ref`` or ``pynq`` to choose the notebooks' backend instead of detecting a board.
BACKEND_ENV = "SPECDEC_BACKEND"
#: The cell tag of the cells that need a board.
BOARD_TAG = "board"
#: The package holding the notebooks (the ``pynq.notebooks`` entry point names it).
NOTEBOOKS_PACKAGE = "specdec.notebooks"


# ------------------------------------------------------------------------------------------------
# The backend
# ------------------------------------------------------------------------------------------------
def on_board(environ: Mapping[str, str] | None = None) -> bool:
    """Whether pynq finds a device here (a PYNQ board's PL), or ``SPECDEC_EMULATE`` (in ``environ``, default
    the process's environment) names a board to emulate."""
    env = os.environ if environ is None else environ
    return bool(env.get(EMULATE_ENV)) or overlay.pynq_board_here()


def pick_backend(environ: Mapping[str, str] | None = None) -> str:
    """The notebooks' backend: ``SPECDEC_BACKEND`` when set, else ``pynq`` on a board (:func:`on_board`),
    else ``ref``.

    Raises
    ------
    ValueError
        ``SPECDEC_BACKEND`` is set to something other than ``ref`` or ``pynq``.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(BACKEND_ENV, "").strip()
    if chosen:
        if chosen not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV}={chosen!r}: the notebooks run on one of {', '.join(BACKENDS)}")
        return chosen
    return "pynq" if on_board(env) else "ref"


@dataclass
class Backend:
    """One backend's cores, as the notebooks use them.

    Attributes
    ----------
    name : str
        ``ref`` or ``pynq``.
    cores : Cores
        The verifier, treemask and kvpage drivers (the board's with their DMA channels attached).
    overlay : SpecdecOverlay or None
        The board's overlay (``pynq``), None on ``ref``.
    """

    name: str
    cores: Cores
    overlay: Any = None
    _engine: DraftEngine | None = field(default=None, repr=False)
    _fabric: Fabric | None = field(default=None, repr=False)

    @property
    def verifier(self) -> Verifier:
        return self.cores.verifier

    @property
    def masker(self) -> TreeMask:
        return self.cores.masker

    @property
    def kv(self) -> KVPage:
        return self.cores.kv

    @property
    def board(self) -> str | None:
        """The board's name (``kv260``, ``pynq-z2``), None on ``ref``."""
        return getattr(self.overlay, "board", None)

    def draft_engine(self) -> DraftEngine:
        """The draft engine's driver (the same one on every call): the overlay's, its DMA attached, or the
        golden register model at the build that holds the whole demo draft."""
        if self._engine is None:
            self._engine = self.overlay.draft_engine() if self.overlay is not None else golden_draftengine()
        return self._engine

    def fabric(self, job: Job) -> Fabric | None:
        """What ``job``'s draft runs on: None for a host draft; for a fabric draft :meth:`draft_engine` with, on a
        board whose overlay holds them, its vector unit and tree-attention unit (the same drivers on every
        call)."""
        if job.draft_engine != "fabric":
            return None
        if self.overlay is None:
            return Fabric(self.draft_engine())
        if self._fabric is None:
            self._fabric = self.overlay.fabric(self.draft_engine())
        return self._fabric

    @property
    def fclk_mhz(self) -> float:
        """The fabric clock cycles are converted with, in MHz: on a board (real or emulated) PL clock 0 as pynq
        reports it (:attr:`specdec.hw.overlay.SpecdecOverlay.fclk_mhz`); on ``ref``, whose golden models have no
        clock, the first rung of the KV260's clock ladder (the rate its flow builds at first,
        :attr:`hwcontract.board.Board.fclk`)."""
        if self.overlay is not None:
            return self.overlay.fclk_mhz
        return bd.design("kv260").fclk.mhz

    @property
    def clock_source(self) -> str:
        """Where :attr:`fclk_mhz` comes from, as a notebook prints it."""
        if self.overlay is not None:
            return f"PL clock 0 of the {self.board} as pynq reports it"
        return "no clock runs the golden models: the KV260's first clock rung"

    def seconds(self, cycles: int | float) -> float:
        """``cycles`` of the fabric clock in seconds (at :attr:`fclk_mhz`)."""
        return cycles / (self.fclk_mhz * 1e6)

    def run(self, job: Job | Mapping[str, Any], pair: Pair | None = None) -> dict:
        """Run ``job`` through the decode loop on these cores (:func:`specdec.app.runner.execute`); a fabric
        draft runs on :meth:`draft_engine`."""
        job = as_job(job)
        job.check_backend(self.name)
        return runner.execute(job, self.verifier, pair, masker=self.masker, kv=self.kv, fabric=self.fabric(job))

    def __str__(self) -> str:
        if self.overlay is None:
            return "backend ref: the golden register models (hls_ref), in this process"
        how = "emulated (SPECDEC_EMULATE)" if os.environ.get(EMULATE_ENV) else "this board's PL"
        return f"backend pynq: the specdec overlay on the {self.board}, {how}"


def connect(name: str | None = None) -> Backend:
    """The cores of backend ``name`` (default :func:`pick_backend`): a board loads the specdec overlay
    (:func:`specdec.hw.overlay.pynq_overlay`: ``SPECDEC_BITSTREAM``, or the emulated board ``SPECDEC_EMULATE``
    names); ``ref`` builds the golden register models.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`BACKENDS`.
    """
    name = pick_backend() if name is None else name
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r}: the notebooks run on one of {', '.join(BACKENDS)}")
    if name == "ref":
        return Backend("ref", runner.cores("ref"))
    try:
        ol = overlay.pynq_overlay()
    except (FileNotFoundError, RuntimeError) as err:     # its advice names the CLI's options; here, the notebooks'
        raise type(err)(f"{err}. In a notebook: connect('ref'), or {BACKEND_ENV}=ref") from None
    return Backend("pynq", ol.cores(), ol)


def board_cell(backend: Backend) -> bool:
    """Whether a cell that needs a board (tag :data:`BOARD_TAG`) runs: True on a board, real or emulated. Off a
    board it prints that the cell is skipped, why, and how to run it on the emulated board, and returns False:
    the cell's body, under ``if notebook.board_cell(backend):``, does not run, and "Run All" goes on."""
    if backend.overlay is not None:
        return True
    env = EMULATE_ENV
    print(f"skipped: this cell needs a board (tag {BOARD_TAG!r}), and the notebook runs on backend {backend.name!r}, "
          f"the golden models. On a PYNQ board it runs as it is; off a board, start Jupyter with {env}=kv260 (or "
          f"{env}=pynq-z2) to run it on the emulated board.")
    return False


# ------------------------------------------------------------------------------------------------
# Delivery
# ------------------------------------------------------------------------------------------------
def notebook_dir() -> Path:
    """The directory the installed notebooks are in (the ``specdec.notebooks`` package)."""
    return Path(str(importlib.resources.files(NOTEBOOKS_PACKAGE)))


def notebooks() -> list[Path]:
    """The installed notebooks, in order."""
    return sorted(notebook_dir().glob("*.ipynb"))


def deliver(dest: str | os.PathLike, force: bool = False) -> list[Path]:
    """Copy every notebook into ``dest`` (created if missing); returns the files written.

    Raises
    ------
    FileExistsError
        Some of them are already there and ``force`` is False (naming them); nothing is written then.
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"{dest} is a file, not a directory")
    sources = notebooks()
    if not sources:
        raise FileNotFoundError(f"no notebooks in {notebook_dir()}: is specdec installed with them?")
    there = [dest / s.name for s in sources if (dest / s.name).exists()]
    if there and not force:
        raise FileExistsError(f"{', '.join(str(p) for p in there)} already exist; --force overwrites them")
    dirs = [p for p in there if not p.is_file()]        # --force overwrites files only: nothing is written then
    if dirs:
        raise IsADirectoryError(21, "a directory stands where a notebook goes", str(dirs[0]))
    dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(s, dest / s.name)) for s in sources]


# ------------------------------------------------------------------------------------------------
# Inputs the notebooks demonstrate with
# ------------------------------------------------------------------------------------------------
def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """One short printable label per token id (spaces as ``␣``, newlines as ``⏎``)."""
    return [tokenizer.decode([int(t)]).replace(" ", "␣").replace("\n", "⏎") or f"<{int(t)}>" for t in ids]


def agreeing_rows(tree: Tree, node: int, next_token: int, vocab: int) -> np.ndarray:
    """Target rows (N, V) under which a greedy tree walk accepts exactly the path from the root to ``node``,
    then emits ``next_token``: each row on the path peaks at the path's next token, ``node``'s row at
    ``next_token`` (which must be none of ``node``'s children, or the walk would go on). Rows off the path
    are flat (the walk never asks for them).

    Raises
    ------
    ValueError
        ``node`` is not a node of ``tree``, ``next_token`` is not an integer, is one of ``node``'s children's
        tokens, or is outside the vocabulary.
    """
    node = integer(node, "node")
    next_token = integer(next_token, "next_token")
    vocab = integer(vocab, "vocab")         # 16.5 is no vocabulary: refused here, naming the argument
    if vocab < 1:
        raise ValueError(f"vocab must be at least 1 token, got {vocab}")
    if not 0 <= node < tree.n:
        raise ValueError(f"node {node} is not a node of the tree (0..{tree.n - 1})")
    if not 0 <= next_token < vocab:
        raise ValueError(f"next_token {next_token} outside the vocabulary 0..{vocab - 1}")
    if next_token in {tree.tokens[c] for c in tree.children(node)}:
        raise ValueError(f"next_token {next_token} is a child of node {node}: the walk would accept it")
    rows = np.zeros((tree.n, vocab), dtype=np.float32)
    path = tree.path_to(node)
    for v, child in zip(path, path[1:]):
        rows[v, tree.tokens[child]] = 8.0
    rows[node, next_token] = 8.0
    return rows


def replay_rounds(kv: KVPage, accepted: Sequence[int], gamma: int, prompt_tokens: int,
                  block: int) -> list[dict]:
    """One model's paged KV cache (:class:`specdec.kv.pagetable.PagedKV`, as the decode loop drives it) through
    rounds of ``gamma`` draft tokens of which ``accepted[i]`` were accepted, on the kvpage core ``kv``, without
    a model: the prompt but its last token is prefilled; each round writes the last token and the drafts into
    the sequence (a WRITE for each new row) and keeps the last token and the accepted ones (where that drops
    rows, FORK and COMMIT give their pages back). The sequence is freed at the end.

    Returns one dict per round: ``accepted``, ``tokens`` (in the cache after the round), ``pages`` (rows of
    the sequence), ``free_pages`` (the core's FREE_PAGES), ``ops``, ``copies`` and ``cycles`` (the kvpage
    operations of the round, its copies on write and their CYCLES_BUSY).
    """
    accepted = integers(accepted, "accepted")       # a list: an iterator would be spent by the check
    gamma, prompt_tokens = integer(gamma, "gamma"), integer(prompt_tokens, "prompt_tokens")  # 2.5: refused
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0 draft tokens a round, got {gamma}")
    if not 0 <= min(accepted, default=0) <= max(accepted, default=0) <= gamma:
        raise ValueError(f"accepted {accepted}: each round accepts 0..gamma={gamma} draft tokens")
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    cache = PagedKV(kv, block)
    out = []
    try:
        cache.open()
        cache.reserve(prompt_tokens - 1)
        cache.rollback(prompt_tokens - 1)
        for n in accepted:
            ops, cycles, copies = kv.total_ops, kv.total_cycles, cache.ops["copy"]
            start = cache.length
            cache.reserve(start + gamma + 1)
            cache.rollback(start + n + 1)
            out.append({"accepted": n, "tokens": cache.length, "pages": len(cache.seq_rows),
                        "free_pages": kv.free_pages, "ops": kv.total_ops - ops,
                        "copies": cache.ops["copy"] - copies, "cycles": kv.total_cycles - cycles})
    finally:
        cache.free()
    return out


# ------------------------------------------------------------------------------------------------
# Pictures (matplotlib, imported when first drawn)
# ------------------------------------------------------------------------------------------------
def _axes(ax, size=(6, 3.5)):
    if ax is None:
        import matplotlib.pyplot as plt
        _, ax = plt.subplots(figsize=size)
    return ax


def _legend(ax, twin) -> None:
    """One legend for the labelled lines of ``ax`` and its twin axes."""
    lines = [ln for ln in ax.get_lines() + twin.get_lines() if not ln.get_label().startswith("_")]
    ax.legend(lines, [ln.get_label() for ln in lines], loc="lower right")


def plot_acceptance(per_position: Sequence[float | None], ax=None, label: str | None = None):
    """Per-position acceptance (P(draft token i accepted | position i reached)) as bars; returns the axes."""
    vals = [np.nan if a is None else a for a in per_position]
    bad = next((a for a in vals if not isinstance(a, numbers.Real) or isinstance(a, bool)
                or not (np.isnan(a) or 0 <= a <= 1)), None)
    if bad is not None:                     # matplotlib would draw the string "x" as a category
        raise ValueError(f"per_position must be probabilities in [0, 1] or None, got {bad!r}")
    ax = _axes(ax)
    ax.bar(range(len(vals)), vals, label=label)
    ax.set(xlabel="draft position i", ylabel="P(accept | reached)", ylim=(0, 1.05), xticks=range(len(vals)))
    return ax


def plot_speedup(rows: Sequence[dict], ax=None):
    """Speedup over target-only decoding (the bench's baseline: the faster of our gamma 0 and HF ``generate``)
    and tokens per target call against gamma (the rows of :func:`specdec.bench.e2e.run`); returns the axes of
    the speedup."""
    ax = _axes(ax)
    g = [r["gamma"] for r in rows]
    ax.plot(g, [r["speedup"] for r in rows], "o-", color="tab:blue", label="speedup")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="gamma (draft tokens per round)", ylabel="speedup vs target-only", xticks=g)
    calls = ax.twinx()
    calls.plot(g, [r["tokens_per_call"] for r in rows], "s--", color="tab:orange", label="tokens / target call")
    calls.set_ylabel("tokens per target call", color="tab:orange")
    _legend(ax, calls)
    return ax


def _check_labels(labels: Sequence[str], n: int) -> None:
    if len(labels) < n:
        raise ValueError(f"{len(labels)} labels for {n} nodes: one label a node")


def plot_tree(tree: Tree, labels: Sequence[str], path: Sequence[int] = (), ax=None):
    """The token tree, root on the left, one column per depth; nodes on ``path`` (the accepted ones) in
    green. Returns the axes."""
    _check_labels(labels, tree.n)
    path = integers(path, "path")
    if any(not 0 <= v < tree.n for v in path):    # a node off the tree would be drawn as nothing at all
        raise ValueError(f"path {path}: nodes of the tree are 0..{tree.n - 1}")
    ax = _axes(ax, (7, 0.45 * tree.n + 1))
    depth = tree.depth()
    y: dict[int, float] = {}
    leaves = iter(range(tree.n))

    def place(v: int) -> float:
        kids = tree.children(v)
        y[v] = float(np.mean([place(c) for c in kids])) if kids else float(next(leaves))
        return y[v]

    place(0)
    on = {0, *path}
    for v in range(1, tree.n):
        p = tree.parents[v]
        ax.plot([depth[p], depth[v]], [y[p], y[v]], color="tab:green" if v in on else "0.75", lw=2 if v in on else 1)
    for v in range(tree.n):
        ax.text(depth[v], y[v], f"{v}:{labels[v]}", ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "#c8f0c8" if v in on else "white",
                      "ec": "tab:green" if v in on else "0.6"})
    ax.set(xlim=(-0.5, depth.max() + 0.5), ylim=(max(y.values()) + 0.7, -0.7), xlabel="depth")
    ax.set_yticks([])
    return ax


def plot_mask(mask: np.ndarray, labels: Sequence[str] | None = None, ax=None):
    """The tree-attention mask: row i attends to column j when j is i or one of its ancestors. Returns the
    axes."""
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"mask must be a square (N, N) matrix, got shape {mask.shape}")
    n = mask.shape[0]
    if labels is not None:
        _check_labels(labels, n)
    ax = _axes(ax, (5, 5))
    ax.imshow(mask, cmap="Greens", vmin=0, vmax=1.3)
    ticks = [f"{i}:{labels[i]}" if labels is not None else str(i) for i in range(n)]
    ax.set_xticks(range(n), ticks, rotation=90, fontsize=7)
    ax.set_yticks(range(n), ticks, fontsize=7)
    ax.set(xlabel="attends to (key)", ylabel="node (query)")
    return ax


def plot_pages(rounds: Sequence[dict], block: int, ax=None):
    """Pages of the sequence and tokens in the cache per round (:func:`replay_rounds`, or a decode's
    ``kv_pages`` per round). Returns the axes of the pages."""
    ax = _axes(ax)
    r = range(1, len(rounds) + 1)
    ax.step(r, [x["pages"] for x in rounds], where="mid", color="tab:blue", label="pages")
    ax.set(xlabel="round", ylabel="pages", xticks=list(r))
    tok = ax.twinx()
    tok.plot(r, [x["tokens"] for x in rounds], "o:", color="tab:orange", label=f"tokens ({block} a page)")
    tok.set_ylabel("tokens in the cache", color="tab:orange")
    _legend(ax, tok)
    return ax
