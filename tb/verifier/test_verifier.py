"""verifier: cocotb tests of the RTL (fpga/verifier.py) against the golden model (hls_ref.verifier).

The coroutines run inside the simulator; ``test_verifier`` (pytest) builds the core per parameter set and
runs them. Every round's result registers are compared with ``hls_ref.verifier.verify`` fed with the
same xoshiro128++ words the core takes (the RNG state is kept across rounds here, as on the core).

Host protocol used here (what a driver must do): write the configuration, CTRL.START, then stream one
row per AXI-Stream frame. After the row that completes a tested position (q_i in sampling mode, p_i in
greedy mode) poll until ``N_ACCEPT > i`` (accepted: stream the next rows) or ``STATUS.DONE``/``ERROR``.
Streaming ahead after a rejection would raise UNEXPECTED_DATA.

Every test runs four times (tb.common.cross_test): with and without idle cycles on the AXI-Lite master
and the row stream, and with and without backpressure on BREADY/RREADY. Random rounds and the error
cases are dealt across the four, so a build runs each once. The TB classes are in tb.verifier.verifier_tb.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from hls_ref import verifier as gv
from hls_ref.vectors import full_vocab_round, random_chain_round, rng_seed
from hwcontract.board import KV260_VERIFIER
from hwcontract.formats import LOGIT_NEG_INF
from specdec.sim import harness
from tb.common import QUIET, Stimulus, cross_names, cross_test, param
from tb.verifier.verifier_tb import CMAP, RESULTS, VerifierTB, emask

ROUNDS = int(os.environ.get("VERIFIER_ROUNDS", "60"))    # per build, dealt across the four combinations
RANDOM_ROUNDS = cross_names("random_rounds")


async def _tb(dut, stim: Stimulus = QUIET) -> VerifierTB:
    tb = VerifierTB(dut, stim)
    await tb.reset()
    await tb.seed(tb.state)
    return tb


@cross_test
async def registers(dut, stim: Stimulus):
    """ID, PARAMS and VOCAB_MAX (the build's parameters) and the reset state."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    built = {n: param(n) for n in ("LANES", "GAMMA_MAX", "TREE_MAX", "VOCAB_MAX")}
    assert (tb.lanes, tb.gamma_max, tb.tree_max, tb.vocab_max) == tuple(built.values()), built
    for name in ("CUR_NODE", "PATH_LO", "PATH_HI"):
        assert await tb.read(name) == 0, name
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.s_axis_tready.value == 1


@cross_test
async def random_rounds(dut, stim: Stimulus):
    """Random greedy and sampling rounds (this combination's share of ROUNDS), every result register
    against the golden model."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(1000 + tb.lanes + 7 * stim.index)
    n_acc = n_rounds = 0
    for k in range(stim.share(ROUNDS)):
        r = random_chain_round(rnd, tb.vocab_max, tb.gamma_max)
        got = await tb.run_round(r.p, r.q, r.draft, r.greedy, r.inv_temp)
        n_acc += got["n_accept"]
        n_rounds += 1
    r = np.array([x for _, x in tb.ratios])
    rf = np.array([x for v, x in tb.ratios if v == tb.vocab_max] or [np.nan])
    tb.log.info("lanes=%d %s: %d rounds, %d accepted drafts; active cycles / bound: mean %.3f max %.3f; "
                "at V=VOCAB_MAX mean %.3f max %.3f", tb.lanes, stim, n_rounds, n_acc, r.mean(), r.max(),
                rf.mean(), rf.max())
    tb.log.info("paths: %s", tb.kinds)
    assert n_acc > 0


async def _recover(tb: VerifierTB, rnd: np.random.Generator) -> None:
    """SOFT_RESET, check ERR cleared and the configuration kept, re-seed, then one correct round."""
    gamma = await tb.read("GAMMA")
    await tb.write("CTRL", SOFT_RESET=1)
    assert await tb.read("ERR") == 0
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert await tb.read("GAMMA") == gamma
    await tb.seed(rng_seed(rnd))
    r = random_chain_round(rnd, tb.vocab_max, tb.gamma_max, greedy=bool(rnd.random() < 0.5))
    got = await tb.run_round(r.p, r.q, r.draft, r.greedy, r.inv_temp)
    assert got["err"] == 0


@cross_test
async def error_cases(dut, stim: Stimulus):
    """Each error sets its ERR bit and STATUS.ERROR; SOFT_RESET recovers for a correct round. The cases
    are dealt across the four stimulus combinations."""
    tb = await _tb(dut, stim)
    rnd = np.random.default_rng(77 + stim.index)
    L, vmax, gmax = tb.lanes, tb.vocab_max, tb.gamma_max
    v = max(2 * L + 1, 5) if vmax >= max(2 * L + 1, 5) else vmax
    rowp = np.arange(v, dtype=np.int64) * 7 - 100
    nb = -(-v // L)

    async def start_err(p, q, draft, greedy, t, name, gamma=None, vocab=None):
        await tb.configure(p.shape[1] if vocab is None else vocab, draft, greedy, t, gamma=gamma)
        await tb.write("CTRL", START=1)
        st = await tb.read_fields("STATUS")
        assert st == {"BUSY": 0, "DONE": 0, "ERROR": 1}, (name, st)
        assert await tb.read("ERR") == emask(name), name
        for r in RESULTS[:-1]:
            assert await tb.read(r) == 0, (name, r)
        await _recover(tb, rnd)

    async def bad_gamma():
        """GAMMA above GAMMA_MAX; the golden model agrees."""
        d = gv.verify(np.zeros((1, v)), None, [0] * (gmax + 1), greedy=True, inv_temp=256, words=None, lanes=L,
                      vocab_max=vmax, gamma_max=gmax)
        assert d.err == emask("BAD_GAMMA")
        await start_err(p1, None, [0] * min(gmax, 16), True, 256, "BAD_GAMMA", gamma=gmax + 1)

    async def bad_length(name, nbeats):
        """A row one beat short or long; LONG_ROW: the beat after the row's last arrives while in error,
        which adds UNEXPECTED_DATA."""
        await tb.configure(v, [0], False, 256)
        await tb.write("CTRL", START=1)
        await tb.send(tb.beats(rowp, nbeats))
        st = await tb.read_fields("STATUS")
        assert st["ERROR"] == 1 and st["BUSY"] == 0, (name, st)
        err = await tb.read("ERR")
        want = emask(name) | (emask("UNEXPECTED_DATA") if name == "LONG_ROW" else 0)
        assert err == want, (name, hex(err))
        await _recover(tb, rnd)

    async def unexpected_data():
        """A row while idle, TREADY stays high; a second one is still accepted (dropped), no hang."""
        await tb.send(tb.beats(rowp))
        assert await tb.read("ERR") == emask("UNEXPECTED_DATA")
        assert (await tb.read_fields("STATUS"))["ERROR"] == 1
        await tb.send(tb.beats(rowp))
        await _recover(tb, rnd)

    async def empty_row(p, q, draft, greedy):
        """EMPTY_ROW where the golden model has it (else a correct round)."""
        got = await tb.run_round(p, q, draft, greedy, 256)
        if got["err"] == emask("EMPTY_ROW"):
            await _recover(tb, rnd)
        else:
            assert got["err"] == 0

    p1 = rowp[None, :]
    p2, p3, q1 = np.tile(rowp, (2, 1)), np.tile(rowp, (3, 1)), np.tile(rowp, (1, 1))
    empty = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    top = int(np.argmax(rowp))
    cases = [
        bad_gamma,
        lambda: start_err(p1, None, [], True, 256, "BAD_VOCAB", vocab=0),
        lambda: start_err(p1, None, [], True, 256, "BAD_VOCAB", vocab=vmax + 1),
        lambda: start_err(p3, None, [0, v], True, 256, "BAD_TOKEN"),            # x_1 = V (x_0 fine)
        lambda: start_err(p2, q1, [1], False, 0, "BAD_TEMP"),                   # sampling with INV_TEMP = 0
        lambda: start_err(p2, q1, [1], False, 0x10000, "BAD_TEMP"),             # outside Q8.8: no low 16 bits
        lambda: start_err(p2, q1, [v], False, 0, "BAD_TOKEN"),                  # BAD_TOKEN before BAD_TEMP
        *[lambda n=n, k=k: bad_length(n, k) for n, k in (("SHORT_ROW", nb - 1), ("LONG_ROW", nb + 1)) if k >= 1],
        unexpected_data,
        # EMPTY_ROW: p_0 empty, q_0 empty, bonus row empty, greedy row empty, and the bonus row empty after
        # an accepted position (identical p/q and a token accepted for sure, u < 1)
        lambda: empty_row(np.stack([empty, rowp]), np.stack([rowp]), [1], False),
        lambda: empty_row(np.stack([rowp, rowp]), np.stack([empty]), [1], False),
        lambda: empty_row(np.stack([rowp]), None, [], False),
        lambda: empty_row(np.stack([empty]), None, [], False),
        lambda: empty_row(np.stack([rowp, empty]), None, [top], True),
        lambda: empty_row(np.stack([rowp, empty]), np.stack([rowp]), [top], False),
    ]
    for case in stim.deal(cases):
        await case()
    assert (await tb.read_fields("STATUS"))["ERROR"] == 0


FULL_VOCABS = (49152, 50257, 50272)
#: Every (vocabulary, kind) pair, 12 rounds (under ``long``); else 4 rounds, every kind once, every vocabulary.
FULL_VOCAB_ALL = os.environ.get("VERIFIER_FULL_VOCAB_ALL") == "1"


@cross_test
async def full_vocab(dut, stim: Stimulus):
    """Rounds at V = 49152, 50257 and 50272 (those <= VOCAB_MAX), every register against the golden model;
    the (V, kind) rounds are dealt across the four stimulus combinations."""
    tb = await _tb(dut, stim)
    rng = np.random.default_rng(tb.lanes + stim.index)
    kinds = (("sample", 2), ("topk", 1), ("greedy", 2), ("last", 1))
    vocabs = [v for v in FULL_VOCABS if v <= tb.vocab_max]
    if FULL_VOCAB_ALL:
        rounds = [(vocab, kind, g) for vocab in vocabs for kind, g in kinds]
    else:       # every kind once, the vocabularies in turn: one round per stimulus combination
        rounds = [(vocabs[i % len(vocabs)], *kind) for i, kind in enumerate(kinds)] if vocabs else []
    for vocab, kind, g in stim.deal(rounds):
        p, q, draft = full_vocab_round(rng, vocab, g, kind)
        got = await tb.run_round(p, None if kind == "greedy" else q, draft, kind == "greedy", 256)
        assert got["err"] == 0
    tb.log.info("full vocabulary: active cycles / bound %s", [(v, round(r, 5)) for v, r in tb.ratios])
    tb.log.info("paths: %s", tb.kinds)


@pytest.mark.parametrize("lanes", [pytest.param(1, marks=pytest.mark.long), 4])
def test_verifier(sim, waves, lanes):
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves)


@pytest.mark.long
@pytest.mark.icarus(only=True)
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_smoke(sim, waves, lanes):
    """test_verifier on Icarus (the default suite runs the verifier on Icarus in tests/test_agreement.py)."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves)


@pytest.mark.long
@pytest.mark.parametrize("params", [{"LANES": 8, "VOCAB_MAX": 37, "GAMMA_MAX": 5},
                                    {"LANES": 2, "VOCAB_MAX": 200, "GAMMA_MAX": 16}])
def test_verifier_params(sim, waves, params):
    """Other build parameters: a vocabulary that is not a multiple of LANES, a smaller GAMMA_MAX."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params=params, waves=waves)


def test_verifier_full_vocab(sim, waves):
    """The build for GPT-2/OPT (VOCAB_MAX 50272, 4 lanes) at full vocabularies: block-RAM row buffers
    split in a main part and a tail (fpga.verifier.row_buffer)."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": 4, "VOCAB_MAX": 50272},
                testcase=cross_names("full_vocab"), waves=waves)


@pytest.mark.icarus(long=True)
def test_verifier_kv260_build(sim, waves):
    """The KV260's build (``hwcontract.board.KV260_VERIFIER``: 8 lanes, VOCAB_MAX 50272, each row buffer one
    UltraRAM memory of 6,284 beats with no tail split) at full vocabularies: the same rounds, bit for bit."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params=dict(KV260_VERIFIER),
                testcase=cross_names("full_vocab"), waves=waves)


@pytest.mark.long
def test_verifier_full_vocab_every_kind(sim, waves):
    """The same build, every round kind at every full vocabulary (12 rounds; the default suite runs 4)."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": 4, "VOCAB_MAX": 50272},
                testcase=cross_names("full_vocab"), waves=waves, extra_env={"VERIFIER_FULL_VOCAB_ALL": "1"})


@pytest.mark.long
@pytest.mark.icarus
def test_verifier_split_buffer(sim, waves):
    """VOCAB_MAX 4200 at 4 lanes: 1050-beat buffers, split into 1024 + 26; V drawn up to 4200."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": 4, "VOCAB_MAX": 4200},
                testcase=cross_names("random_rounds", "error_cases"), waves=waves,
                extra_env={"VERIFIER_ROUNDS": "20" if sim == "verilator" else "8"})


@pytest.mark.long
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_10k(sim, waves, lanes):
    """10,000 random rounds per build (2,500 per stimulus combination)."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                testcase=RANDOM_ROUNDS, waves=waves, extra_env={"VERIFIER_ROUNDS": "10000"})
