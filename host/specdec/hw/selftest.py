"""The board self-test: every core of the overlay against the contract, its golden model and its cycle model.

::

    report = selftest.run(ol)          # ol: a loaded SpecdecOverlay (a board, or the emulated board)
    print(report)                      # one screen: core, check, result, cycles vs model; the clock
    report.passed, report.failures     # each failure names the core, the check and the first difference

``specdec board selftest`` runs it on the overlay the runtime loads (:func:`specdec.hw.overlay.pynq_overlay`: the
board this runs on, or the emulated board ``SPECDEC_EMULATE`` names); notebook 1 runs it first. The checks, each
a few register accesses and transfers:

* every core cell's ``ID`` register, read through pynq's MMIO before any driver is bound, against the contract's
  map hash (:meth:`hwcontract.regmap.CoreMap.map_hash`); a core whose ID differs is not driven further;
* the verifier: a sampling round in chain mode and a greedy round in tree mode, every result register against
  :func:`hls_ref.verifier.verify` / :func:`~hls_ref.verifier.verify_tree`;
* the treemask core: one tree's mask and depths against :func:`hls_ref.treemask.tree_mask`;
* the kvpage core: CLEAR, then a sequence's rows, a fork with a copy on write, a commit, a rollback and a free,
  every result register against :func:`hls_ref.kvpage.step`;
* the draft engine: one int8 job against :func:`hls_ref.draftengine.run`;
* the rng core: a burst against :func:`hls_ref.rng.xoshiro128pp`;
* the treeattn core: one tree job (:data:`TREE`'s ancestor masks) over a context of three KV pages, the last partly
  filled, against :func:`hls_ref.treeattn.run` (outputs, MACS);
* the vecunit core: an RMSNorm row into two int8 planes (NORMQ) and its top 8 (TOPK) against
  :func:`hls_ref.vecunit.run` (every output word, SATURATED);
* every DMA channel (a board only): the verifier's MM2S with a row whose every code enters the sampling sums the
  core returns, the treemask core's S2MM with the received bytes against the golden words, the draft engine's
  MM2S into S2MM with each of the 256 byte values sent as a weight and read back through the array, the treeattn
  core's scatter-gather MM2S gathering a chain row's context from pages of a pool in DMA memory, out of order, and
  its S2MM descriptor's byte count, the vecunit core's MM2S and S2MM with a SiLU-and-multiply row whose every
  beat's bytes come back changed by the unit (the bytes each channel moved);
* the fabric clock (a board only): PL clock 0 as pynq reports it against the rate the ``.hwh`` asks for.

Each core's active cycles (``CYCLES_BUSY - CYCLES_STALL``; the kvpage core has no stream, so ``CYCLES_BUSY``)
are compared with its cycle model (``hls_ref``), as the tests compare them. The self-test leaves the cores at
rest: the kvpage table cleared, the draft engine's earlier placements intact, the verifier's and the rng core's
RNG seeded with the self-test's seed.

Without an overlay (the notebooks' ``ref`` backend) the same core checks run on the golden register models; there
is no DMA and no clock to check.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from hls_ref import draftengine as de_ref
from hls_ref import kvpage as kv_ref
from hls_ref import rng as rng_ref
from hls_ref import treeattn as ta_ref
from hls_ref import treemask as tm_ref
from hls_ref import vecunit as vu_ref
from hls_ref import verifier as ver_ref
from hwcontract import board as bd
from hwcontract import formats as fmt
from hwcontract.regmap import core

from . import hwh
from .cores import golden_draftengine, golden_kvpage, golden_masker, golden_treeattn, golden_vecunit, golden_verifier
from .drivers import DraftEngine, KVPage, Rng, SpecdecIP, TreeAttn, TreeMask, VecUnit, Verifier
from .drivers.base import description
from .emuboard import EmulatedBoard, GoldenPL
from .golden import GoldenDevice
from .overlay import SpecdecOverlay
from .streams import SG_LENGTH

#: The xoshiro128++ seed of every RNG the self-test draws from (the verifier's, the rng core's).
RNG_SEED = (0x5E1F7E57, 0x0B0A2D11, 0x2545F491, 0x9E3779B9)
#: The seed of the self-test's inputs (logits, weights, activations).
INPUT_SEED = 65
#: The fabric clock may differ from the ``.hwh``'s by this fraction (float rounding of the divisors' rate).
CLOCK_TOLERANCE = 1e-4
#: Steps of the rng core's burst.
RNG_STEPS = 1000
#: The tree of the verifier's tree round and of the treemask check (node 0 the root).
TREE = (-1, 0, 0, 1, 1, 2, 3, 3, 4, 6, 6, 8)
#: The result registers of a chain round the check compares (the verifier's RESULT group).
CHAIN_FIELDS = ("n_accept", "next_token", "accept_bits", "rows", "words", "last_ep", "last_eq", "last_sp", "last_sq")
#: The result registers of a tree round the check compares.
TREE_FIELDS = ("n_accept", "next_token", "path", "node", "rows", "words", "last_ep", "last_sp")


@dataclass
class Check:
    """One line of the self-test: ``ok`` None when skipped; ``detail`` the first difference of a failure (what
    was checked, otherwise); ``cycles`` the core's active cycles and ``model`` its cycle model's, when timed."""

    core: str
    check: str
    ok: bool | None
    detail: str = ""
    cycles: int | None = None
    model: int | None = None


class Mismatch(Exception):
    """A check found the core differing from its golden or cycle model (the first difference)."""


@dataclass
class Report:
    """What the self-test found.

    Attributes
    ----------
    target : str
        What ran: the board and how (its PL, the emulated board's golden models or RTL), or the golden models.
    board : str or None
        The board the overlay is for (``kv260``, ``pynq-z2``); None on the golden models.
    checks : list of Check
    clock : dict
        ``pynq_mhz`` (PL clock 0 as pynq reports it), ``hwh_mhz`` and ``hwh_requested_mhz`` (the ``.hwh``'s),
        ``board_part`` and ``revision`` (the board files the ``.hwh`` names); empty without an overlay.
    """

    target: str
    board: str | None
    checks: list[Check] = field(default_factory=list)
    clock: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def failures(self) -> list[str]:
        """One line per failed check: ``<core> <check>: <first difference>``."""
        return [f"{c.core} {c.check}: {c.detail}" for c in self.checks if c.ok is False]

    def table(self) -> str:
        """The screen the self-test prints: a header, the table, the clock, and the verdict."""
        head = ("core", "check", "result", "cycles", "model")
        rows = [head] + [(c.core, c.check, {True: "ok", False: "FAIL", None: "skipped"}[c.ok],
                          "" if c.cycles is None else str(c.cycles), "" if c.model is None else str(c.model))
                         for c in self.checks]
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]

        def line(r) -> str:
            return f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:>{w[3]}}  {r[4]:>{w[4]}}".rstrip()

        out = [f"specdec self-test: {self.target}", line(head), line(["-" * n for n in w])]
        out += [line(r) for r in rows[1:]]
        out.append("cycles: CYCLES_BUSY - CYCLES_STALL (kvpage: CYCLES_BUSY summed over its operations); model: "
                   "hls_ref's")
        out += self.clock_lines()
        out += [f"FAIL {f}" for f in self.failures]
        done = sum(c.ok is True for c in self.checks)
        out.append(f"passed: {done} checks" if self.passed else f"FAILED: {len(self.failures)} of "
                   f"{len(self.checks)} checks")
        return "\n".join(out)

    def clock_lines(self) -> list[str]:
        """The fabric clock as pynq reports it and as the ``.hwh`` asks for it, with the board files it names."""
        c = self.clock
        if not c:
            return ["clock: none (the golden models have no clock)"]
        return [f"clock: PL0 {c['pynq_mhz']:.3f} MHz as pynq reports it (pynq.Clocks.fclk0_mhz)",
                f".hwh:  PL0 {c['hwh_requested_mhz']:.3f} MHz asked, {c['hwh_mhz']:.3f} MHz from its divisors",
                f"board: {c['board_part']} (the .hwh's board files, revision {c['revision']})"]

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        return {"target": self.target, "board": self.board, "passed": self.passed, "failures": self.failures,
                "checks": [asdict(c) for c in self.checks], "clock": self.clock}


# ------------------------------------------------------------------------------------------------
# Comparing with the golden and cycle models
# ------------------------------------------------------------------------------------------------
def first_difference(got: Mapping[str, Any], want: Mapping[str, Any], what: str = "golden model") -> None:
    """Raise :class:`Mismatch` naming the first key whose value differs between ``got`` and ``want``."""
    for k, v in want.items():
        if got.get(k) != v:
            raise Mismatch(f"{k} {got.get(k)}, {what} {v}")


def _timed(check: Check, cycles: int, model: int) -> Check:
    """``check`` with its cycles; :class:`Mismatch` when they differ from the model's."""
    check.cycles, check.model = int(cycles), int(model)
    if check.cycles != check.model:
        raise Mismatch(f"cycles {check.cycles}, cycle model {check.model}")
    return check


def _array_difference(got: np.ndarray, want: np.ndarray, name: str) -> None:
    """Raise :class:`Mismatch` at the first element of ``got`` that differs from ``want`` (or their shapes)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"{name} of shape {got.shape}, golden model {want.shape}")
    bad = np.argwhere(got != want)
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        raise Mismatch(f"{name}[{', '.join(map(str, at))}] = {got[at]}, golden model {want[at]}")


def _guarded(core_name: str, name: str, fn: Callable[[Check], Check]) -> Check:
    """Run check ``fn`` on a fresh :class:`Check`: passed when it returns, failed with the first difference
    when it raises :class:`Mismatch`, failed naming the error when the driver or the hardware raises."""
    check = Check(core_name, name, True)
    try:
        return fn(check)
    except Mismatch as err:
        check.ok, check.detail = False, str(err)
    except Exception as err:        # noqa: BLE001 (a driver error, a timeout, a bus error: the check failed)
        check.ok, check.detail = False, f"{type(err).__name__}: {err}"
    return check


# ------------------------------------------------------------------------------------------------
# The checks, one per core and DMA channel
# ------------------------------------------------------------------------------------------------
def _words(n: int) -> np.ndarray:
    return rng_ref.xoshiro128pp(np.array(RNG_SEED, dtype=np.uint32), n)[0]


def verifier_chain(ver: Verifier, check: Check) -> Check:
    """A sampling round of 3 draft tokens (fewer if GAMMA_MAX is less) over a vocabulary of 3 beats and one
    code: every result register against :func:`hls_ref.verifier.verify`, its cycles against
    :func:`~hls_ref.verifier.chain_rtl_cycles`."""
    rnd = np.random.default_rng(INPUT_SEED)
    g, vocab = min(3, ver.gamma_max), min(3 * ver.lanes + 1, ver.vocab_max)
    logits = rnd.normal(0.0, 2.0, (g + 1, vocab))
    p = fmt.quantize(logits)
    q = fmt.quantize(logits[:g] + rnd.normal(0.0, 1.0, (g, vocab))) if g else None
    draft = [int(r.argmax()) for r in q] if g else []
    check.check = f"chain round, g={g}, V={vocab}"
    ver.seed(RNG_SEED)
    got = ver.verify(draft, p, q, temperature=1.0)
    want = ver_ref.verify(p, q, draft, greedy=False, inv_temp=fmt.inv_temp(1.0), words=_words(g + 2),
                          lanes=ver.lanes, vocab_max=ver.vocab_max, gamma_max=ver.gamma_max)
    first_difference({f: getattr(got, f) for f in CHAIN_FIELDS}, {f: int(getattr(want, f)) for f in CHAIN_FIELDS})
    return _timed(check, got.cycles_busy - got.cycles_stall, ver_ref.chain_rtl_cycles(want, vocab, ver.lanes, False))


def verifier_tree(ver: Verifier, check: Check) -> Check:
    """A greedy round over :data:`TREE` whose walk accepts the path 0-1-3-6 and stops at node 6: every result
    register against :func:`hls_ref.verifier.verify_tree`, its cycles against
    :func:`~hls_ref.verifier.tree_rtl_cycles`."""
    rnd = np.random.default_rng(INPUT_SEED + 1)
    n = min(len(TREE), ver.tree_max)
    parents = [0, *TREE[1:n]]
    vocab = min(2 * ver.lanes + 3, ver.vocab_max)
    p = fmt.quantize(rnd.normal(0.0, 2.0, (n, vocab)))
    top = [int(r.argmax()) for r in p]
    tokens = [0] * n
    for v in range(1, n):        # the path 0-1-3-6 agrees with the target's choice, every other node does not
        on_path = v in (1, 3, 6)
        tokens[v] = top[parents[v]] if on_path else (top[parents[v]] + v) % vocab
    check.check = f"tree round, N={n}, V={vocab}"
    ver.seed(RNG_SEED)
    got = ver.verify_tree(parents, tokens, p, greedy=True)
    want = ver_ref.verify_tree(p, parents, tokens, greedy=True, inv_temp=0, words=_words(n + 1), lanes=ver.lanes,
                               vocab_max=ver.vocab_max, tree_max=ver.tree_max)
    expect = {f: int(getattr(want, f)) for f in TREE_FIELDS}
    expect["path"] = tuple(j for j in range(64) if want.path >> j & 1)
    first_difference({f: getattr(got, f) for f in TREE_FIELDS}, expect)
    return _timed(check, got.cycles_busy - got.cycles_stall,
                  ver_ref.tree_rtl_cycles(want, vocab, ver.lanes, True, parents))


def treemask_mask(tm: TreeMask, check: Check) -> Check:
    """The mask and depths of :data:`TREE` against :func:`hls_ref.treemask.tree_mask`, its cycles against
    :func:`hls_ref.treemask.cycles`."""
    n = min(len(TREE), tm.nodes_max)
    check.check = f"mask and depths, N={n}"
    mask, depth = tm.masks(TREE[:n])
    want = tm_ref.tree_mask([0, *TREE[1:n]], tm.nodes_max)
    _array_difference(mask, want.dense(), "mask")
    _array_difference(depth, np.array(want.depth), "depth")
    return _timed(check, tm.cycles - tm.read_reg("CYCLES_STALL"), tm_ref.cycles(n))


def _kv_call(kv: KVPage, op: kv_ref.Op) -> None:
    """Run ``op`` through the driver's method for it."""
    calls = {"CLEAR": lambda: kv.clear(), "NEW": lambda: kv.new(), "FORK": lambda: kv.fork(op.slot),
             "WRITE": lambda: kv.write_row(op.slot, op.row), "COMMIT": lambda: kv.commit(op.slot, op.row),
             "ROLLBACK": lambda: kv.rollback([s for s in range(kv.slots) if op.mask >> s & 1]),
             "FREE": lambda: kv.free(op.slot)}
    calls[op.code]()


def kvpage_fork_commit_rollback(kv: KVPage, check: Check) -> Check:
    """CLEAR; a sequence of 3 rows; a branch that copies its last shared row on write and appends one, which
    COMMIT makes the sequence while a sibling branch dies; a branch rolled back; the sequence freed. Each
    operation's result registers against :func:`hls_ref.kvpage.step`, and the pages all free at the end; the
    operations' summed CYCLES_BUSY against the model's."""
    st = kv_ref.KVState.empty(kv.pages, kv.max_blocks, kv.slots)
    cycles = model = ops = 0

    def op(code: str, **operands: int) -> int:
        nonlocal st, cycles, model, ops
        o = kv_ref.Op(code, **operands)
        st, want = kv_ref.step(st, o)
        if want.err:
            raise Mismatch(f"the golden model refuses {code} {operands} (ERR {want.err:#x}): the check is wrong")
        _kv_call(kv, o)
        first_difference({r: kv.read_reg(r) for r in want.regs}, want.regs, f"golden model after {code}")
        cycles, model, ops = cycles + kv.cycles, model + want.cycles, ops + 1
        return want.regs.get("RES_SLOT", 0)

    op("CLEAR")
    seq = op("NEW")
    for row in range(3):
        op("WRITE", slot=seq, row=row)
    branch = op("FORK", slot=seq)
    sibling = op("FORK", slot=seq)
    op("WRITE", slot=branch, row=2)             # the last shared row: a copy on write
    op("WRITE", slot=branch, row=3)             # a new row
    op("WRITE", slot=sibling, row=3)
    seq = op("COMMIT", slot=branch, row=4)      # the branch becomes the sequence; the sibling dies
    spare = op("FORK", slot=seq)
    op("WRITE", slot=spare, row=4)
    op("ROLLBACK", mask=1 << spare)
    op("FREE", slot=seq)
    first_difference({"FREE_PAGES": kv.free_pages}, {"FREE_PAGES": st.free_pages}, "golden model at the end")
    check.check = f"fork, commit, rollback: {ops} ops"
    return _timed(check, cycles, model)


def _de_layer(rnd: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, ...]:
    w = rnd.integers(-128, 128, (n, k))
    bias = rnd.integers(-1000, 1000, n)
    mult, shift = np.array([fmt.de_multiplier(s) for s in rnd.uniform(1e-3, 4e-3, n)]).T
    return w, bias, mult, shift


def draftengine_job(de: DraftEngine, check: Check) -> Check:
    """One RUN of 3 tokens through a layer of N = 2 ROWS + 3 channels (a partial last tile) by K = 3 COLS + 5
    features (a partial last chunk), requantized to 8 bits, placed in the free memories and freed again: outputs and
    saturation count against :func:`hls_ref.draftengine.run`, its cycles against :func:`hls_ref.draftengine.cycles`
    (with the read registers of the build's weight memory, ``de.wpipe``)."""
    rnd = np.random.default_rng(INPUT_SEED + 2)
    m, n, k = min(3, de.m_max), 2 * de.rows + 3, min(3 * de.cols + 5, de.k_max)
    w, bias, mult, shift = _de_layer(rnd, n, k)
    job = de_ref.Job(rnd.integers(-128, 128, (m, k)), w, bias, mult, shift, 8)
    check.check = f"job M={m} K={k} N={n}"
    got, want = de.run(job), de_ref.run(job)
    _array_difference(got.y, want.y, "y")
    first_difference({"saturated": got.saturated}, {"saturated": want.saturated})
    ab = de_ref.tiles(m, k, n, de.rows, de.cols)[2]
    return _timed(check, de.cycles - de.stall, de_ref.cycles("RUN", m * ab, m, k, n, de.rows, de.cols, de.wpipe))


def rng_burst(rng: Rng, check: Check) -> Check:
    """A burst of :data:`RNG_STEPS` steps from :data:`RNG_SEED`: OUT, XOR and STEPS against
    :func:`hls_ref.rng.xoshiro128pp`."""
    check.check = f"burst of {RNG_STEPS}"
    rng.seed(RNG_SEED)
    words = _words(RNG_STEPS)
    first_difference(rng.burst(RNG_STEPS), {"out": int(words[-1]), "xor": int(np.bitwise_xor.reduce(words)),
                                            "steps": RNG_STEPS})
    return check


#: The treeattn checks' KV page (keys a page) and scale pair (scale_q, scale_k).
TA_PAGE, TA_SCALES = 32, (0.04, 0.05)


def _ta_job(ta: TreeAttn, rnd: np.random.Generator, masks: list[int], ctx: int, pool: np.ndarray,
            rows: list[int]) -> tuple[ta_ref.Job, list[np.ndarray]]:
    """A job of random codes whose ``ctx`` context keys lie in the pages ``rows`` of ``pool`` (filled here): the
    golden model's job and the pages the driver gathers."""
    p = ta.params
    n, hd = len(masks), p["HEAD_DIM"]
    pool[...] = rnd.integers(-100, 101, pool.shape)
    kv = np.concatenate([pool[r] for r in rows])[:ctx]
    mult, shift = ta_ref.multiplier(*TA_SCALES, hd)
    job = ta_ref.Job(rnd.integers(-100, 101, (n, p["GROUP"], hd)).astype(np.int8), kv[:, 0], kv[:, 1],
                     rnd.integers(-100, 101, (n, hd)).astype(np.int8), rnd.integers(-100, 101, (n, hd)).astype(np.int8),
                     masks, mult, shift)
    return job, ta.pages(pool, rows)


def _ta_attend(ta: TreeAttn, job: ta_ref.Job, pages: list[np.ndarray]) -> ta_ref.Output:
    """Run ``job`` on the core: outputs and MACS against the golden model (:class:`Mismatch` at the first
    difference); returns the golden model's output."""
    got = ta.attend(job.q, pages, len(job.k_ctx), job.k_step, job.v_step, job.mask, job.mult, job.shift)
    want = ta_ref.run(job, ta.params)
    _array_difference(got, want.out, "o")
    first_difference({"macs": ta.macs}, {"macs": want.macs})
    return want


def treeattn_tree(ta: TreeAttn, check: Check) -> Check:
    """The :data:`TREE` of 12 nodes (as many as the build takes), each row seeing its ancestors, over 75 context
    keys in three pages (the last partly filled): outputs and MACS against :func:`hls_ref.treeattn.run`, the cycles
    against :func:`hls_ref.treeattn.cycles`."""
    rnd = np.random.default_rng(INPUT_SEED + 6)
    parents = TREE[:ta.params["NODES_MAX"]]
    masks = list(tm_ref.tree_mask([0, *parents[1:]], len(parents)).rows)
    ctx = min(75, ta.params["CTX_MAX"])
    pool = np.zeros((4, TA_PAGE, 2, ta.params["HEAD_DIM"]), np.int8)
    job, pages = _ta_job(ta, rnd, masks, ctx, pool, [2, 0, 3][:-(-ctx // TA_PAGE)])
    check.check = f"tree of {len(masks)} nodes, L={ctx}"
    want = _ta_attend(ta, job, pages)
    return _timed(check, ta.cycles - ta.stall, want.cycles)


#: The vecunit checks' row: 576 elements (the EAGLE head's width), values within +-8 in Q15.16.
VU_LEN, VU_RANGE = 576, 8 << fmt.VQ_FRAC


def _vu_run(vu: VecUnit, job: vu_ref.Job) -> tuple[int, int]:
    """Run ``job`` on the core: every output word and SATURATED against the golden model (:class:`Mismatch` at the
    first difference). Returns the core's active cycles (``CYCLES_BUSY - CYCLES_STALL``) and the model's."""
    got, want = vu.run(job), vu_ref.run(job, vu.params)
    _array_difference(got.y, want.y, "Y words")
    first_difference({"saturated": got.saturated}, {"saturated": want.saturated})
    return got.cycles, want.cycles          # the driver's Output: CYCLES_BUSY - CYCLES_STALL


def vecunit_norm_top(vu: VecUnit, check: Check) -> Check:
    """A NORMQ row of :data:`VU_LEN` values into two int8 planes at per-column multipliers, then TOPK 8 of the
    row: every word against :func:`hls_ref.vecunit.run`, both jobs' cycles against the cycle model."""
    rnd = np.random.default_rng(INPUT_SEED + 8)
    x = rnd.integers(-VU_RANGE, VU_RANGE, VU_LEN)
    words = fmt.vu_scale_words(rnd.uniform(0.5, 40.0, VU_LEN))
    k = min(8, vu.params["K_MAX"])
    check.check = f"NORMQ of {VU_LEN}, TOPK {k}"
    norm = _vu_run(vu, vu_ref.normq_job(x, words, 1 << 12))
    top = _vu_run(vu, vu_ref.topk_job(x, k))
    return _timed(check, norm[0] + top[0], norm[1] + top[1])


def vecunit_silu(vu: VecUnit, dma, check: Check) -> Check:
    """A SiLU-and-multiply row of :data:`VU_LEN` elements through MM2S (two beats an element: the gate's, then the
    up's) and back through S2MM: the words against the golden model, both channels idle with no error and the
    bytes they moved those of the frames."""
    rnd = np.random.default_rng(INPUT_SEED + 9)
    g, u = rnd.integers(-VU_RANGE, VU_RANGE, (2, VU_LEN))
    job = vu_ref.silu_job(g, u)
    check.check = f"MM2S {len(job.x)} beats -> S2MM {VU_LEN} words"
    _timed(check, *_vu_run(vu, job))
    beat, word = core("vecunit").stream("s_axis").width // 8, core("vecunit").stream("m_axis").width // 8
    _channel(dma.sendchannel, len(job.x) * beat)
    _channel(dma.recvchannel, vu_ref.out_beats(job.op, job.length, job.k) * word)
    return check


def verifier_mm2s(ver: Verifier, dma, check: Check) -> Check:
    """One row of 5 beats and 3 codes sent through MM2S for a sampling round of no draft token, whose sums
    (LAST_EP, LAST_SP) and sampled token depend on every code: the result against the golden model, the channel
    idle with no error and the bytes it moved those of the row."""
    rnd = np.random.default_rng(INPUT_SEED + 3)
    vocab = min(5 * ver.lanes + 3, ver.vocab_max)
    p = fmt.quantize(rnd.normal(0.0, 1.0, (1, vocab)))
    nbytes = -(-vocab // ver.lanes) * ver.lanes * p.itemsize
    check.check = f"MM2S: a row of {nbytes} bytes"
    ver.seed(RNG_SEED)
    got = ver.verify([], p, None, temperature=1.0)
    want = ver_ref.verify(p, None, [], greedy=False, inv_temp=fmt.inv_temp(1.0), words=_words(2), lanes=ver.lanes,
                          vocab_max=ver.vocab_max, gamma_max=ver.gamma_max)
    first_difference({f: getattr(got, f) for f in CHAIN_FIELDS}, {f: int(getattr(want, f)) for f in CHAIN_FIELDS})
    _channel(dma.sendchannel, nbytes)
    return check


def treemask_s2mm(tm: TreeMask, dma, check: Check) -> Check:
    """A tree of NODES_MAX nodes (each node's parent one of the three nodes before it), its longest frame: the
    bytes S2MM wrote against the golden model's words, and the bytes the channel reports."""
    rnd = np.random.default_rng(INPUT_SEED + 4)
    n = tm.nodes_max
    parents = [-1] + [int(rnd.integers(max(0, v - 3), v)) for v in range(1, n)]
    wb = core("treemask").stream("m_axis").width // 8
    check.check = f"S2MM: {n} words of {wb} bytes"
    tm.masks(parents)
    want = b"".join(w.to_bytes(wb, "little") for w in tm_ref.stream_words(tm_ref.tree_mask([0, *parents[1:]], n)))
    got = bytes(tm.sink.buffer[:len(want)])
    if got != want:
        at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        raise Mismatch(f"byte {at} (word {at // wb}) is {got[at]:#04x}, golden model {want[at]:#04x}")
    _channel(dma.recvchannel, len(want))
    return check


def draftengine_loopback(de: DraftEngine, dma, check: Check) -> Check:
    """16 x K weights (K = 16, as M_MAX allows: every byte value once) sent through MM2S, an identity matrix of K
    tokens as the activations and 32-bit outputs with no bias or scale: what comes back through S2MM is the
    weights, byte for byte; both channels idle with no error, S2MM's bytes those of the K x 16 outputs."""
    k = min(16, de.m_max, de.k_max)
    w = np.random.default_rng(INPUT_SEED + 5).permutation(256)[:16 * k].reshape(16, k) - 128
    job = de_ref.Job(np.eye(k, dtype=np.int64), w, np.zeros(16, np.int64), np.ones(16, np.int64),
                     np.zeros(16, np.int64), 32)
    check.check = f"MM2S -> S2MM: {w.size} weight bytes back"
    _array_difference(de.run(job).y, w.T, "weights back")
    nt = de_ref.tiles(k, k, 16, de.rows, de.cols)[0]
    _channel(dma.sendchannel, None)
    _channel(dma.recvchannel, nt * k * de.rows * 4)
    return check


def treeattn_gather(ta: TreeAttn, dma, check: Check) -> Check:
    """A chain row over 200 context keys in seven pages of a pool in DMA memory, gathered out of order (one MM2S
    descriptor a page where it lies): the output against the golden model, both channels idle with no error, and
    the bytes the S2MM descriptor reports those of the row's GROUP heads."""
    rnd = np.random.default_rng(INPUT_SEED + 7)
    p = ta.params
    ctx = min(200, p["CTX_MAX"])
    rows = [6, 1, 4, 0, 5, 2, 3][:-(-ctx // TA_PAGE)]
    pool = ta.stream.allocator(shape=(len(rows), TA_PAGE, 2, p["HEAD_DIM"]), dtype=np.int8)
    job, pages = _ta_job(ta, rnd, [1], ctx, pool, rows)
    check.check = f"MM2S gather of {len(rows)} pages -> S2MM"
    _ta_attend(ta, job, pages)
    _channel(dma.sendchannel, None)
    if dma.recvchannel.error or not dma.recvchannel.idle:
        raise Mismatch("the S2MM channel is in error or not idle after its transfer")
    moved, want = int(ta.sink.desc[0, 7]) & SG_LENGTH, p["GROUP"] * p["HEAD_DIM"] * 2
    if moved != want:
        raise Mismatch(f"{moved} bytes received, expected {want}")
    return check


def _channel(channel, nbytes: int | None) -> None:
    """Raise :class:`Mismatch` unless the pynq DMA ``channel`` is idle with no error and its last transfer
    moved ``nbytes`` (None: any)."""
    if channel.error or not channel.idle:
        raise Mismatch(f"the channel is {'in error' if channel.error else 'not idle'} after its transfer")
    moved = int(getattr(channel, "transferred", 0) or 0)
    if nbytes is not None and moved != nbytes:
        raise Mismatch(f"{moved} bytes transferred, expected {nbytes}")


#: Each core's checks, in the order they run: ``fn(driver, check)`` fills in and returns ``check``.
CORE_CHECKS: dict[str, tuple[Callable[[Any, Check], Check], ...]] = {
    "verifier": (verifier_chain, verifier_tree),
    "treemask": (treemask_mask,),
    "kvpage": (kvpage_fork_commit_rollback,),
    "draftengine": (draftengine_job,),
    "rng": (rng_burst,),
    "treeattn": (treeattn_tree,),
    "vecunit": (vecunit_norm_top,),
}
#: Each DMA's check, by the core it serves: ``fn(driver, dma, check)``.
DMA_CHECKS: dict[str, Callable[[Any, Any, Check], Check]] = {
    "verifier": verifier_mm2s, "treemask": treemask_s2mm, "draftengine": draftengine_loopback,
    "treeattn": treeattn_gather, "vecunit": vecunit_silu}


def _label(fn: Callable) -> str:
    return fn.__name__.split("_", 1)[1].replace("_", " ")


def check_cores(drivers: Mapping[str, SpecdecIP]) -> list[Check]:
    """Every core check (:data:`CORE_CHECKS`) on ``drivers`` (core name -> its driver, streams attached)."""
    out = []
    for name, drv in drivers.items():
        for fn in CORE_CHECKS[name]:
            out.append(_guarded(name, _label(fn), lambda c, fn=fn, drv=drv: fn(drv, c)))
    return out


# ------------------------------------------------------------------------------------------------
# On an overlay, and on the golden models
# ------------------------------------------------------------------------------------------------
def check_id(ol: SpecdecOverlay, cell: bd.Cell, check: Check) -> Check:
    """Cell ``cell``'s ID register, read through pynq's MMIO at its address in the ``.hwh``, against the map
    hash of the contract this package was built with."""
    import pynq
    ip = ol.ip_dict[cell.name]
    cmap = core(cell.name)
    hw_id = pynq.MMIO(ip["phys_addr"], ip["addr_range"], device=ol.device).read(cmap.offset("ID"))
    check.check = f"ID {hw_id:#010x} = the map hash"
    first_difference({"ID": f"{hw_id:#010x}"}, {"ID": f"{cmap.map_hash():#010x}"}, "the contract's map hash")
    return check


def check_clock(ol: SpecdecOverlay, check: Check, clock: dict) -> Check:
    """PL clock 0 as pynq reports it against the rate the ``.hwh`` asks for (within :data:`CLOCK_TOLERANCE`):
    a PS whose PLL is not the one the design was built for gives another rate. Fills ``clock`` (the report's)."""
    path = Path(ol.bitfile_name).with_suffix(".hwh")
    part, pl0 = hwh.read_board_part(path), hwh.read_pl0(path)
    clock.update(pynq_mhz=ol.fclk_mhz, hwh_mhz=pl0["actual_mhz"], hwh_requested_mhz=pl0["requested_mhz"],
                 board_part=part, revision=part.rsplit(":", 1)[-1])
    if abs(clock["pynq_mhz"] / clock["hwh_mhz"] - 1) > CLOCK_TOLERANCE:
        raise Mismatch(f"{clock['pynq_mhz']:.3f} MHz as pynq set it, the .hwh's {clock['hwh_mhz']:.3f} MHz: the "
                       f"PS's PLL is not the one the design was built for (pynq rewrites only the divisors)")
    return check


def describe(ol: SpecdecOverlay) -> str:
    """What the self-test runs on: the overlay's board and device (the emulated board's PL: golden or RTL)."""
    dev = ol.device
    if isinstance(dev, EmulatedBoard):
        pl = "golden register models" if isinstance(dev.pl, GoldenPL) else "RTL in simulation"
        return f"the {ol.board} overlay on the emulated {ol.board} (its PL: the {pl})"
    return f"the {ol.board} overlay on this board (pynq's device {getattr(dev, 'name', '')!r})"


def run(ol: SpecdecOverlay | None = None) -> Report:
    """The self-test of the loaded overlay ``ol`` (a board, or the emulated board); None: of the golden
    register models at the ``ref`` backend's builds (:func:`golden`)."""
    if ol is None:
        return golden()
    report = Report(describe(ol), ol.board)
    matching = []
    for cell in ol.design.cells:
        c = _guarded(cell.name, "ID = the contract's map hash", lambda c, cell=cell: check_id(ol, cell, c))
        report.checks.append(c)
        if c.ok:
            matching.append(cell.name)
    drivers = {}
    for name in matching:
        try:
            drivers[name] = ol.driver(name)
        except Exception as err:    # noqa: BLE001 (binding or attaching failed: its checks cannot run)
            report.checks.append(Check(name, "driver", False, f"{type(err).__name__}: {err}"))
    report.checks += check_cores(drivers)
    for dma in ol.design.dmas:
        fn = DMA_CHECKS[dma.core]
        if dma.core not in drivers:
            report.checks.append(Check(dma.cell, _label(fn), None, f"its core {dma.core} did not pass its ID check"))
            continue
        report.checks.append(_guarded(dma.cell, _label(fn), lambda c, fn=fn, dma=dma: fn(
            drivers[dma.core], ol.dma(dma.core), c)))
    report.checks.append(_guarded(hwh.PS_CELL, "PL0 clock = the .hwh's", lambda c: check_clock(ol, c, report.clock)))
    return report


def golden() -> Report:
    """The core checks on the golden register models at the ``ref`` backend's builds
    (:func:`specdec.hw.cores.golden_verifier` and the others): what the self-test checks, without a board."""
    dev = GoldenDevice({0: "rng"})
    drivers = {"verifier": golden_verifier(), "treemask": golden_masker(),
               "kvpage": golden_kvpage(), "draftengine": golden_draftengine(),
               "rng": Rng(description("rng", dev)), "treeattn": golden_treeattn(), "vecunit": golden_vecunit()}
    report = Report("the golden register models (backend ref): no DMA, no clock", None)
    for name, drv in drivers.items():
        c = Check(name, "ID = the contract's map hash", True)
        hw_id, want = drv.read_reg("ID"), drv.cmap.map_hash()
        c.ok, c.detail = hw_id == want, f"ID {hw_id:#010x}, the contract's map hash {want:#010x}"
        report.checks.append(c)
    report.checks += check_cores(drivers)
    return report


# ------------------------------------------------------------------------------------------------
# The bring-up bundle
# ------------------------------------------------------------------------------------------------
#: The files :func:`write_bundle` writes (``build.json`` only where the overlay has one beside its ``.bit``).
BUNDLE_FILES = ("selftest.txt", "selftest.json", "hwh.json", "system.json", "build.json")


def _uname() -> str:
    """``uname -a``, or Python's view of the same where there is no ``uname``."""
    try:
        return subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return " ".join(platform.uname())


def system_info(ol: SpecdecOverlay) -> dict[str, Any]:
    """What a bring-up report needs about the machine: the board (the overlay's, and ``$BOARD`` as Kria-PYNQ
    exports it), the device pynq loaded on, the overlay's files, and pynq's, Python's and the kernel's versions."""
    try:
        pynq_version = version("pynq")
    except PackageNotFoundError:
        pynq_version = None
    return {"board": ol.board, "BOARD": os.environ.get("BOARD"), "device": getattr(ol.device, "name", None),
            "bitfile": str(ol.bitfile_name), "pynq": pynq_version, "python": sys.version, "uname": _uname()}


def write_bundle(report: Report, ol: SpecdecOverlay, directory: str | os.PathLike) -> list[Path]:
    """Write what a bring-up report needs into ``directory`` (which must exist): the self-test's screen and
    JSON, the ``.hwh``'s board files, every MODULE's VLNV (the IP versions the build resolved) and PL clock 0,
    :func:`system_info`, and the overlay's ``build.json`` where one lies beside its ``.bit``. Returns the files
    written."""
    out = Path(directory)
    hwh_path = Path(ol.bitfile_name).with_suffix(".hwh")
    written = [out / "selftest.txt", out / "selftest.json", out / "hwh.json", out / "system.json"]
    written[0].write_text(report.table() + "\n")
    written[1].write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    described: dict[str, Any] = {"path": str(hwh_path)}
    for key, read in (("board_part", hwh.read_board_part), ("modules", hwh.read_modules), ("pl0", hwh.read_pl0)):
        try:
            described[key] = read(hwh_path)
        except (OSError, ValueError, SyntaxError) as err:      # an unreadable .hwh is itself worth reporting
            described[key] = f"unreadable: {type(err).__name__}: {err}"
    written[2].write_text(json.dumps(described, indent=2) + "\n")
    written[3].write_text(json.dumps(system_info(ol), indent=2) + "\n")
    build = Path(ol.bitfile_name).with_name("build.json")
    if build.is_file():
        written.append(Path(shutil.copyfile(build, out / "build.json")))
    return written
