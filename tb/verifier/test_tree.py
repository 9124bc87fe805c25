"""verifier tree mode: cocotb tests of the RTL (fpga/verifier.py) against ``hls_ref.verifier.verify_tree``.

Every tree round's result registers (CUR_NODE and PATH_LO/HI included) are compared with the golden model
fed with the xoshiro128++ words the core takes; chain rounds (tb.verifier.test_verifier) run in between
with the RNG state carried over. ``CYCLES_BUSY - CYCLES_STALL`` is asserted equal to
``hls_ref.verifier.tree_rtl_cycles`` on every completed round.

Host protocol used here (what a driver must do in tree mode): write CONFIG (TREE = 1), NODES, VOCAB,
INV_TEMP, TREE_PARENT*, TREE_TOKEN*, then CTRL.START. Stream the row of node 0. After each row, poll
until ``N_ACCEPT`` exceeds the number of rows streamed minus one (a child was accepted: read CUR_NODE
and stream that node's row) or ``STATUS.DONE``/``ERROR``. Do not write the tree registers while BUSY.
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
import pytest

from hls_ref import rng as golden_rng
from hls_ref import verifier as gv
from hwcontract.formats import LOGIT_NEG_INF
from hwcontract.regmap import TREE_MAX_NODES
from specdec.tree import parents_from_paths
from specdec.backends import simulator as harness
from tb.common import STIMULUS, param
from tb.verifier.test_verifier import FIELDS, RESULTS, VerifierTB, _row, emask, make_round

ROUNDS = int(os.environ.get("VERIFIER_TREE_ROUNDS", "80"))    # per stimulus mode
TREE_FIELDS = FIELDS + ("node", "path_lo", "path_hi")
TREE_RESULTS = RESULTS + ("CUR_NODE", "PATH_LO", "PATH_HI")
CHAIN3 = [(0,), (0, 0), (0, 0, 0)]
MEDUSA = [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
# cocotb names a parametrized test "<name>/<param>=<value>" and the runner's filter anchors at the end
ROUND_TESTS = "tree_rounds/idle=none,tree_rounds/idle=random"

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


class Recorder:
    """Rows by node that remember which nodes the golden model asked for, in order."""

    def __init__(self, rows) -> None:
        self.rows, self.asked = rows, []

    def __getitem__(self, v):
        self.asked.append(int(v))
        return self.rows[v]


class TreeTB(VerifierTB):
    def __init__(self, dut, idle: str = "none") -> None:
        super().__init__(dut, idle)
        self.tree_max = param("TREE_MAX", 64)
        self.poll_limit += 8 * self.tree_max
        if STIMULUS[idle]:
            self.set_idle_generator(STIMULUS[idle])
            self.set_backpressure_generator(STIMULUS[idle])
        self.tree_kinds: dict[str, int] = {}

    async def configure_tree(self, vocab, parents, tokens, greedy, inv_temp, nodes=None) -> None:
        """CONFIG (TREE = 1), NODES, VOCAB, INV_TEMP and the parent/token words the tree uses."""
        n = len(parents) if nodes is None else nodes
        await self.write("CONFIG", GREEDY=int(greedy), TREE=1)
        await self.write("NODES", n)
        await self.write("VOCAB", vocab)
        await self.write("INV_TEMP", inv_temp)
        par = [0] + [int(x) & 0xFF for x in parents[1:TREE_MAX_NODES]]
        tok = [0] + [int(x) for x in tokens[1:TREE_MAX_NODES]]
        par += [0] * (-len(par) % 4)
        tok += [0] * (-len(tok) % 2)
        for k in range(len(par) // 4):
            await self.write(f"TREE_PARENT{k}", sum(par[4 * k + j] << (8 * j) for j in range(4)))
        for k in range(len(tok) // 2):
            await self.write(f"TREE_TOKEN{k}", tok[2 * k] | (tok[2 * k + 1] << 16))

    async def wait_row(self, depth: int) -> dict:
        """Poll after a row streamed at path depth ``depth``: a child accepted, or the round stopped."""
        for _ in range(self.poll_limit):
            st = await self.read_fields("STATUS")
            if st["DONE"] or st["ERROR"]:
                return st
            if await self.read("N_ACCEPT") > depth:
                return st
        raise AssertionError(f"the row at depth {depth} was never decided")

    async def tree_results(self) -> dict:
        return {f: await self.read(r) for f, r in zip(TREE_FIELDS, TREE_RESULTS)}

    async def run_tree(self, rows, parents, tokens, greedy, inv_temp, check=True) -> dict:
        """One tree round as a host streams it; every result register against ``verify_tree``."""
        rows = np.asarray(rows)
        vocab = rows.shape[1]
        n = len(parents)
        await self.configure_tree(vocab, parents, tokens, greedy, inv_temp)
        await self.write("CTRL", START=1)
        st = await self.read_fields("STATUS")
        streamed = []
        if not st["ERROR"]:
            v = depth = 0
            while True:
                assert await self.read("CUR_NODE") == v
                await self.send(self.beats(rows[v]))
                streamed.append(v)
                st = await self.wait_row(depth)
                if st["DONE"] or st["ERROR"]:
                    break
                depth += 1
                v = await self.read("CUR_NODE")
                assert parents[v] == streamed[-1], f"CUR_NODE {v} is not a child of node {streamed[-1]}"
        got = await self.tree_results()
        words, _ = golden_rng.xoshiro128pp(self.state, n + 2)
        rec = Recorder(rows)
        want = gv.verify_tree(rec, parents, tokens, greedy=greedy, inv_temp=inv_temp, words=words,
                              lanes=self.lanes, vocab_max=self.vocab_max, tree_max=self.tree_max)
        if want.words:
            self.state = golden_rng.xoshiro128pp(self.state, want.words)[1]
        exp = {f: int(getattr(want, f)) for f in FIELDS}
        exp.update(node=want.node, path_lo=want.path & 0xFFFFFFFF, path_hi=want.path >> 32)
        kind = ("error" if want.err else "greedy" if greedy else "sample") + f"_depth{min(want.n_accept, 3)}"
        self.tree_kinds[kind] = self.tree_kinds.get(kind, 0) + 1
        if check:
            ctx = f"V={vocab} N={n} greedy={greedy} T={inv_temp} parents={list(parents)} tokens={list(tokens)}"
            assert got == exp, f"{ctx}\n got {got}\nwant {exp}"
            # verify_tree reads rows[0] once for V before the walk asks for rows
            assert streamed == rec.asked[1:], f"{ctx}: streamed nodes {streamed}, golden asked {rec.asked[1:]}"
            st = await self.read_fields("STATUS")
            assert st == {"BUSY": 0, "DONE": int(want.err == 0), "ERROR": int(want.err != 0)}, st
            if want.err == 0:
                active = await self.read("CYCLES_BUSY") - await self.read("CYCLES_STALL")
                model = gv.tree_rtl_cycles(want, vocab, self.lanes, greedy)
                assert active == model, f"{ctx}: active cycles {active} != tree_rtl_cycles {model}"
                nb = -(-vocab // self.lanes)
                self.ratios.append((vocab, active / (want.rows * nb + want.sample_beats)))
        return got


def make_tree(rnd: random.Random, vocab_max: int, tree_max: int, greedy: bool, n: int | None = None,
              parents=None, vocab: int | None = None):
    """A random tree and its rows: tokens often hit the parent row's argmax (greedy) or are drawn from it
    (sampling), so paths get long; sibling duplicates are planted."""
    v = vocab or rnd.choice([1, 2, 3, rnd.randint(1, vocab_max), rnd.randint(1, vocab_max), vocab_max])
    if parents is None:
        n = n or rnd.choice([1, 2, rnd.randint(1, tree_max), rnd.randint(1, tree_max), tree_max])
        style = rnd.choice(["random", "deep", "wide", "chain", "bushy"])
        parents = [0]
        for j in range(1, n):
            parents.append({"random": rnd.randrange(j), "deep": max(0, j - rnd.randint(1, 2)),
                            "wide": rnd.randrange(min(j, 2)), "chain": j - 1,
                            "bushy": rnd.randrange(max(1, j // 3), j) if j > 1 else 0}[style])
    n = len(parents)
    scale = rnd.choice([0.5, 2.0, 5.0, 40.0])
    mask_p = rnd.choice([0.0, 0.0, 0.3, 0.8])
    rows = np.array([_row(rnd, np.array([rnd.gauss(0, scale) for _ in range(v)]), 0.0, mask_p)
                     for _ in range(n)], dtype=np.int64).reshape(n, v)
    inv_temp = rnd.choice([256, 256, 128, 512, 64, rnd.randint(1, 1024), 65535, 1])
    tokens = [0]
    for j in range(1, n):
        r = rows[parents[j]]
        sibs = [tokens[k] for k in range(1, j) if parents[k] == parents[j]]
        u = rnd.random()
        if sibs and u < 0.15:
            tokens.append(rnd.choice(sibs))                 # a duplicate sibling
        elif u < 0.75:
            if greedy:
                tokens.append(int(np.argmax(r)))
            else:
                w = gv.fixed_point_dist(r, inv_temp)
                tokens.append(min(int(np.searchsorted(np.cumsum(w), rnd.random() * w.sum(), side="right")), v - 1))
        else:
            tokens.append(rnd.randrange(v))
    return rows, parents, tokens, inv_temp


async def _tb(dut, idle="none") -> TreeTB:
    tb = TreeTB(dut, idle)
    await tb.reset()
    await tb.seed(tb.state)
    return tb


@cocotb.test()
@cocotb.parametrize(idle=["none", "random"])
async def tree_rounds(dut, idle):
    """Random trees (greedy and sampling) mixed with chain rounds, one RNG stream across both."""
    tb = await _tb(dut, idle)
    rnd = random.Random(2000 + tb.lanes + (5 if idle != "none" else 0))
    deepest = 0
    for k in range(ROUNDS):
        greedy = rnd.random() < 0.4
        if rnd.random() < 0.2:
            p, q, draft, t = make_round(rnd, tb.vocab_max, tb.gamma_max, greedy)
            await tb.run_round(p, q, draft, greedy, t)
            continue
        rows, parents, tokens, t = make_tree(rnd, tb.vocab_max, tb.tree_max, greedy)
        got = await tb.run_tree(rows, parents, tokens, greedy, t)
        deepest = max(deepest, got["n_accept"])
    tb.log.info("tree rounds (lanes=%d idle=%s): deepest path %d; %s; chain paths %s", tb.lanes, idle, deepest,
                dict(sorted(tb.tree_kinds.items())), tb.kinds)
    assert deepest >= min(3, tb.tree_max - 1)


@cocotb.test()
async def named_trees(dut):
    """The 3-chain and the Medusa tree via specdec.tree.parents_from_paths, greedy and sampling, with
    tokens that follow the rows' argmax (full acceptance) and tokens that miss."""
    tb = await _tb(dut)
    rnd = random.Random(31)
    for paths in (CHAIN3, MEDUSA):
        parents = [0] + list(parents_from_paths(paths)[1:])
        if len(parents) > tb.tree_max:
            continue
        for greedy in (True, False):
            for trial in range(6):
                rows, _, tokens, t = make_tree(rnd, tb.vocab_max, tb.tree_max, greedy, parents=parents,
                                               vocab=min(tb.vocab_max, 24))
                if trial < 2:       # every child's token is its parent row's argmax: deep accepted paths
                    tokens = [0] + [int(np.argmax(rows[p])) for p in parents[1:]]
                await tb.run_tree(rows, parents, tokens, greedy, 256 if trial < 3 else t)
    tb.log.info("named trees: %s", dict(sorted(tb.tree_kinds.items())))


async def _recover(tb: TreeTB, rnd: random.Random) -> None:
    """SOFT_RESET, ERR cleared and the tree registers kept, re-seed, then one correct tree round."""
    nodes = await tb.read("NODES")
    await tb.write("CTRL", SOFT_RESET=1)
    assert await tb.read("ERR") == 0
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert await tb.read("NODES") == nodes
    await tb.seed([rnd.getrandbits(32) | 1 for _ in range(4)])
    greedy = rnd.random() < 0.5
    rows, parents, tokens, t = make_tree(rnd, tb.vocab_max, tb.tree_max, greedy)
    got = await tb.run_tree(rows, parents, tokens, greedy, t)
    assert got["err"] == 0


@cocotb.test()
async def tree_errors(dut):
    """BAD_TREE (N = 0, N = TREE_MAX + 1, parent == i, parent > i), the start checks' order, BAD_TOKEN,
    EMPTY_ROW (empty root row, empty child row, every weight rejected), UNEXPECTED_DATA, a soft reset
    in the middle of a round; SOFT_RESET recovers from each."""
    tb = await _tb(dut)
    rnd = random.Random(99)
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
    await start_err([0], [0], "BAD_TREE", nodes=0)
    await start_err([0] + list(range(tmax - 1)), [0] * tmax, "BAD_TREE", nodes=tmax + 1)   # N = TREE_MAX + 1
    if tmax >= 3:
        await start_err([0, 0, 2], [0, 1, 1], "BAD_TREE")                            # parent == i
        await start_err([0, 0, 1, 5][:min(tmax, 4)] if tmax >= 4 else [0, 0, 5], toks, "BAD_TREE")  # parent > i
        await start_err([0, 0, 2], [0, 1, 1], "BAD_TREE", vocab=0)                   # BAD_TREE before BAD_VOCAB
    await start_err(chain, toks, "BAD_VOCAB", vocab=0)
    await start_err(chain, toks, "BAD_VOCAB", vocab=vmax + 1)
    if len(chain) > 1:
        await start_err(chain, toks[:-1] + [v], "BAD_TOKEN", greedy=False, t=0)       # BAD_TOKEN before BAD_TEMP
    await start_err(chain, toks, "BAD_TEMP", greedy=False, t=0)
    await start_err(chain, toks, "BAD_TEMP", greedy=False, t=0x10000)
    # Not errors: GAMMA above GAMMA_MAX is ignored in tree mode, a token past NODES is not checked
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

    # EMPTY_ROW: the root's row, a child's row after an accept (greedy and sampling), all weight rejected
    empty = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    peak = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    peak[v - 1] = 0                                 # one live token: its child is accepted for sure
    cases = [(np.stack([empty, rowp]), [0, 0], [0, 1], True),
             (np.stack([empty, rowp]), [0, 0], [0, 1], False),
             (np.stack([peak, empty]), [0, 0], [0, v - 1], True),
             (np.stack([peak, empty]), [0, 0], [0, v - 1], False)]
    for rows, parents, tokens, greedy in cases:
        got = await tb.run_tree(rows, parents, tokens, greedy, 256)
        assert got["err"] == emask("EMPTY_ROW"), got
        await _recover(tb, rnd)
    z, seed = EMPTY_AFTER_REJECT[L]
    if len(z) <= vmax and tmax >= 2:
        z = np.array(z, dtype=np.int64)
        m, _ = gv.row_stats(z, L)
        live = [int(x) for x in np.nonzero(gv._weights(z, m))[0]]
        parents, tokens = [0] * (len(live) + 1), [0] + live
        if len(parents) <= tmax:
            await tb.seed(seed)
            got = await tb.run_tree(z[None, :], parents, tokens, False, 256)
            assert got["err"] == emask("EMPTY_ROW") and got["words"] == len(live), got
            await _recover(tb, rnd)

    # UNEXPECTED_DATA: a row after a finished tree round
    await tb.run_tree(rowp[None, :], [0], [0], True, 256)
    await tb.send(tb.beats(rowp))
    assert await tb.read("ERR") == emask("UNEXPECTED_DATA")
    await _recover(tb, rnd)
    tb.log.info("tree errors: %s", dict(sorted(tb.tree_kinds.items())))


@cocotb.test()
async def full_vocab_tree(dut):
    """Tree rounds at V = 50257 with a TREE_MAX-node tree: greedy along argmax chains, sampling."""
    tb = await _tb(dut)
    rng = np.random.default_rng(7)
    rnd = random.Random(7)
    vocab = min(50257, tb.vocab_max)
    n = tb.tree_max
    parents = [0] + [rnd.randrange(max(0, j - 4), j) for j in range(1, n)]
    for greedy, inv_temp in ((True, 256), (False, 256), (False, 180)):
        base = rng.standard_normal(vocab) * 2.0
        base[rng.integers(0, vocab, 8)] += 12.0
        rows = gv.quantize(np.array([base + rng.standard_normal(vocab) * 0.5 for _ in range(n)]))
        tokens = [0]
        for j in range(1, n):
            r = rows[parents[j]]
            if rnd.random() < 0.5:
                tokens.append(int(np.argmax(r)))
            else:
                tokens.append(int(rng.choice(vocab, p=gv.fixed_point_dist(r, inv_temp))))
        got = await tb.run_tree(rows, parents, tokens, greedy, inv_temp)
        assert got["err"] == 0
        tb.log.info("V=%d N=%d greedy=%s: path depth %d, next %d", vocab, n, greedy, got["n_accept"],
                    got["next_token"])
    tb.log.info("full vocabulary trees: active cycles / bound %s", [(v, round(r, 5)) for v, r in tb.ratios])


@pytest.mark.icarus
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_tree(sim, waves, lanes):
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves, extra_env={} if sim == "verilator" else {"VERIFIER_TREE_ROUNDS": "40"})


@pytest.mark.icarus
def test_verifier_tree_small(sim, waves):
    """A small TREE_MAX (BAD_TREE at NODES = 8), LANES 2, a vocabulary that is not a multiple of LANES."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": 2, "VOCAB_MAX": 37, "TREE_MAX": 7},
                waves=waves, extra_env={"VERIFIER_TREE_ROUNDS": "40"})


def test_verifier_tree_full_vocab(sim, waves):
    """The GPT-2/OPT build (VOCAB_MAX 50272, LANES 4, TREE_MAX 64): 64-node trees at V = 50257."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": 4, "VOCAB_MAX": 50272, "TREE_MAX": 64},
                testcase="full_vocab_tree", waves=waves)


@pytest.mark.long
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_tree_long(sim, waves, lanes):
    """2,000 tree rounds per stimulus mode."""
    harness.run("verifier", "tb.verifier.test_tree", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                testcase=ROUND_TESTS, waves=waves, extra_env={"VERIFIER_TREE_ROUNDS": "2000"})
