"""verifier tree mode: cocotb tests of the RTL (fpga/verifier.py) against ``hls_ref.verifier.verify_tree``.

Every tree round's result registers (CUR_NODE and PATH_LO/HI included) are compared with the golden model
fed with the xoshiro128++ words the core takes; chain rounds (tb.verifier.test_verifier) run in between
with the RNG state carried over. ``CYCLES_BUSY - CYCLES_STALL`` is asserted equal to
``hls_ref.verifier.tree_rtl_cycles`` on every completed round.

Host protocol used here (what a driver must do in tree mode): write CONFIG (TREE = 1), NODES, VOCAB,
INV_TEMP, TREE_PARENT*, TREE_TOKEN*, then CTRL.START. Stream the row of node 0. After each row, poll
until ``N_ACCEPT`` exceeds the number of rows streamed minus one (a child was accepted: read CUR_NODE
and stream that node's row) or ``STATUS.DONE``/``ERROR``. Do not write the tree registers while BUSY.

Every test runs four times (tb.common.cross_test): with and without idle cycles on the AXI-Lite master
and the row stream, and with and without backpressure on BREADY/RREADY; rounds and error cases are dealt
across the four. The TB class is tb.verifier.verifier_tb.TreeTB.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from hls_ref import verifier as gv
from hwcontract import formats as fmt
from hls_ref.vectors import (CHAIN3_PATHS, MEDUSA_PATHS, random_chain_round, random_tree_round, rng_seed,
                             tree_round)
from hwcontract.formats import LOGIT_NEG_INF
from specdec.decoding.tree import parents_from_paths
from specdec.sim import harness
from tb.common import QUIET, Stimulus, cross_names, cross_test
from tb.verifier.verifier_tb import TREE_RESULTS, TreeTB, emask

ROUNDS = int(os.environ.get("VERIFIER_TREE_ROUNDS", "80"))    # per build, dealt across the combinations
ROUND_TESTS = cross_names("tree_rounds")

# Rows whose running sum S_p exceeds the sum of their weights (rescale rounding), with a seed whose words
# reject every live token at the root: all weight is removed and the round ends in EMPTY_ROW
# (found by search with the golden model; inv_temp 256). Keyed by LANES.
EMPTY_AFTER_REJECT = {
    1: ([-4359, -4332, -4243, -4173, -3762, -3515, -3476, -2823, -1708, -1296, -1170, -1118, -1003, -988, -946, -20],
        [3279020369, 632857159, 992337765, 1686344599]),
    2: ([-4458, -3685, -3355, -3353, -3133, -2018, -1854, -1691, -1338, -1270, -858, -707, -40],
        [3230553101, 602240761, 197376821, 4258551885]),
    4: ([-4000, -3068, -2976, -2911, -2129, -2082, -2045, -1839, -1835, -1767, -1670, -855, -18],
        [583517863, 2366831555, 1173615051, 434281957]),
    8: ([-3115, -2972, -2074, -1349, -1231, -1011, -929, -278, -228],
        [2330973823, 547895441, 2039927247, 1642001851]),
}


async def _tb(dut, stim: Stimulus = QUIET) -> TreeTB:
    tb = TreeTB(dut, stim)
    await tb.reset()
    await tb.seed(tb.state)
    return tb


@cross_test
async def tree_rounds(dut, stim: Stimulus):
    """Random trees (greedy and sampling) mixed with chain rounds, one RNG stream across both (this
    combination's share of ROUNDS)."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(2000 + tb.lanes + 5 * stim.index)
    deepest = 0
    for k in range(stim.share(ROUNDS)):
        if rnd.random() < 0.2:
            c = random_chain_round(rnd, tb.vocab_max, tb.gamma_max)
            await tb.run_round(c.p, c.q, c.draft, c.greedy, c.inv_temp)
            continue
        r = random_tree_round(rnd, tb.vocab_max, tb.tree_max)
        got = await tb.run_tree(r.rows, r.parents, r.tokens, r.greedy, r.inv_temp)
        deepest = max(deepest, got["n_accept"])
    tb.log.info("tree rounds (lanes=%d %s): deepest path %d; %s; chain paths %s", tb.lanes, stim, deepest,
                dict(sorted(tb.tree_kinds.items())), tb.kinds)
    assert deepest >= min(3, tb.tree_max - 1)


@cross_test
async def named_trees(dut, stim: Stimulus):
    """The 3-chain and the Medusa tree via specdec.decoding.tree.parents_from_paths, greedy and sampling, with
    tokens that follow the rows' argmax (full acceptance) and tokens that miss; the (tree, mode, trial)
    rounds are dealt across the four stimulus combinations."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(31 + stim.index)
    rounds = [(parents_from_paths(paths), greedy, trial) for paths in (CHAIN3_PATHS, MEDUSA_PATHS)
              for greedy in (True, False) for trial in range(6)]
    for parents, greedy, trial in stim.deal(rounds):
        if len(parents) > tb.tree_max:
            continue
        r = tree_round(rnd, min(tb.vocab_max, 24), greedy, parents=parents)
        tokens = r.tokens
        if trial < 2:       # every child's token is its parent row's argmax: deep accepted paths
            tokens = [0] + [int(np.argmax(r.rows[p])) for p in parents[1:]]
        await tb.run_tree(r.rows, parents, tokens, greedy, 256 if trial < 3 else r.inv_temp)
    tb.log.info("named trees: %s", dict(sorted(tb.tree_kinds.items())))


async def _recover(tb: TreeTB, rnd: np.random.Generator) -> None:
    """SOFT_RESET, ERR cleared and the tree registers kept, re-seed, then one correct tree round."""
    nodes = await tb.read("NODES")
    await tb.write("CTRL", SOFT_RESET=1)
    assert await tb.read("ERR") == 0
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert await tb.read("NODES") == nodes
    await tb.seed(rng_seed(rnd))
    r = random_tree_round(rnd, tb.vocab_max, tb.tree_max, greedy=bool(rnd.random() < 0.5))
    got = await tb.run_tree(r.rows, r.parents, r.tokens, r.greedy, r.inv_temp)
    assert got["err"] == 0


@cross_test
async def tree_errors(dut, stim: Stimulus):
    """BAD_TREE (N = 0, N = TREE_MAX + 1, parent == i, parent > i), the start checks' order, BAD_TOKEN,
    EMPTY_ROW (empty root row, empty child row, every weight rejected), UNEXPECTED_DATA, a soft reset
    in the middle of a round; SOFT_RESET recovers from each. The cases are dealt across the four stimulus
    combinations."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(99 + stim.index)
    L, vmax, tmax = tb.lanes, tb.vocab_max, tb.tree_max
    v = min(vmax, 9)
    rowp = (np.arange(v, dtype=np.int64) * 37) % 500 - 600
    rowp[v // 2] = 0

    async def start_err(parents, tokens, name, greedy=True, t=256, nodes=None, vocab=v):
        gp = parents if nodes is None else (list(parents) + [0] * nodes)[:nodes]
        want = gv.tree_start_error(gp, list(tokens) + [0] * len(gp), vocab, greedy=greedy,
                                   inv_temp=t, vocab_max=vmax, tree_max=tmax)
        assert want == emask(name), (name, want)            # the golden model agrees
        await tb.configure_tree(vocab, parents, tokens, greedy, t, nodes=nodes)
        await tb.write("CTRL", START=1)
        st = await tb.read_fields("STATUS")
        assert st == {"BUSY": 0, "DONE": 0, "ERROR": 1}, (name, st)
        assert await tb.read("ERR") == emask(name), name
        for r in TREE_RESULTS[:-4] + TREE_RESULTS[-3:]:
            assert await tb.read(r) == 0, (name, r)
        await _recover(tb, rnd)

    chain = list(range(-1, min(tmax, 4) - 1))
    chain[0] = 0
    toks = [0] + [1] * (len(chain) - 1)

    async def not_errors():
        """GAMMA above GAMMA_MAX is ignored in tree mode, a token past NODES is not checked, and a soft
        reset in the middle of a round goes back to IDLE."""
        await tb.write("GAMMA", tb.gamma_max + 1)
        rows = np.tile(rowp, (len(chain), 1))
        got = await tb.run_tree(rows, chain, toks, True, 256)
        assert got["err"] == 0
        if len(chain) > 1:
            last = len(chain) - 1              # node `last` leaves the tree: its token may be anything
            await tb.write(f"TREE_TOKEN{last // 2}", (toks[last - 1] | 0xFFFF0000) if last % 2 else 0xFFFFFFFF)
            await tb.write("NODES", last)
            await tb.write("CTRL", START=1)
            assert (await tb.read_fields("STATUS"))["ERROR"] == 0
            await tb.write("CTRL", SOFT_RESET=1)                     # in the middle of a round: back to IDLE
            assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
            got = await tb.run_tree(rows, chain, toks, False, 256)   # the next round runs normally
            assert got["err"] == 0

    async def empty_row(rows, parents, tokens, greedy):
        got = await tb.run_tree(rows, parents, tokens, greedy, 256)
        assert got["err"] == emask("EMPTY_ROW"), got
        await _recover(tb, rnd)

    async def empty_after_reject():
        """Every live token rejected at the root: all weight removed (EMPTY_AFTER_REJECT)."""
        z, seed = EMPTY_AFTER_REJECT[L]
        if len(z) > vmax or tmax < 2:
            return
        z = np.array(z, dtype=np.int64)
        m, _ = gv.row_stats(z, L)
        live = [int(x) for x in np.nonzero(gv._weights(z, m))[0]]
        parents, tokens = [0] * (len(live) + 1), [0] + live
        if len(parents) <= tmax:
            await tb.seed(seed)
            got = await tb.run_tree(z[None, :], parents, tokens, False, 256)
            assert got["err"] == emask("EMPTY_ROW") and got["words"] == len(live), got
            await _recover(tb, rnd)

    async def unexpected_data():
        """A row after a finished tree round."""
        await tb.run_tree(rowp[None, :], [0], [0], True, 256)
        await tb.send(tb.beats(rowp))
        assert await tb.read("ERR") == emask("UNEXPECTED_DATA")
        await _recover(tb, rnd)

    empty = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    peak = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    peak[v - 1] = 0                                 # one live token: its child is accepted for sure
    cases = [
        lambda: start_err([0], [0], "BAD_TREE", nodes=0),
        lambda: start_err([0] + list(range(tmax - 1)), [0] * tmax, "BAD_TREE", nodes=tmax + 1),  # TREE_MAX + 1
    ]
    if tmax >= 3:
        cases += [
            lambda: start_err([0, 0, 2], [0, 1, 1], "BAD_TREE"),                                # parent == i
            lambda: start_err([0, 0, 1, 5][:min(tmax, 4)] if tmax >= 4 else [0, 0, 5], toks, "BAD_TREE"),  # > i
            lambda: start_err([0, 0, 2], [0, 1, 1], "BAD_TREE", vocab=0),          # BAD_TREE before BAD_VOCAB
        ]
    cases += [
        lambda: start_err(chain, toks, "BAD_VOCAB", vocab=0),
        lambda: start_err(chain, toks, "BAD_VOCAB", vocab=vmax + 1),
    ]
    if len(chain) > 1:
        cases.append(lambda: start_err(chain, toks[:-1] + [v], "BAD_TOKEN", greedy=False, t=0))  # before BAD_TEMP
    cases += [
        lambda: start_err(chain, toks, "BAD_TEMP", greedy=False, t=0),
        lambda: start_err(chain, toks, "BAD_TEMP", greedy=False, t=0x10000),
        not_errors,
        # EMPTY_ROW: the root's row, a child's row after an accept (greedy and sampling)
        lambda: empty_row(np.stack([empty, rowp]), [0, 0], [0, 1], True),
        lambda: empty_row(np.stack([empty, rowp]), [0, 0], [0, 1], False),
        lambda: empty_row(np.stack([peak, empty]), [0, 0], [0, v - 1], True),
        lambda: empty_row(np.stack([peak, empty]), [0, 0], [0, v - 1], False),
        empty_after_reject,
        unexpected_data,
    ]
    for case in stim.deal(cases):
        await case()
    tb.log.info("tree errors: %s", dict(sorted(tb.tree_kinds.items())))


#: The rounds of :func:`full_vocab_tree` (greedy, INV_TEMP), one per stimulus combination.
FULL_VOCAB_TREE_ROUNDS = ((True, 256), (False, 256), (False, 180), (False, 512))


@cross_test
async def full_vocab_tree(dut, stim: Stimulus):
    """Tree rounds at V = 50257 with a TREE_MAX-node tree: greedy along argmax chains, sampling at three
    temperatures; one round per stimulus combination."""
    tb = await _tb(dut, stim)
    rng = np.random.default_rng(7 + stim.index)
    rnd = random.Random(7 + stim.index)
    vocab = min(50257, tb.vocab_max)
    n = tb.tree_max
    parents = [0] + [rnd.randrange(max(0, j - 4), j) for j in range(1, n)]
    for greedy, inv_temp in stim.deal(FULL_VOCAB_TREE_ROUNDS):
        base = rng.standard_normal(vocab) * 2.0
        base[rng.integers(0, vocab, 8)] += 12.0
        rows = fmt.quantize(np.array([base + rng.standard_normal(vocab) * 0.5 for _ in range(n)]))
        tokens = [0]
        for j in range(1, n):
            r = rows[parents[j]]
            if rnd.random() < 0.5:
                tokens.append(int(np.argmax(r)))
            else:
                tokens.append(int(rng.choice(vocab, p=fmt.fixed_point_dist(r, inv_temp))))
        got = await tb.run_tree(rows, parents, tokens, greedy, inv_temp)
        assert got["err"] == 0
        tb.log.info("V=%d N=%d greedy=%s: path depth %d, next %d", vocab, n, greedy, got["n_accept"],
                    got["next_token"])
    tb.log.info("full vocabulary trees: active cycles / bound %s", [(v, round(r, 5)) for v, r in tb.ratios])


@pytest.mark.parametrize("lanes", [pytest.param(1, marks=pytest.mark.long), 4])
def test_verifier_tree(sim, waves, lanes):
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves, extra_env={} if sim == "verilator" else {"VERIFIER_TREE_ROUNDS": "80"})


@pytest.mark.long
@pytest.mark.icarus(only=True)
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_tree_smoke(sim, waves, lanes):
    """test_verifier_tree on Icarus, fewer rounds (the default suite runs tree rounds on Icarus in
    tests/test_agreement.py)."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves, extra_env={"VERIFIER_TREE_ROUNDS": "80"})


@pytest.mark.long
@pytest.mark.icarus
def test_verifier_tree_small(sim, waves):
    """A small TREE_MAX (BAD_TREE at NODES = 8), LANES 2, a vocabulary that is not a multiple of LANES."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": 2, "VOCAB_MAX": 37, "TREE_MAX": 7},
                waves=waves, extra_env={"VERIFIER_TREE_ROUNDS": "160"})


def test_verifier_tree_full_vocab(sim, waves):
    """The GPT-2/OPT build (VOCAB_MAX 50272, LANES 4, TREE_MAX 64): 64-node trees at V = 50257."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": 4, "VOCAB_MAX": 50272, "TREE_MAX": 64},
                testcase=cross_names("full_vocab_tree"), waves=waves)


@pytest.mark.long
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_tree_long(sim, waves, lanes):
    """4,000 tree rounds per build (1,000 per stimulus combination)."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                testcase=ROUND_TESTS, waves=waves, extra_env={"VERIFIER_TREE_ROUNDS": "4000"})
