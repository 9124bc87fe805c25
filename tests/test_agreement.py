"""One agreement flow per core: the same vectors through every stage, the golden model the oracle.

The vectors come from ``hls_ref.vectors`` (fixed seeds). The stages:

* ``golden``: the vectors through the pynq driver on the golden register model (``GoldenDevice``): the
  register, stream and protocol layer around the model, against the model itself;
* ``cpp``: the HLS-style C++ reference (``hls_ref.cpp``);
* ``verilator``, ``icarus``: the RTL, through the same driver code in ``tb/<core>/agree_<core>.py``, which
  builds the vectors inside the simulator from the seed and count it is given.

Each vector's result, every result field, must equal the golden model's (``hls_ref``). The register-level
stages also check the cycles against the RTL cycle models in ``hls_ref``: the verifier's
``chain_rtl_cycles`` / ``tree_rtl_cycles``, the treemask's, the treeattn's and the vecunit's ``cycles`` (``CYCLES_BUSY -
CYCLES_STALL``), and the kvpage's ``CYCLES_BUSY``. A slow stage runs the first vectors of the set (a prefix).
"""
from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from hls_ref import draftengine as de
from hls_ref import kvpage as kv
from hls_ref import treeattn as ta
from hls_ref import treemask as tm
from hls_ref import vecunit as vu
from hls_ref import vectors
from hls_ref import verifier as ver
from hls_ref.rng import xoshiro128pp
from hwcontract import params as hwparams
from hwcontract.board import KV260_TREEATTN
from hwcontract.latency import de_wpipe
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.draftengine import DraftEngine
from specdec.hw.drivers.kvpage import KVPage
from specdec.hw.drivers.rng import Rng
from specdec.hw.drivers.treeattn import TreeAttn
from specdec.hw.drivers.treemask import TreeMask
from specdec.hw.drivers.vecunit import VecUnit
from specdec.hw.drivers.verifier import Verifier
from specdec.hw.golden import GoldenDevice
from specdec.sim import harness
from tb.agree import environment, merge_dealt, read_results
from tb.common import Stimulus, cross_names
from tb.draftengine.agree_draftengine import draftengine_results
from tb.kvpage.agree_kvpage import kvpage_results
from tb.rng.agree_rng import rng_results
from tb.treeattn.agree_treeattn import treeattn_results
from tb.treemask.agree_treemask import treemask_results
from tb.vecunit.agree_vecunit import vecunit_results
from tb.verifier.agree_verifier import CHAIN_REGS, chain_results, tree_results

SEED = 13
RTL = ("verilator", "icarus")
STAGES = ("golden", "cpp") + RTL
#: The vecunit flow's build (small counters, the EAGLE head's HALF 32 and top-8).
VECUNIT_BUILD = {"LEN_MAX": 256, "PARTS_MAX": 4, "HALF_MAX": 32, "K_MAX": 8}


@dataclass(frozen=True)
class Flow:
    """One core's agreement flow: the RTL build and cocotb test that runs it, and the vectors per stage."""

    core: str
    module: str
    testcase: str
    params: dict[str, int]
    counts: dict[str, int]
    limits: dict[str, int] = field(default_factory=dict)   # a slow stage runs the set's first vectors only
    #: kvpage's one stateful sequence: run whole on the quiet bus, its first vectors only under the other three
    #: stimulus combinations (by stage)
    cross_limits: dict[str, int] = field(default_factory=dict)

    def build(self) -> dict[str, int]:
        """Every build parameter (the defaults filled in)."""
        return hwparams.check(self.core, self.params)

    def golden_device(self) -> GoldenDevice:
        return GoldenDevice({0: self.core}, {0: {k.lower(): v for k, v in self.build().items()}})


FLOWS = {
    "rng": Flow("rng", "tb.rng.agree_rng", "agree", {},
                {"golden": 60, "cpp": 60, "verilator": 20, "icarus": 8}),
    "chain": Flow("verifier", "tb.verifier.agree_verifier", "chain", {"LANES": 4, "VOCAB_MAX": 64},
                  {"golden": 300, "cpp": 300, "verilator": 40, "icarus": 12}),
    "tree": Flow("verifier", "tb.verifier.agree_verifier", "tree", {"LANES": 4, "VOCAB_MAX": 64},
                 {"golden": 200, "cpp": 200, "verilator": 30, "icarus": 8}),
    "treemask": Flow("treemask", "tb.treemask.agree_treemask", "agree", {"NODES_MAX": 64},
                     {"golden": 128, "cpp": 128, "verilator": 64, "icarus": 24}),
    # Verilator runs the whole set (the directed prefix, exhaustion, every slot's and page's queries, then
    # random operations) on the quiet bus, Icarus its first 40 operations (allocation, writes, a fork and its
    # copy on write); under the other three stimulus combinations Verilator runs the first 40, Icarus the first 12
    "kvpage": Flow("kvpage", "tb.kvpage.agree_kvpage", "agree", {"PAGES": 16, "MAX_BLOCKS": 4},
                   {"golden": 600, "cpp": 600, "verilator": 60, "icarus": 6}, {"icarus": 40},
                   {"verilator": 40, "icarus": 12}),
    # a build whose memories hold every vector: the hot head (1024 tiles x 24 chunks) and K = 4096, its weights
    # in UltraRAM as the KV260's (the read and de_wpipe(24576, 1) = 7 registers). The default suite runs the
    # small random jobs on both simulators, the large ones and the two largest sums on Verilator; the demo
    # draft's shapes (M = 1 and 16, the hot head the largest) on Verilator under ``long``
    "draftengine": Flow("draftengine", "tb.draftengine.agree_draftengine", "agree",
                        {"WDEPTH": 24576, "PDEPTH": 1024, "K_MAX": 4096, "URAM": 1},
                        {"golden": 60, "cpp": 60, "verilator": 12, "icarus": 4},
                        {"icarus": vectors.draftengine_prefix(4, "small"),
                         "verilator": vectors.draftengine_prefix(12, "largest")}),
    # a small build (HEAD_DIM 32, GROUP 2, NODES_MAX 16, CTX_MAX 256, BLOCK 16): the directed jobs (no context,
    # short last blocks, a 7-node tree, NODES_MAX rows, extreme codes and distances, a saturated output), every
    # refusal, random chains and trees, and CTX_MAX - 1 and CTX_MAX keys; Icarus runs the directed jobs and the
    # refusals
    "treeattn": Flow("treeattn", "tb.treeattn.agree_treeattn", "agree",
                     {"HEAD_DIM": 32, "GROUP": 2, "NODES_MAX": 16, "CTX_MAX": 256, "BLOCK": 16},
                     {"golden": 40, "cpp": 40, "verilator": 8, "icarus": 0}, {"icarus": 15}),
    # the KV260's build (hwcontract.board.KV260_TREEATTN, blocks of 64 keys) on the same set: Verilator runs it but
    # the CTX_MAX - 1 and CTX_MAX = 8,192-key jobs (NODES_MAX = 64 rows included; under ``long`` all of it, as
    # "treeattn_kv260_all"), the golden and C++ stages all of it; Icarus, under ``long``, the jobs with no context, a
    # chain over two whole blocks and a short one, and a 7-node tree over one whole block
    "treeattn_kv260": Flow("treeattn", "tb.treeattn.agree_treeattn", "agree", KV260_TREEATTN,
                           {"golden": 40, "cpp": 40, "verilator": 8, "icarus": 0},
                           {"icarus": 3, "verilator": len(vectors.treeattn_set(SEED, 8, KV260_TREEATTN)) - 2}),
    # a small build (LEN_MAX 256, PARTS_MAX 4, HALF_MAX 32: the EAGLE head's half head, K_MAX 8): the edge jobs of
    # every operation, every refusal and mis-framed job, then random jobs; Icarus runs the edge jobs and the
    # refusals (the set without random jobs)
    "vecunit": Flow("vecunit", "tb.vecunit.agree_vecunit", "agree", VECUNIT_BUILD,
                    {"golden": 60, "cpp": 60, "verilator": 12, "icarus": 0},
                    {"icarus": len(vectors.vecunit_set(SEED, 0, VECUNIT_BUILD))}),
}


def rtl(flow: Flow, sim: str, count: int, tmp_path, waves: bool) -> list[dict]:
    """The results of the flow's cocotb test on ``sim`` for the first ``count`` vectors.

    The cocotb test runs under the four idle x backpressure combinations (``tb.common.cross_test``): the
    vectors are dealt across them (independent rounds), or, for kvpage's one stateful operation sequence,
    every combination runs the sequence (the quiet bus all of it, the others the prefix ``cross_limits``
    says) and each must give the quiet bus's results."""
    out = tmp_path / "results.json"
    cross = flow.cross_limits.get(sim)
    harness.run(flow.core, flow.module, sim, params=flow.params, testcase=cross_names(flow.testcase),
                waves=waves, extra_env=environment(SEED, count, out, flow.limits.get(sim), cross))
    parts = read_results(out)
    if flow.core != "kvpage":
        return merge_dealt(parts)
    first, *others = parts
    for index, got in enumerate(others, start=1):
        stim = Stimulus(index >= 2, index % 2 == 1)
        want = first[:cross]
        assert len(got) == len(want), f"{flow.core} on {sim}: {len(got)} results under {stim}, {len(want)} wanted"
        assert got == want, f"{flow.core} on {sim}: the results under {stim} differ from those on a quiet bus"
    return first


def agree(stage: str, got: list[dict], want: list[dict], describe: Callable[[int], str]) -> None:
    """Every vector's result equals the golden model's, field for field."""
    assert len(got) == len(want), f"{stage}: {len(got)} results for {len(want)} vectors"
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if bad:
        i = bad[0]
        raise AssertionError(f"{stage}: {len(bad)} of {len(want)} vectors differ from the golden model; the first, "
                             f"#{i}: {describe(i)}\n got {got[i]}\nwant {want[i]}")


def stage_results(stage: str, flow: Flow, n: int, tmp_path, waves: bool, golden: Callable[[], list],
                  cpp: Callable[[], list]) -> list:
    """The results of the first ``n`` vectors at ``stage``: ``golden()`` (the driver over the golden register
    model), ``cpp()`` (the C++ reference, skipped without a compiler), or the flow's RTL on that simulator."""
    if stage == "golden":
        return golden()
    if stage == "cpp":
        if shutil.which("g++") is None:
            pytest.skip("no C++ compiler")
        return cpp()
    return rtl(flow, stage, n, tmp_path, waves)


# ------------------------------------------------------------------------------------------------
# rng
# ------------------------------------------------------------------------------------------------

def rng_expected(c: vectors.RngCase) -> dict:
    outs, _ = xoshiro128pp(c.seed, c.steps + c.burst)
    return {"first": outs[:c.steps].tolist(), "out": int(outs[-1]) if outs.size else 0,
            "xor": int(np.bitwise_xor.reduce(outs)), "steps": c.steps + c.burst}


def rng_cpp(c: vectors.RngCase) -> dict:
    from hls_ref import cpp
    outs, _, acc, err = cpp.rng_run_xor(c.seed, c.steps + c.burst)
    assert err == 0
    return {"first": outs[:c.steps].tolist(), "out": int(outs[-1]) if outs.size else 0, "xor": acc,
            "steps": int(outs.size)}


@pytest.mark.parametrize("stage", STAGES)
def test_rng(stage, tmp_path, waves):
    flow = FLOWS["rng"]
    n = flow.counts[stage]
    cases = vectors.rng_set(SEED, n)
    got = stage_results(stage, flow, n, tmp_path, waves,
                        golden=lambda: rng_results(Rng(description("rng", flow.golden_device())), cases),
                        cpp=lambda: [rng_cpp(c) for c in cases])
    agree(stage, got, [rng_expected(c) for c in cases], lambda i: repr(cases[i]))


# ------------------------------------------------------------------------------------------------
# verifier: chain and tree rounds
# ------------------------------------------------------------------------------------------------

def _stage_view(stage: str, want: dict) -> dict:
    """What a stage reports: the C++ reference the sampling beats, the cores (register stages) the cycles."""
    drop = "cycles" if stage == "cpp" else "sample_beats"
    return {k: v for k, v in want.items() if k != drop}


def golden_verifier(flow: Flow) -> Verifier:
    """The verifier driver over the golden register model of the flow's build, with its row stream."""
    dev = flow.golden_device()
    return Verifier(description("verifier", dev), dev.stream(0))


def decision(d: ver.Decision) -> dict:
    """A golden Decision as the result registers show it (CHAIN_REGS' fields) and the sampling beats."""
    return {f: getattr(d, f) for f in CHAIN_REGS} | {"sample_beats": d.sample_beats}


def chain_expected(r: vectors.ChainRound, b: dict[str, int]) -> dict:
    d = ver.verify(r.p, r.q, r.draft, greedy=r.greedy, inv_temp=r.inv_temp, words=r.words(), lanes=b["LANES"],
                   vocab_max=b["VOCAB_MAX"], gamma_max=b["GAMMA_MAX"])
    out = decision(d)
    if not d.err:
        out["cycles"] = ver.chain_rtl_cycles(d, r.vocab, b["LANES"], r.greedy)
    return out


def chain_describe(r: vectors.ChainRound) -> str:
    return (f"V={r.vocab} g={r.gamma} greedy={r.greedy} inv_temp={r.inv_temp} draft={list(r.draft)} "
            f"seed={r.seed}")


@pytest.mark.parametrize("stage", STAGES)
def test_verifier_chain(stage, tmp_path, waves):
    flow = FLOWS["chain"]
    b, n = flow.build(), flow.counts[stage]
    rounds = vectors.chain_set(SEED, n, vocab_max=b["VOCAB_MAX"], gamma_max=b["GAMMA_MAX"])

    def cpp_rounds() -> list[dict]:
        from hls_ref import cpp
        return [cpp.verifier_round(r.p, r.q, r.draft, greedy=r.greedy, inv_temp=r.inv_temp, words=r.words(),
                                   lanes=b["LANES"], vocab_max=b["VOCAB_MAX"], gamma_max=b["GAMMA_MAX"])
                for r in rounds]

    got = stage_results(stage, flow, n, tmp_path, waves, cpp=cpp_rounds,
                        golden=lambda: chain_results(golden_verifier(flow), rounds))
    want = [_stage_view(stage, chain_expected(r, b)) for r in rounds]
    agree(stage, got, want, lambda i: chain_describe(rounds[i]))


def tree_expected(r: vectors.TreeRound, b: dict[str, int]) -> dict:
    d = ver.verify_tree(r.rows, r.parents, r.tokens, greedy=r.greedy, inv_temp=r.inv_temp, words=r.words(),
                        lanes=b["LANES"], vocab_max=b["VOCAB_MAX"], tree_max=b["TREE_MAX"])
    out = decision(d) | {"cur_node": d.node, "path_lo": d.path & 0xFFFFFFFF, "path_hi": d.path >> 32}
    if not d.err:
        out["cycles"] = ver.tree_rtl_cycles(d, r.vocab, b["LANES"], r.greedy, r.parents)
    return out


def tree_describe(r: vectors.TreeRound) -> str:
    return (f"V={r.vocab} N={len(r.parents)} greedy={r.greedy} inv_temp={r.inv_temp} parents={list(r.parents)} "
            f"tokens={list(r.tokens)} seed={r.seed}")


@pytest.mark.parametrize("stage", STAGES)
def test_verifier_tree(stage, tmp_path, waves):
    flow = FLOWS["tree"]
    b, n = flow.build(), flow.counts[stage]
    rounds = vectors.tree_set(SEED, n, vocab_max=b["VOCAB_MAX"], tree_max=b["TREE_MAX"])

    def cpp_rounds() -> list[dict]:
        from hls_ref import cpp
        return [cpp.verifier_tree_round(r.rows, r.parents, r.tokens, greedy=r.greedy, inv_temp=r.inv_temp,
                                        words=r.words(), lanes=b["LANES"], vocab_max=b["VOCAB_MAX"],
                                        tree_max=b["TREE_MAX"]) for r in rounds]

    got = stage_results(stage, flow, n, tmp_path, waves, cpp=cpp_rounds,
                        golden=lambda: tree_results(golden_verifier(flow), rounds))
    want = [_stage_view(stage, tree_expected(r, b)) for r in rounds]
    agree(stage, got, want, lambda i: tree_describe(rounds[i]))


# ------------------------------------------------------------------------------------------------
# treemask
# ------------------------------------------------------------------------------------------------

def treemask_expected(parents, nodes_max: int) -> dict:
    m = tm.tree_mask(parents, nodes_max)
    return {"words": tm.stream_words(m), "rows": len(m.rows), "max_depth": m.max_depth, "err": m.err,
            "cycles": 0 if m.err else tm.cycles(len(parents))}


@pytest.mark.parametrize("stage", STAGES)
def test_treemask(stage, tmp_path, waves):
    flow = FLOWS["treemask"]
    nodes_max, n = flow.build()["NODES_MAX"], flow.counts[stage]
    trees = vectors.treemask_set(SEED, n, nodes_max)

    def golden() -> list[dict]:
        dev = flow.golden_device()
        return treemask_results(TreeMask(description("treemask", dev), dev.sink(0)), trees)

    def cpp_trees() -> list[dict]:
        from hls_ref import cpp
        return [{"words": words, **res} for words, res in (cpp.treemask_words(p, nodes_max) for p in trees)]

    got = stage_results(stage, flow, n, tmp_path, waves, golden=golden, cpp=cpp_trees)
    agree(stage, got, [treemask_expected(p, nodes_max) for p in trees], lambda i: f"parents={trees[i]}")


# ------------------------------------------------------------------------------------------------
# kvpage
# ------------------------------------------------------------------------------------------------

def kvpage_expected(ops: list[kv.Op], pages: int, max_blocks: int, slots: int) -> list[dict]:
    """The golden model run over the operations: what every register shows after each (OPS counts the
    operations that ran; a result register keeps its value until an operation writes it)."""
    st = kv.KVState.empty(pages, max_blocks, slots)
    held = dict.fromkeys(core("kvpage").group("RESULT").registers, 0)
    done = 0
    out = []
    for op in ops:
        st, res = kv.step(st, op)
        held.update(res.regs)
        done += not res.err
        out.append({"ERR": res.err, "CYCLES_BUSY": res.cycles, **held, **kv.status_regs(st), "OPS": done})
    return out


@pytest.mark.parametrize("stage", STAGES)
def test_kvpage(stage, tmp_path, waves):
    flow = FLOWS["kvpage"]
    b, n = flow.build(), flow.counts[stage]
    ops = vectors.kvpage_set(SEED, n, pages=b["PAGES"], max_blocks=b["MAX_BLOCKS"], slots=b["SLOTS"])
    ops = ops[:flow.limits.get(stage)]
    want = kvpage_expected(ops, b["PAGES"], b["MAX_BLOCKS"], b["SLOTS"])

    def cpp_ops() -> list[dict]:
        from hls_ref import cpp
        got = []
        with cpp.KvpageCpp(b["PAGES"], b["MAX_BLOCKS"], b["SLOTS"]) as c:
            for op in ops:
                err, cycles, _, status = c.op(op)
                got.append({"ERR": err, "CYCLES_BUSY": cycles, **c.registers, **status})
        return got

    got = stage_results(stage, flow, n, tmp_path, waves, cpp=cpp_ops,
                        golden=lambda: kvpage_results(KVPage(description("kvpage", flow.golden_device())), ops))
    if stage == "cpp":
        want = [{k: v for k, v in w.items() if k != "OPS"} for w in want]     # no OPS counter in the C++
    agree(stage, got, want, lambda i: f"op #{i} {ops[i]}")


# ------------------------------------------------------------------------------------------------
# draftengine
# ------------------------------------------------------------------------------------------------

def draftengine_expected(job: de.Job, b: dict[str, int]) -> dict:
    m, k = job.x.shape
    n = job.w.shape[0]
    out = de.run(job)
    nt, _, ab = de.tiles(m, k, n, b["ROWS"], b["COLS"])
    return {"y": out.y.tolist(), "saturated": out.saturated, "beats_in": m * ab, "beats_out": nt * m,
            "cycles": de.cycles("RUN", m * ab, m, k, n, b["ROWS"], b["COLS"], de_wpipe(b["WDEPTH"], b["URAM"]))}


@pytest.mark.parametrize("stage", STAGES)
def test_draftengine(stage, tmp_path, waves):
    """Every job's outputs and saturation count, bit for bit, through the golden register model, the C++
    reference and both simulators (the largest sums, random shapes off the array's multiples; on golden and C++
    also the demo draft's shapes, the hot head included); the register stages also their beats and cycles."""
    check_draftengine(stage, FLOWS["draftengine"], tmp_path, waves)


@pytest.mark.long
def test_draftengine_demo_shapes(tmp_path, waves):
    """The whole set on Verilator: every demo-draft shape at M = 1 and 16, the 8,192-token hot head included."""
    flow = FLOWS["draftengine"]
    check_draftengine("verilator", dataclasses.replace(flow, limits={}), tmp_path, waves)


def check_draftengine(stage: str, flow: Flow, tmp_path, waves) -> None:
    b, n = flow.build(), flow.counts[stage]
    jobs = vectors.draftengine_set(SEED, n)[:flow.limits.get(stage)]
    want = [draftengine_expected(j, b) for j in jobs]

    def cpp_jobs() -> list[dict]:
        from hls_ref import cpp
        got = []
        for j in jobs:
            y, sat = cpp.draftengine_run(j)
            got.append({"y": y.tolist(), "saturated": sat})
        return got

    def golden() -> list[dict]:
        dev = flow.golden_device()
        return draftengine_results(DraftEngine(description("draftengine", dev), dev.stream(0), dev.sink(0)), jobs)

    got = stage_results(stage, flow, n, tmp_path, waves, golden=golden, cpp=cpp_jobs)
    if stage == "cpp":
        want = [{"y": w["y"], "saturated": w["saturated"]} for w in want]
    agree(stage, got, want, lambda i: f"job #{i}: M, K, N = {jobs[i].x.shape[0]}, {jobs[i].x.shape[1]}, "
                                      f"{jobs[i].w.shape[0]}, OUT_BITS {jobs[i].out_bits}")


# ------------------------------------------------------------------------------------------------
# treeattn
# ------------------------------------------------------------------------------------------------

def treeattn_expected(job: ta.Job, b: dict[str, int]) -> dict:
    o = ta.run(job, b)
    return {"out": o.out.tolist(), "err": o.err, "macs": o.macs, "cycles": o.cycles}


FLOWS["treeattn_kv260_all"] = dataclasses.replace(FLOWS["treeattn_kv260"], limits={})
#: The treeattn flows and their stages: the small build's every stage, the KV260's with Icarus, and Verilator over
#: the whole set, under ``long``.
TREEATTN_RUNS = [*(("treeattn", s) for s in STAGES), *(("treeattn_kv260", s) for s in STAGES if s != "icarus"),
                 *(pytest.param(*run, marks=pytest.mark.long)
                   for run in (("treeattn_kv260", "icarus"), ("treeattn_kv260_all", "verilator")))]


@pytest.mark.parametrize(("name", "stage"), TREEATTN_RUNS)
def test_treeattn(name, stage, tmp_path, waves):
    """Every job's output codes, ERR and MACS, bit for bit, through the golden register model (the driver), the C++
    reference and both simulators (the driver on the RTL); the register stages also the cycle model's count. The
    small build and the KV260's."""
    flow = FLOWS[name]
    b, n = flow.build(), flow.counts[stage]
    jobs = vectors.treeattn_set(SEED, n, b)[:flow.limits.get(stage)]
    want = [treeattn_expected(j, b) for j in jobs]

    def cpp_jobs() -> list[dict]:
        from hls_ref import cpp
        got = []
        for j in jobs:
            out, res = cpp.treeattn_run(j, b)
            got.append({"out": out.tolist(), "err": res["err"], "macs": res["macs"]})
        return got

    def golden() -> list[dict]:
        dev = flow.golden_device()
        return treeattn_results(TreeAttn(description("treeattn", dev), dev.stream(0), dev.sink(0)), jobs)

    got = stage_results(stage, flow, n, tmp_path, waves, golden=golden, cpp=cpp_jobs)
    if stage == "cpp":
        want = [{k: v for k, v in w.items() if k != "cycles"} for w in want]
    agree(stage, got, want, lambda i: f"job #{i}: L={jobs[i].ctx} N={jobs[i].n} mask={jobs[i].mask} "
                                      f"MULT={jobs[i].mult} SHIFT={jobs[i].shift}")


# ------------------------------------------------------------------------------------------------
# vecunit
# ------------------------------------------------------------------------------------------------

def vecunit_expected(job: vu.Job, b: dict[str, int]) -> dict:
    """The golden model's result of ``job``: ERR, SATURATED and cycles, and for a job that ran its Y words and its
    s_axis and m_axis beats (a job in error has no result words)."""
    o = vu.run(job, b)
    out = {"err": o.err, "saturated": o.saturated, "cycles": o.cycles}
    if not o.err:
        out |= {"y": o.y.tolist(), "beats_in": len(job.x), "beats_out": len(o.y)}
    return out


def vecunit_describe(job: vu.Job) -> str:
    regs = ", ".join(f"{k}={v}" for k, v in job.registers().items())
    return f"{regs}, {len(job.x)} beats"


@pytest.mark.parametrize("stage", STAGES)
def test_vecunit(stage, tmp_path, waves):
    """Every job's Y words, ERR and SATURATED, bit for bit, through the golden register model (the driver), the C++
    reference and both simulators (the driver on the RTL); the register stages also the cycle model's count and,
    for a job that ran, its beats in and out."""
    flow = FLOWS["vecunit"]
    b, n = flow.build(), flow.counts[stage]
    jobs = vectors.vecunit_set(SEED, n, b)[:flow.limits.get(stage)]
    want = [vecunit_expected(j, b) for j in jobs]

    def cpp_jobs() -> list[dict]:
        from hls_ref import cpp
        got = []
        for j in jobs:
            y, res = cpp.vecunit_run(j, b)
            r = {"err": res["err"], "saturated": res["saturated"]}
            if not res["err"] or len(y):
                r |= {"y": np.asarray(y).tolist(), "beats_in": res["beats_in"], "beats_out": res["beats_out"]}
            got.append(r)
        return got

    def golden() -> list[dict]:
        dev = flow.golden_device()
        return vecunit_results(VecUnit(description("vecunit", dev), dev.stream(0), dev.sink(0)), jobs)

    got = stage_results(stage, flow, n, tmp_path, waves, golden=golden, cpp=cpp_jobs)
    if stage == "cpp":
        want = [{k: v for k, v in w.items() if k != "cycles"} for w in want]
    agree(stage, got, want, lambda i: vecunit_describe(jobs[i]))


# ------------------------------------------------------------------------------------------------
# The vector sets reach every outcome (so that agreement means something)
# ------------------------------------------------------------------------------------------------

def test_verifier_sets_cover():
    """Chain and tree sets: both modes accept and reject, sampling resamples after a rejection, rounds
    stop on EMPTY_ROW; the RTL's prefix already has accepted and rejected rounds in both modes."""
    flow = FLOWS["chain"]
    b = flow.build()
    rounds = vectors.chain_set(SEED, flow.counts["golden"], vocab_max=b["VOCAB_MAX"], gamma_max=b["GAMMA_MAX"])
    kinds = [(r.greedy, w["err"] != 0, w["n_accept"] == r.gamma)
             for r, w in zip(rounds, (chain_expected(r, b) for r in rounds), strict=True)]
    for greedy in (True, False):
        assert {(greedy, False, True), (greedy, False, False)} <= set(kinds), kinds
        assert {(greedy, False, True), (greedy, False, False)} <= set(kinds[:flow.counts["icarus"] * 2])
    assert any(err for _, err, _ in kinds)
    flow = FLOWS["tree"]
    b = flow.build()
    trees = vectors.tree_set(SEED, flow.counts["golden"], vocab_max=b["VOCAB_MAX"], tree_max=b["TREE_MAX"])
    want = [tree_expected(r, b) for r in trees]
    assert max(w["n_accept"] for w in want) >= 5
    assert any(not r.greedy and not w["err"] and w["words"] > w["n_accept"] + 1 for r, w in zip(trees, want))
    assert any(r.greedy and w["n_accept"] > 0 for r, w in zip(trees, want))
    assert any(w["err"] for w in want)
    assert any(w["n_accept"] > 0 for w in want[:flow.counts["icarus"]])


def test_treemask_and_kvpage_sets_cover():
    """Treemask: both refusals and every size; kvpage: every operation ran, copy on write, errors."""
    nodes_max = FLOWS["treemask"].build()["NODES_MAX"]
    trees = vectors.treemask_set(SEED, FLOWS["treemask"].counts["golden"], nodes_max)
    want = [treemask_expected(p, nodes_max) for p in trees]
    assert {w["err"] for w in want} == {0, tm.ERR_BAD_NODES, tm.ERR_BAD_PARENT}
    assert {len(p) for p, w in zip(trees, want) if not w["err"]} == set(range(1, nodes_max + 1))
    flow = FLOWS["kvpage"]
    b = flow.build()
    ops = vectors.kvpage_set(SEED, flow.counts["golden"], pages=b["PAGES"], max_blocks=b["MAX_BLOCKS"],
                             slots=b["SLOTS"])
    want = kvpage_expected(ops, b["PAGES"], b["MAX_BLOCKS"], b["SLOTS"])
    ran = {op.code for op, w in zip(ops, want) if not w["ERR"]}
    assert set(kv.OPS) <= ran | {"CLEAR"}, set(kv.OPS) - ran
    assert any(w["RES_FLAGS"] == kv.FLAG_ALLOC | kv.FLAG_COPY for w in want)
    assert {kv.ERR[e] for e in ("POOL_EMPTY", "NO_SLOT", "BAD_SLOT", "BAD_ROW")} <= {w["ERR"] for w in want}


def test_vecunit_set_covers():
    """Vecunit: every operation runs, each of QUANT, DEQ, NORMQ, ROPE and SILU saturates somewhere, every ERR bit is
    raised; the Icarus prefix already holds every operation and every ERR bit."""
    flow = FLOWS["vecunit"]
    b = flow.build()
    jobs = vectors.vecunit_set(SEED, flow.counts["golden"], b)
    outs = [vu.run(j, b) for j in jobs]
    ran = {vu.VU_OPS[j.op] for j, o in zip(jobs, outs) if not o.err}
    assert ran == set(vu.VU_OPS)
    assert {vu.VU_OPS[j.op] for j, o in zip(jobs, outs) if o.saturated} == set(vu.VU_OPS) - {"TOPK"}
    assert {o.err for o in outs} == {0, *vu.ERR.values()}
    prefix = list(zip(jobs, outs))[:flow.limits["icarus"]]
    assert {vu.VU_OPS[j.op] for j, o in prefix if not o.err} == set(vu.VU_OPS)
    assert {o.err for _, o in prefix} == {0, *vu.ERR.values()}
