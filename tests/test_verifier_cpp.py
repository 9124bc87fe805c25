"""The C++ reference of the verifier core (hls_ref/cpp/verifier.cpp) equals the golden model bit for bit."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from specdec.regmap import LOGIT_NEG_INF, core

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

from hls_ref import cpp  # noqa: E402

ERR = {name: core("verifier").reg("ERR").field(name).mask
       for name in ("BAD_GAMMA", "BAD_VOCAB", "BAD_TOKEN", "BAD_TEMP", "EMPTY_ROW")}
FIELDS = cpp.VERIFIER_FIELDS


def golden():
    return pytest.importorskip("hls_ref.verifier")


def quantize(logits: np.ndarray) -> np.ndarray:
    """The host's quantizer: subtract each row's max, code = clip(round(logit * 256), -32767, 32767)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return np.clip(np.round(z * 256), -32767, 32767).astype(np.int16)


def random_round(rng: np.random.Generator, vocab: int, gamma: int, *, mask_frac: float, empty: bool = False):
    """Target rows p [gamma + 1, V] and draft rows q [gamma, V] close enough to p that drafts often pass."""
    scale = rng.choice([0.5, 2.0, 6.0, 40.0])
    p_log = rng.normal(0.0, scale, size=(gamma + 1, vocab))
    q_log = p_log[:gamma] + rng.normal(0.0, rng.choice([0.05, 0.5, 3.0]), size=(gamma, vocab))
    p, q = quantize(p_log), quantize(q_log)
    for rows in (p, q):
        mask = rng.random(rows.shape) < mask_frac
        mask[np.arange(rows.shape[0]), rows.argmax(axis=1) if rows.shape[0] else []] = False  # keep one live
        rows[mask] = LOGIT_NEG_INF
    if empty:  # one all -inf row somewhere
        rows = p if (gamma == 0 or rng.random() < 0.5) else q
        rows[rng.integers(rows.shape[0])] = LOGIT_NEG_INF
    # Drafts: half from q's argmax (likely accepted), half uniform.
    src = q if gamma else p[:0]
    draft = np.where(rng.random(gamma) < 0.5, src.argmax(axis=1), rng.integers(0, vocab, size=gamma))
    return p, q, [int(x) for x in draft]


def compare(p, q, draft, **kw) -> dict:
    want = golden().verify(p, q, draft, **kw)
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


def test_random_small_vocab_rounds():
    rng = np.random.default_rng(20261121)
    n = 0
    outcomes = set()
    for _ in range(1200):
        vocab = int(rng.integers(8, 65))
        gamma = int(rng.integers(0, 17))
        lanes = int(rng.choice([1, 2, 4, 8]))
        greedy = bool(rng.random() < 0.3)
        inv_temp = int(rng.choice([256, int(rng.integers(1, 1024)), int(rng.integers(1, 65536))]))
        p, q, draft = random_round(rng, vocab, gamma, mask_frac=float(rng.choice([0.0, 0.2, 0.7])),
                                   empty=bool(rng.random() < 0.03))
        if greedy and gamma and rng.random() < 0.5:  # greedy drafts that match the target's argmax for a while
            draft = [int(x) for x in p[:gamma].argmax(axis=1)]
            if rng.random() < 0.5:
                draft[int(rng.integers(gamma))] = int(rng.integers(vocab))
        words = rng.integers(0, 1 << 32, size=gamma + 1, dtype=np.uint64).astype(np.uint32)
        got = compare(p, q, draft, greedy=greedy, inv_temp=inv_temp, words=words, lanes=lanes)
        outcomes.add((greedy, got["err"] != 0, got["n_accept"] == gamma))
        n += 1
    assert n >= 1000
    # Both modes saw full acceptance, early stops and EMPTY_ROW.
    assert {(False, False, True), (False, False, False), (True, False, True), (True, False, False)} <= outcomes
    assert (False, True, False) in outcomes or (True, True, False) in outcomes


def test_start_errors_in_spec_order():
    rng = np.random.default_rng(7)
    p, q, draft = random_round(rng, 16, 4, mask_frac=0.0)
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
    p, q, draft = random_round(rng, 32, 3, mask_frac=0.0)
    with pytest.raises(ValueError, match="RNG words"):
        cpp.verifier_round(p, q, draft, greedy=False, inv_temp=256, words=[], lanes=4)


@pytest.mark.parametrize("vocab", [50257, 50272])
def test_full_vocab_rounds(vocab):
    rng = np.random.default_rng(vocab)
    for r in range(11):
        greedy = r % 4 == 3
        p, q, draft = random_round(rng, vocab, 4, mask_frac=0.0 if r % 3 else 0.99)
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
