"""verifier RTL losslessness: the first token emitted through the core, with its own hardware RNG, follows the
target's fixed-point distribution (chi-square at a false-alarm rate of 1e-3, tb.verifier.lossless).

Draft tokens are drawn on the host from the draft's fixed-point distribution; the core decides with the
xoshiro128++ words it draws itself, so this tests the RTL's RNG, accept test and residual sampler together.
Both tests run under the idle x backpressure cross (tb.common.cross_test): each combination runs a quarter
of the trials from its own RNG seed and passes the chi-square checks on its own.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from hwcontract import formats as fmt
from specdec.sim import harness
from hls_ref.vectors import TREE_PARENTS, make_family, make_tree_case
from tb.verifier.lossless import ALPHA, check_tree_lossless, chi2_pvalue, tree_emitted
from tb.common import Stimulus, cross_test
from tb.verifier.verifier_tb import TreeTB, VerifierTB

# (family, V, trials per build, inv_temp); gamma 1: the first token is x_0 when accepted, else the resample
CASES = (("random", 16, 6000, 256), ("disjoint", 12, 2000, 256), ("peaked_q", 8, 2000, 256))
SCALE = float(os.environ.get("LOSSLESS_SCALE", "1"))


@cross_test
async def lossless(dut, stim: Stimulus):
    """The first token of gamma-1 rounds, per family of CASES (this combination's share of its trials)."""
    tb = VerifierTB(dut, stim)
    await tb.reset()
    await tb.seed([0xDEADBEEF + stim.index, 0x01234567, 0x89ABCDEF, 0x0BADF00D])
    rng = np.random.default_rng(2026 + stim.index)
    for family, vocab, trials, inv_temp in CASES:
        trials = stim.share(int(trials * SCALE))
        p, q = make_family(family, vocab, rng, 1)
        target = fmt.fixed_point_dist(p[0], inv_temp)
        qdist = fmt.fixed_point_dist(q[0], inv_temp)
        drafts = rng.choice(vocab, size=trials, p=qdist)
        await tb.configure(vocab, [0], False, inv_temp)
        frames = [tb.beats(p[0]), tb.beats(q[0]), tb.beats(p[1])]
        counts = np.zeros(vocab, dtype=np.int64)
        for x in drafts.tolist():
            await tb.write("DRAFT0", x)
            await tb.write("CTRL", START=1)
            await tb.send(frames[0])
            await tb.send(frames[1])
            st = await tb.wait_position(0)
            assert not st["ERROR"], st
            if st["DONE"]:
                counts[await tb.read("NEXT_TOKEN")] += 1
            else:                               # accepted: the bonus row ends the round
                await tb.send(frames[2])
                st = await tb.wait_stop()
                assert st["DONE"] and not st["ERROR"], st
                counts[x] += 1
        pv = chi2_pvalue(counts, target)
        tb.log.info("%s V=%d: %d trials through the RTL, chi-square p-value %.3g", family, vocab, trials, pv)
        assert pv > ALPHA, f"{family} V={vocab}: first-token p-value {pv:.2e} (alpha {ALPHA})"
        if family in ("random", "peaked_q", "disjoint"):
            # negative control: the same counts must not pass as the draft's distribution
            assert chi2_pvalue(counts, qdist) < ALPHA, f"{family}: the test cannot tell p from q"


TREE_TRIALS = 3000          # per build
#: Fewest samples for a conditional (second-token) check: a quarter of TREE_TRIALS gives root children 1
#: and 2 (p 0.38 and 0.21 at the root) about 290 and 160.
TREE_MIN_SAMPLES = 100


@cross_test
async def tree_lossless(dut, stim: Stimulus):
    """Tree mode through the RTL with its own RNG: the fixed tree of hls_ref.vectors (three root
    children, one a duplicate, two grandchildren); the first emitted token follows p of the root, the
    second, given the first is root child c's token, follows p of c (this combination's share of
    TREE_TRIALS, the same tree in every combination, its own RNG seed)."""
    tb = TreeTB(dut, stim)
    await tb.reset()
    await tb.seed([0x0BADCAFE + stim.index, 0x13579BDF, 0x2468ACE0, 0x7F4A7C15])
    rng = np.random.default_rng(77)
    vocab, inv_temp = 12, 256
    rows, tokens = make_tree_case(vocab, rng, inv_temp)
    await tb.configure_tree(vocab, TREE_PARENTS, tokens, False, inv_temp)
    frames = [tb.beats(r) for r in rows]
    emitted = []
    for _ in range(stim.share(int(TREE_TRIALS * SCALE))):
        await tb.write("CTRL", START=1)
        v = depth = 0
        while True:
            await tb.send(frames[v])
            st = await tb.wait_row(depth)
            assert not st["ERROR"], st
            if st["DONE"]:
                break
            depth += 1
            v = await tb.read("CUR_NODE")
        emitted.append(tree_emitted(await tb.read("PATH_LO"), await tb.read("NEXT_TOKEN"), tokens))
    pvals = check_tree_lossless(emitted, rows, tokens, inv_temp, min_samples=TREE_MIN_SAMPLES)
    tb.log.info("tree V=%d: %d rounds through the RTL, chi-square p-values %s", vocab, len(emitted),
                {k: round(p, 4) for k, p in pvals.items()})
    assert {"second|node1", "second|node2"} <= set(pvals), pvals


@pytest.mark.long
def test_verifier_lossless(sim, waves):
    """10,000 chain rounds through the RTL (6,000 on one family) and 3,000 tree rounds; Verilator by default.
    Under ``long``: the default suite checks the RTL bit for bit against the golden model
    (tests/test_agreement.py), whose losslessness tests/test_verifier_golden.py checks."""
    harness.run("verifier", "tb.verifier.test_lossless", sim, params={"LANES": 4, "VOCAB_MAX": 64}, waves=waves)


@pytest.mark.long
def test_verifier_lossless_long(sim, waves):
    """Five times the trials (50,000 chain rounds, 15,000 tree rounds)."""
    harness.run("verifier", "tb.verifier.test_lossless", sim, params={"LANES": 4, "VOCAB_MAX": 64}, waves=waves,
                extra_env={"LOSSLESS_SCALE": "5"})
