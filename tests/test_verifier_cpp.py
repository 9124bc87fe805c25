"""The C++ reference of the verifier core (hls_ref/cpp/verifier.cpp): its tables and the cases the agreement
flow (tests/test_agreement.py, random rounds through every stage) does not reach: start errors in spec order,
missing words and rows, full vocabularies, directed corners."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hls_ref import treemask as tm
from hls_ref import verifier as golden
from hls_ref.vectors import chain_round, tree_round
from hwcontract.formats import LOGIT_NEG_INF, quantize
from hwcontract.regmap import core

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

from hls_ref import cpp  # noqa: E402
from specdec.app import runner

ERR = {name: core("verifier").reg("ERR").field(name).mask
       for name in ("BAD_GAMMA", "BAD_VOCAB", "BAD_TOKEN", "BAD_TEMP", "EMPTY_ROW")}
FIELDS = cpp.VERIFIER_FIELDS


def compare(p, q, draft, **kw) -> dict:
    want = golden.verify(p, q, draft, **kw)
    got = cpp.verifier_round(p, q, draft, **kw)
    want_d = {k: int(getattr(want, k)) for k in FIELDS}
    assert got == want_d, f"C++ {got} != golden {want_d} for draft={draft} kw={kw}"
    return got


def test_tables_match_numpy():
    eh, el = cpp.verifier_tables()
    k = np.arange(256)
    j = np.arange(16)
    eh_x = 32768 * np.exp(-16 * k / 256)
    el_x = 32768 * np.exp(-j / 256)
    # No entry sits on a .5 tie, so round-half-even (numpy) and any round-to-nearest agree.
    assert np.abs(eh_x - np.floor(eh_x) - 0.5).min() > 1e-6
    assert np.abs(el_x - np.floor(el_x) - 0.5).min() > 1e-6
    np.testing.assert_array_equal(eh, np.round(eh_x).astype(np.int64))
    np.testing.assert_array_equal(el, np.round(el_x).astype(np.int64))
    assert eh[0] == el[0] == 32768


def test_exp_edges():
    eh, el = cpp.verifier_tables()
    assert cpp.verifier_exp(0) == 32768
    for d in (1, 15, 16, 17, 255, 1000, 4095):
        assert cpp.verifier_exp(d) == (int(eh[d >> 4]) * int(el[d & 15]) + 16384) >> 15
    assert cpp.verifier_exp(4096) == 0 and cpp.verifier_exp(65534) == 0


def test_id_hash():
    assert cpp.verifier_id_hash() == core("verifier").map_hash()


def test_start_errors_in_spec_order():
    rng = np.random.default_rng(7)
    r = chain_round(rng, 16, 4, False, mask_frac=0.0)
    p, q, draft = r.p, r.q, list(r.draft)
    words = [1, 2, 3, 4, 5]
    cases = [  # (kwargs overrides, draft, expected ERR)
        (dict(gamma_max=3, vocab_max=8, inv_temp=0), [99, 0, 0, 0], "BAD_GAMMA"),
        (dict(vocab_max=8, inv_temp=0), [99, 0, 0, 0], "BAD_VOCAB"),
        (dict(inv_temp=0), [1, 99, 16, 0], "BAD_TOKEN"),
        (dict(inv_temp=0), draft, "BAD_TEMP"),
        (dict(inv_temp=0x10000), draft, "BAD_TEMP"),
    ]
    for over, d, name in cases:
        kw = dict(greedy=False, inv_temp=256, words=words, lanes=4) | over
        got = compare(p, q, d, **kw)
        assert got["err"] == ERR[name], (name, got)
        assert got["rows"] == 0 and got["words"] == 0
    # Greedy ignores INV_TEMP.
    got = compare(p, q, draft, greedy=True, inv_temp=0, words=[], lanes=4)
    assert got["err"] == 0


def test_words_run_out():
    rng = np.random.default_rng(3)
    r = chain_round(rng, 32, 3, False, mask_frac=0.0)
    p, q, draft = r.p, r.q, list(r.draft)
    with pytest.raises(ValueError, match="RNG words"):
        cpp.verifier_round(p, q, draft, greedy=False, inv_temp=256, words=[], lanes=4)


@pytest.mark.parametrize("vocab", [50257, 50272])
def test_full_vocab_rounds(vocab):
    rng = np.random.default_rng(vocab)
    for r in range(11):
        greedy = r % 4 == 3
        rnd = chain_round(rng, vocab, 4, greedy, mask_frac=0.0 if r % 3 else 0.99)
        p, q, draft = rnd.p, rnd.q, list(rnd.draft)
        words = rng.integers(0, 1 << 32, size=5, dtype=np.uint64).astype(np.uint32)
        inv_temp = 256 if r % 2 else int(rng.integers(64, 1024))
        compare(p, q, draft, greedy=greedy, inv_temp=inv_temp, words=words, lanes=4)


def test_directed_corners():
    """Fallback to e_p when every rejection weight is 0, e_q = 0 paths, greedy ties, q = None in greedy."""
    rng = np.random.default_rng(11)
    vocab, lanes = 24, 4
    base = quantize(rng.normal(0.0, 2.0, size=(3, vocab)))
    words = rng.integers(0, 1 << 32, size=3, dtype=np.uint64).astype(np.uint32)
    # p_0 == q_0 and x_0 masked in both: e_p = e_q = 0 rejects, every w(x) = 0, so sample from e_p.
    p = base.copy()
    p[0, 5] = LOGIT_NEG_INF
    q = p[:2].copy()
    got = compare(p, q, [5, 0], greedy=False, inv_temp=256, words=words, lanes=lanes)
    assert got["n_accept"] == 0 and got["last_ep"] == got["last_eq"] == 0 and got["words"] == 2
    assert got["next_token"] != 5 and got["sample_beats"] == vocab // lanes + got["next_token"] // lanes + 1
    # x_0 masked in q only: e_q = 0 accepts whatever u is.
    q2 = q.copy()
    q2[0, 7] = LOGIT_NEG_INF
    for w0 in (0, 0xFFFFFFFF):
        got = compare(p[:2], q2[:1], [7], greedy=False, inv_temp=256, words=[w0, *words], lanes=lanes)
        assert got["accept_bits"] & 1 and got["last_eq"] == 0 and got["last_ep"] > 0
    # Greedy: ties go to the lowest index, -inf never wins, q may be None.
    pg = np.full((3, vocab), LOGIT_NEG_INF, dtype=np.int16)
    pg[0, [3, 9, 17]] = 100
    pg[1, [2, 6]] = -5
    pg[2, :] = 0
    got = compare(pg, None, [3, 2], greedy=True, inv_temp=256, words=None, lanes=lanes)
    assert (got["n_accept"], got["next_token"], got["rows"]) == (2, 0, 3)
    got = compare(pg, None, [9], greedy=True, inv_temp=256, words=None, lanes=lanes)
    assert (got["n_accept"], got["next_token"], got["rows"]) == (0, 3, 1)
    # Extreme temperatures: INV_TEMP = 1 squashes, 65535 clips to +-32767.
    for inv_temp in (1, 65535):
        compare(base, base[:2], [0, 1], greedy=False, inv_temp=inv_temp, words=words, lanes=lanes)


# ------------------------------------------------------------------------------------------------
# Tree mode
# ------------------------------------------------------------------------------------------------

def compare_tree(rows, parents, tokens, **kw) -> dict:
    want = golden.verify_tree(rows, parents, tokens, **kw)
    got = cpp.verifier_tree_round(rows, parents, tokens, **kw)
    want_d = {k: int(getattr(want, k)) for k in FIELDS}
    want_d.update(path_lo=want.path & 0xFFFFFFFF, path_hi=want.path >> 32, cur_node=want.node)
    assert got == want_d, f"C++ {got} != golden {want_d} for parents={parents} tokens={tokens} kw={kw}"
    return got


def test_tree_start_errors_in_spec_order():
    rng = np.random.default_rng(5)
    t = tree_round(rng, 16, False, n=6, inv_temp=256, mask_frac=0.0)
    rows, parents, tokens = t.rows, list(t.parents), list(t.tokens)
    kw = dict(greedy=False, inv_temp=256, words=[1, 2, 3], lanes=4, vocab_max=16, tree_max=8)
    bad = [  # (parents, tokens, overrides, expected ERR)
        ([], [], {}, "BAD_TREE"),                                                # N = 0
        ([0] * 9, [0] * 9, {}, "BAD_TREE"),                                      # N = TREE_MAX + 1
        ([0, 0, 2], [0, 1, 1], {}, "BAD_TREE"),                                  # parent == i
        ([0, 0, 1, 7], [0, 1, 1, 1], {}, "BAD_TREE"),                            # parent > i
        ([0, 0, 2], [0, 1, 1], {"vocab_max": 8}, "BAD_TREE"),                    # before BAD_VOCAB
        (parents, tokens, {"vocab_max": 8}, "BAD_VOCAB"),
        (parents, tokens[:-1] + [16], {"inv_temp": 0}, "BAD_TOKEN"),             # before BAD_TEMP
        (parents, tokens, {"inv_temp": 0}, "BAD_TEMP"),
        (parents, tokens, {"inv_temp": 0x10000}, "BAD_TEMP"),
    ]
    for par, tok, over, name in bad:
        r = rows if par else rows[:1]
        got = compare_tree(r, par, tok, **(kw | over))
        assert got["err"] == core("verifier").reg("ERR").field(name).mask, (name, got)
        assert all(v == 0 for k, v in got.items() if k != "err"), got
    # Not errors: greedy ignores INV_TEMP; node 0's token is never checked
    got = compare_tree(rows, parents, [60000] + tokens[1:], **(kw | {"greedy": True, "inv_temp": 0}))
    assert got["err"] == 0


def test_tree_rejects_then_samples_without_the_rejected_tokens():
    """Duplicate siblings: a rejected token has weight 0 for its duplicates and for the final sample."""
    vocab = 8
    row = np.full(vocab, -300, dtype=np.int16)
    row[3] = 0
    rows = np.stack([row, row, row])
    # u = 2**24 - 1 rejects any child whose e < S' (here S' > e for token 3 since other tokens carry weight)
    words = [0xFFFFFFFF] * 4
    got = compare_tree(rows, [0, 0, 0, 0], [0, 3, 3, 3], greedy=False, inv_temp=256, words=words, lanes=4)
    assert got["n_accept"] == 0 and got["words"] == 4 and got["next_token"] != 3 and got["last_ep"] == 0
    # greedy: the first child with the argmax token wins, duplicates after it are never reached
    got = compare_tree(rows, [0, 0, 0, 1], [0, 5, 3, 3], greedy=True, inv_temp=256, words=None, lanes=4)
    assert (got["n_accept"], got["cur_node"], got["path_lo"], got["next_token"]) == (1, 2, 0b100, 3)


def test_tree_words_and_rows_run_out():
    rng = np.random.default_rng(9)
    t = tree_round(rng, 16, False, n=5, inv_temp=256, mask_frac=0.0)
    rows, parents, tokens = t.rows, list(t.parents), list(t.tokens)
    with pytest.raises(ValueError, match="RNG words"):
        cpp.verifier_tree_round(rows, parents, tokens, greedy=False, inv_temp=256, words=[], lanes=4)
    chain = [0, 0, 1]
    toks = [0, int(rows[0].argmax()), int(rows[1].argmax())]
    with pytest.raises(ValueError, match="row of a node"):
        cpp.verifier_tree_round(rows[:1], chain, toks, greedy=True, inv_temp=256, words=None, lanes=4)


def test_tree_full_vocab_64_nodes():
    """V = 50257 with a 64-node tree, greedy and sampling (argmax chains make the paths long)."""
    rng = np.random.default_rng(50257)
    vocab, n = 50257, 64
    for greedy, inv_temp in ((True, 256), (False, 256), (False, 200)):
        t = tree_round(rng, vocab, greedy, n=n, inv_temp=inv_temp, mask_frac=0.0)
        rows, parents, tokens = t.rows, t.parents, t.tokens
        words = rng.integers(0, 1 << 32, size=n + 1, dtype=np.uint64).astype(np.uint32)
        got = compare_tree(rows, parents, tokens, greedy=greedy, inv_temp=inv_temp, words=words, lanes=4,
                           vocab_max=50272)
        assert got["err"] == 0


@pytest.mark.parametrize("draft, words", [
    ([1.5, 2], r"draft tokens must be integers, got \[1.5, 2\]"),
    ([True, 2], r"draft tokens must be integers, got bools"),
    ("12", r"draft tokens must be a flat sequence of integers, got '12'"),
    ([[1], [2]], r"draft tokens must be a flat sequence, got the nested entry \[1\] at position 0"),
    (np.array([1.0, 2.0]), r"draft tokens must be integers, got float64"),
    ([1, 1 << 16], r"draft tokens must fit 16 bits \(0..65535\), got \[1, 65536\]"),
    ({1: 0, 2: 0}, r"draft tokens must be a flat sequence of integers, got \{1: 0, 2: 0\}"),   # no order: keys
], ids=["float", "bool", "text", "nested", "float array", "wide", "dict"])
def test_every_face_refuses_a_malformed_draft_alike(draft, words):
    """hwcontract.formats.draft_tokens is the one rule: the golden model (an int64 cast had taken 1.5 as token
    1), the C++ reference (int() likewise) and the driver ([True, 2] had been tokens 1 and 2) refuse alike."""
    rows = np.zeros((3, 8), np.int16)
    kw = dict(greedy=True, inv_temp=256, words=None, lanes=4)
    drv = runner.cores("ref").verifier
    for face in (lambda: golden.verify(rows, None, draft, **kw), lambda: cpp.verifier_round(rows, None, draft, **kw),
                 lambda: drv.verify(draft, rows, greedy=True)):
        with pytest.raises(ValueError, match=words):
            face()
    assert drv.read_reg("ROWS") == 0


@pytest.mark.parametrize("parents, tokens, greedy, words", [
    ([-1, 0, 0.7], [0, 1, 2], True, r"tree parents must be integers: node 2's is 0.7"),
    ([-1, 0, 0], [0, True, 2], True, r"tree tokens must be integers: node 1's is True"),
    ([-1, 0, 256], [0, 1, 2], True, r"tree parents must fit 8 bits \(0..255\): node 2's parent is 256"),
    ([-1, 0, 0], [0, 1, 2], "no", r"greedy must be a bool, got 'no'"),
], ids=["float parent", "bool token", "wide parent", "greedy text"])
def test_every_face_refuses_a_malformed_tree_alike(parents, tokens, greedy, words):
    """The tree faces share hwcontract.tree.node_entries and check_field_widths and regmap.flag: the C++
    reference's int() had taken parent 0.7 as node 0 and bool(greedy) the string 'no' as greedy."""
    rows = np.zeros((3, 8), np.int16)
    kw = dict(greedy=greedy, inv_temp=256, words=[1, 2, 3, 4], lanes=4)
    drv = runner.cores("ref").verifier
    for face in (lambda: golden.verify_tree(rows, parents, tokens, **kw),
                 lambda: cpp.verifier_tree_round(rows, parents, tokens, **kw),
                 lambda: drv.verify_tree(parents, tokens, rows, greedy=greedy)):
        with pytest.raises(ValueError, match=words):
            face()
    if "parents must be integers" in words:     # the treemask's three faces read parents the same way
        masker = runner.cores("ref").masker
        for face in (lambda: tm.tree_mask(parents), lambda: cpp.treemask_words(parents),
                     lambda: masker.masks(parents)):
            with pytest.raises(ValueError, match=words):
                face()
