"""The RTL side of ``specdec bench``: each core driven through its product driver in the cocotb simulation (a
cocotb test module: the simulator imports it, by name, :data:`specdec.sim.jobs.BENCH_TESTS`).

:mod:`specdec.bench.rtl` runs one cocotb test of this module per measurement through
:func:`specdec.sim.jobs.run_bench` (settings in the environment, :func:`specdec.sim.jobs.bench_environment`); the
test builds
the driver over :class:`~specdec.sim.device.SimDevice` inside ``cocotb.task.bridge``, as
:mod:`specdec.sim.cocotb_decode` does, and writes its figures as JSON to ``$BENCH_OUT``. Cycles are the
core's own counters (``CYCLES_BUSY``, ``CYCLES_STALL``); every result is checked against the golden
model on the same inputs and every cycle count is reported beside the cycle model of ``hls_ref``.

``bench_verifier``: chain rounds at one (V, gamma) in three scenarios: ``all_accept`` (q = p, every draft
passes and the bonus is sampled: gamma + 1 target positions), ``reject_0`` (the first draft token has
p = 0: one position and a residual sample), ``typical`` (GPT-2-like logits, drafts drawn from q).
``bench_treemask``: one random tree per N (TREADY always high). ``bench_kvpage``: every operation, with
COMMIT, ROLLBACK and FREE at both ends of what they could depend on. ``bench_treeattn``: the EAGLE head's jobs (a
chain row, a 7-node tree) over the given context lengths, each checked against ``hls_ref.treeattn``, its cycles
beside the cycle model and the unit's bound. ``bench_vecunit``: one job of each operation of the vector unit on the
EAGLE head's shapes, each checked against ``hls_ref.vecunit``, its cycles beside the cycle model, and the recovery
from a frame a beat short.
"""
from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import cocotb
import numpy as np
from cocotb.task import bridge

from hls_ref import rng as rng_ref
from hls_ref import treeattn as ta_ref
from hls_ref import treemask as tm_ref
from hls_ref import vecunit as vu_ref
from hls_ref import vectors
from hls_ref import verifier as ver_ref
from hwcontract.formats import LOGIT_NEG_INF, inv_temp, vu_scale_words, vu_turns
from hwcontract.regmap import VU_OPS, core

from ..errors import CoreError
from ..hw.drivers import KVPage, TreeAttn, TreeMask, VecUnit, Verifier
from ..hw.drivers.base import description
from ..hw.drivers.verifier import Result
from ..hw.golden import GoldenDevice
from ..hw.streams import RowStream, WordSink
from .device import AxilTB, SimDevice, SimSink, SimStream
from .jobs import BENCH_OUT_ENV, bench_setting as setting

SCENARIOS = ("all_accept", "reject_0", "typical")
TEMPERATURE = 1.0
# the result fields the driver's record and the golden model's share (every one but the cycle counters)
_SHARED = tuple(f.name for f in fields(Result) if f.name in {d.name for d in fields(ver_ref.Decision)})






def _write(result: dict) -> None:
    Path(os.environ[BENCH_OUT_ENV]).write_text(json.dumps(result, indent=2))


# ------------------------------------------------------------------------------------------------
# verifier
# ------------------------------------------------------------------------------------------------

def scenario(name: str, rng: np.random.Generator, vocab: int, g: int):
    """The rows and draft of one scenario (see the module docstring): ``p, q, draft`` (int16 codes)."""
    p, q, draft = vectors.full_vocab_round(rng, vocab, g, "sample")
    if name == "all_accept":
        q = p[:g].copy()
        draft = [int(np.argmax(p[i])) for i in range(g)]
    elif name == "reject_0" and g:
        x = int(np.argmin(p[0]))
        p[0, x] = LOGIT_NEG_INF              # -inf in the target: the draft token can never pass
        draft[0] = x
    elif name not in SCENARIOS:
        raise ValueError(f"scenario {name!r} not in {SCENARIOS}")
    return p, q, draft


def verifier_rounds(drv: Verifier, vocab: int, gamma: int, seed: int) -> dict:
    """One round per scenario through ``drv``, each checked against ``hls_ref.verifier.verify`` fed with
    the RNG words the core takes; per scenario the result and the cycles against the cycle model
    (``chain_rtl_cycles``) and the streaming bound (``stream_bound``)."""
    rng = np.random.default_rng(seed)
    state = np.array(vectors.rng_seed(rng), dtype=np.uint32)
    drv.seed(state)
    out = {}
    for name in SCENARIOS:
        p, q, draft = scenario(name, rng, vocab, gamma)
        got = drv.verify(draft, p, q, temperature=TEMPERATURE)
        words, _ = rng_ref.xoshiro128pp(state, gamma + 2)
        want = ver_ref.verify(p, q, draft, greedy=False, inv_temp=inv_temp(TEMPERATURE), words=words,
                              lanes=drv.lanes, vocab_max=drv.vocab_max, gamma_max=drv.gamma_max)
        state = rng_ref.xoshiro128pp(state, want.words)[1]
        have = {f: getattr(got, f) for f in _SHARED}
        exp = {f: int(getattr(want, f)) for f in _SHARED}
        assert have == exp, f"{name}: V={vocab} g={gamma} draft={draft}\n RTL    {have}\n golden {exp}"
        cycles = got.cycles_busy - got.cycles_stall
        bound = ver_ref.stream_bound(want, vocab, drv.lanes)
        out[name] = {"rows": got.rows, "target_positions": (got.rows + 1) // 2, "n_accept": got.n_accept,
                     "next_token": got.next_token, "cycles_busy": got.cycles_busy,
                     "cycles_stall": got.cycles_stall, "cycles": cycles,
                     "model_cycles": ver_ref.chain_rtl_cycles(want, vocab, drv.lanes, greedy=False),
                     "bound_cycles": bound, "ratio": cycles / bound}
    return out


@cocotb.test()
async def bench_verifier(dut):
    """``verifier_rounds`` at ``BENCH_VOCAB``, ``BENCH_GAMMA``, ``BENCH_SEED`` on the verifier core."""
    tb = AxilTB(dut, core("verifier"))
    stream = SimStream(dut)
    await tb.reset()

    def run() -> dict:
        drv = Verifier(description("verifier", SimDevice(tb.axil)), stream)
        return verifier_rounds(drv, int(setting("vocab")), int(setting("gamma")), int(setting("seed", "0")))

    _write(await bridge(run)())


# ------------------------------------------------------------------------------------------------
# treemask
# ------------------------------------------------------------------------------------------------

def treemask_trees(drv: TreeMask, nodes: list[int], seed: int) -> dict:
    """One random tree per N through ``drv``, each checked against ``hls_ref.treemask.tree_mask``; its
    cycles against ``hls_ref.treemask.cycles``."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in nodes:
        parents = vectors.random_parents(rng, n)
        mask, depth = drv.masks(parents)
        want = tm_ref.tree_mask(parents, drv.nodes_max)
        assert np.array_equal(mask, want.dense()), f"parents {parents}: the mask differs from the golden model"
        assert depth.tolist() == list(want.depth), f"parents {parents}: depth {depth} != {want.depth}"
        busy, stall = drv.cycles, drv.read_reg("CYCLES_STALL")
        model = tm_ref.cycles(n)
        out[str(n)] = {"nodes": n, "cycles_busy": busy, "cycles_stall": stall, "cycles": busy - stall,
                       "model_cycles": model, "ratio": (busy - stall) / model, "max_depth": want.max_depth}
    return out


@cocotb.test()
async def bench_treemask(dut):
    """``treemask_trees`` for the sizes in ``BENCH_NODES`` (comma-separated) on the treemask core."""
    tb = AxilTB(dut, core("treemask"))
    sink = SimSink(dut)
    await tb.reset()

    def run() -> dict:
        drv = TreeMask(description("treemask", SimDevice(tb.axil)), sink)
        return treemask_trees(drv, [int(n) for n in setting("nodes").split(",")], int(setting("seed", "0")))

    _write(await bridge(run)())


# ------------------------------------------------------------------------------------------------
# treeattn
# ------------------------------------------------------------------------------------------------

#: The EAGLE head's step shapes: a chain's one row, and the 7-node tree (the root's two children, two each).
TREEATTN_SHAPES = {"chain": (-1,), "tree": (-1, 0, 0, 1, 1, 2, 2)}


def treeattn_jobs(drv: TreeAttn, contexts: list[int], seed: int) -> dict:
    """For each shape of :data:`TREEATTN_SHAPES` and each context length, one random job through ``drv`` (its
    context in pages of the core's BLOCK keys), checked against ``hls_ref.treeattn.run``; its cycles beside the
    cycle model and the bound."""
    rng = np.random.default_rng(seed)
    out = {}
    for shape, parents in TREEATTN_SHAPES.items():
        mask = vectors.tree_rows(parents, drv.params["NODES_MAX"])
        for ctx in contexts:
            job = vectors.treeattn_job(rng, ctx, mask, drv.params)
            got, want = drv.run(job), ta_ref.run(job, drv.params)
            assert (got.out == want.out).all(), f"{shape}, L={ctx}: the output differs from the golden model"
            assert got.macs == want.macs, f"{shape}, L={ctx}: MACS {got.macs} != {want.macs}"
            vis = ta_ref.visible(job.mask)
            out[f"{shape}_{ctx}"] = {"shape": shape, "ctx": ctx, "nodes": job.n, "cycles_busy": drv.cycles,
                                     "cycles_stall": drv.stall, "cycles": got.cycles, "model_cycles": want.cycles,
                                     "bound": ta_ref.bound(ctx, vis, drv.params), "macs": got.macs,
                                     "ratio_to_bound": got.cycles / ta_ref.bound(ctx, vis, drv.params)}
    return out


@cocotb.test()
async def bench_treeattn(dut):
    """``treeattn_jobs`` for the context lengths in ``BENCH_CONTEXTS`` (comma-separated) on the treeattn core."""
    tb = AxilTB(dut, core("treeattn"))
    stream, sink = SimStream(dut), SimSink(dut)
    await tb.reset()

    def run() -> dict:
        drv = TreeAttn(description("treeattn", SimDevice(tb.axil)), stream, sink)
        return treeattn_jobs(drv, [int(n) for n in setting("contexts").split(",")], int(setting("seed", "0")))

    _write(await bridge(run)())


# ------------------------------------------------------------------------------------------------
# vecunit
# ------------------------------------------------------------------------------------------------

#: The EAGLE head's vector shapes (SmolLM2-135M): its hidden row, its MLP row, its heads' halves and the top k.
VECUNIT_SHAPES = {"hidden": 576, "mlp": 1536, "half": 32, "logits": 1024, "k": 8}


def vecunit_jobs(drv: VecUnit, seed: int) -> dict:
    """One random job of each operation on :data:`VECUNIT_SHAPES` through ``drv``, checked against
    ``hls_ref.vecunit.run`` (the Y words and SATURATED); its cycles beside the cycle model."""
    rng = np.random.default_rng(seed)
    s = VECUNIT_SHAPES
    d, f = s["hidden"], s["mlp"]

    def vals(n: int, bits: int = 22) -> np.ndarray:
        return rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n)

    def scales(n: int, lo: float = 1e-4, hi: float = 1e-3) -> np.ndarray:
        return vu_scale_words(rng.uniform(lo, hi, n))

    jobs = {"QUANT": vu_ref.quant_job(vals(d), scales(d, 2e-5, 6e-5)),
            "DEQ": vu_ref.deq_job(vals(2 * f, 30).reshape(2, f), scales(f), 1, vals(f)),
            "NORMQ": vu_ref.normq_job(vals(d), scales(d), 1 << 12),
            "ROPE": vu_ref.rope_job(vals(d), vu_turns(10000.0 ** -(np.arange(s["half"]) / s["half"])),
                                    int(rng.integers(0, 8192)), s["half"]),
            "SILU": vu_ref.silu_job(vals(f), vals(f)),
            "TOPK": vu_ref.topk_job(vals(s["logits"], 16), min(s["k"], drv.params["K_MAX"]))}
    out = {}
    for name, job in jobs.items():
        got, want = drv.run(job), vu_ref.run(job, drv.params)
        assert (got.y == want.y).all(), f"{name}: the output differs from the golden model"
        assert got.saturated == want.saturated, f"{name}: SATURATED {got.saturated} != {want.saturated}"
        out[name] = {"op": name, "len": job.length, "beats_in": drv.beats_in, "beats_out": drv.beats_out,
                     "cycles_busy": drv.cycles, "cycles_stall": drv.stall, "cycles": got.cycles,
                     "model_cycles": want.cycles, "saturated": got.saturated}
    out["SHORT_STREAM"] = vecunit_recovery(drv, jobs["SILU"])
    return out


class _LastBeatLost(RowStream):
    """A stream that loses a frame's last beat (a DMA programmed one beat short)."""

    def __init__(self, inner: RowStream) -> None:
        self.inner = inner

    def send(self, codes: np.ndarray) -> None:
        self.inner.send(codes[:-(core("vecunit").stream("s_axis").width // 16)])


class _TakenOnRecv(WordSink):
    """A sink that takes a frame off the stream only when :meth:`recv` asks, as a DMA's S2MM channel armed then
    does: it holds nothing early (``pending`` 0), so nothing but the driver drops a frame left behind."""

    def __init__(self, inner: WordSink) -> None:
        self.inner = inner

    def recv(self) -> list[int]:
        return self.inner.recv()


def vecunit_recovery(drv: VecUnit, job: vu_ref.Job) -> dict:
    """``job`` (long enough that Y words leave before the error) sent a beat short into a sink that takes frames
    only when asked: the driver raises CoreError naming SHORT_STREAM and takes the frame the core closes after the
    error, so that the job sent whole then gives the golden model's output."""
    stream, sink = drv.stream, drv.sink
    drv.attach(_LastBeatLost(stream), _TakenOnRecv(sink))
    try:
        drv.run(job)
        raise AssertionError("a frame a beat short was not refused")
    except CoreError as e:
        bits = e.bits
    assert bits == ["SHORT_STREAM"], f"a frame a beat short: ERR bits {bits}"
    drv.attach(stream, _TakenOnRecv(sink))
    try:
        got, want = drv.run(job), vu_ref.run(job, drv.params)
    finally:
        drv.attach(stream, sink)
    assert (got.y == want.y).all(), "the job after a stream error differs from the golden model"
    return {"op": VU_OPS[job.op], "len": job.length, "bits": bits, "cycles": got.cycles,
            "model_cycles": want.cycles}


@cocotb.test()
async def bench_vecunit(dut):
    """``vecunit_jobs`` at ``BENCH_SEED`` on the vecunit core."""
    tb = AxilTB(dut, core("vecunit"))
    stream, sink = SimStream(dut), SimSink(dut)
    await tb.reset()

    def run() -> dict:
        drv = VecUnit(description("vecunit", SimDevice(tb.axil)), stream, sink)
        return vecunit_jobs(drv, int(setting("seed", "0")))

    _write(await bridge(run)())


# ------------------------------------------------------------------------------------------------
# kvpage
# ------------------------------------------------------------------------------------------------

class Lockstep:
    """Each kvpage operation on the RTL's driver and on the golden backend's; their answers must agree.

    :meth:`measure` also records the operation's cycles (the RTL's ``CYCLES_BUSY``) and the cycle model's
    (``hls_ref.kvpage``'s, which the golden backend reports) under a label.
    """

    def __init__(self, rtl: KVPage, gold: KVPage) -> None:
        self.rtl, self.gold = rtl, gold
        self.out: dict[str, dict] = {}

    def __call__(self, method: str, *args):
        got, want = getattr(self.rtl, method)(*args), getattr(self.gold, method)(*args)
        assert got == want, f"kvpage {method}{args}: RTL answered {got}, the golden model {want}"
        return got

    def measure(self, label: str, method: str, *args, **facts):
        got = self(method, *args)
        op = "WRITE" if method == "write_row" else method.upper()
        self.out[label] = {"op": op, "cycles": self.rtl.cycles, "model_cycles": self.gold.cycles, **facts}
        return got

    def length(self, slot: int) -> int:
        """Rows of ``slot`` (asked of the golden model only: it runs no operation on the RTL)."""
        return self.gold.info(slot).length


def kvpage_ops(k: Lockstep) -> dict[str, dict]:
    """NEW; FORK of sequences of 1, 16 and MAX_BLOCKS rows; WRITE as an append, a copy on write and an own
    row; TRANSLATE; COMMIT of a branch holding 1 page and one holding many; ROLLBACK of 1 branch and of
    every slot but the sequence's; FREE of a sequence with that many branches; REFS; INFO."""
    rtl = k.rtl
    others = rtl.slots - 1
    seq = k.measure("new", "new")
    k.measure("write append", "write_row", seq, 0, rows_before=0)
    k.measure("write own row", "write_row", seq, 0)
    k.measure("translate", "translate", seq, 0)
    k.measure("fork (1 row)", "fork", seq, rows=1)
    k("free", seq)
    # a long sequence: FORK copies its rows; COMMIT and ROLLBACK do not depend on what branches hold
    seq = k("new")
    rows = min(rtl.max_blocks // 2, rtl.pages // 4)        # room for the branch to grow as many more
    for r in range(rows):
        k("write_row", seq, r)
        if r + 1 == 16:
            k("rollback", [k.measure("fork (16 rows)", "fork", seq, rows=16)])
    big = k.measure(f"fork ({rows} rows)", "fork", seq, rows=rows)
    k.measure("write copy-on-write", "write_row", big, rows - 1)
    grown = 1
    while k.length(big) < rtl.max_blocks and k.gold.free_pages > 2 and grown < rows:
        k("write_row", big, k.length(big))
        grown += 1
    small = k("fork", seq)
    k("write_row", small, rows - 1)
    k.measure(f"commit (branch holding {grown} pages, a sibling rolled back)", "commit", big, k.length(big),
              pages_held=grown)
    one = k("fork", big)
    k("write_row", one, k.length(one) - 1)
    k.measure("commit (branch holding 1 page)", "commit", one, k.length(one), pages_held=1)
    seq = one
    b1 = k("fork", seq)
    k("write_row", b1, k.length(b1) - 1)
    k.measure("rollback (1 branch)", "rollback", [b1], branches=1)
    branches = []
    for _ in range(others):
        branches.append(k("fork", seq))
        if k.gold.free_pages:
            k("write_row", branches[-1], k.length(branches[-1]) - 1)
    k.measure(f"rollback ({others} branches)", "rollback", branches, branches=others)
    for _ in range(others):
        k("fork", seq)
    k.measure(f"free (sequence with {others} branches)", "free", seq, branches=others)
    k.measure("refs", "refs", 0)
    k.measure("info", "info", 0)
    seq = k("new")
    full = min(rtl.max_blocks, rtl.pages)
    for r in range(full):
        k("write_row", seq, r)
    what = "a full block table" if full == rtl.max_blocks else "every page of the pool"
    k.measure(f"fork ({full} rows, {what})", "fork", seq, rows=full)
    return k.out


@cocotb.test()
async def bench_kvpage(dut):
    """``kvpage_ops`` on the kvpage core, in lockstep with the golden backend at the same parameters."""
    tb = AxilTB(dut, core("kvpage"))
    await tb.reset()

    def run() -> dict:
        rtl = KVPage(description("kvpage", SimDevice(tb.axil)))
        gold = KVPage(description("kvpage", GoldenDevice({0: "kvpage"}, {0: {"pages": rtl.pages,
                                                                          "max_blocks": rtl.max_blocks}})))
        return kvpage_ops(Lockstep(rtl, gold))

    _write(await bridge(run)())
