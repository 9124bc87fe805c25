"""Test vectors for every face of every core: each generator is written here once.

The golden-model tests, the C++ checks, the cocotb testbenches and the agreement flow
(tests/test_agreement.py) all draw their stimulus from these functions. Every function is pure: its
randomness comes from an ``np.random.Generator`` argument (or, for the ``*_set`` functions, an integer
seed), so the same call gives the same vectors in pytest and inside a simulator.

The ``*_set`` functions are the agreement vectors of a core: a few directed vectors first, then ``count``
random ones. A shorter set is a prefix of a longer one with the same seed (kvpage: up to its closing
dump), so a slow stage (Icarus) runs the first vectors of what a fast stage (golden, C++) runs.

Tree parent arrays follow ``specdec.decoding.tree``: ``parents[0] = -1`` (the root's entry, which every core
ignores) and ``0 <= parents[i] < i``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hls_ref import kvpage as kv
from hls_ref import treeattn as ta
from hls_ref import treemask as tm
from hls_ref import vecunit as vu
from hls_ref.draftengine import Job as DEJob
from hls_ref.rng import xoshiro128pp
from hwcontract.formats import (DE_MULT_BITS, DE_OUT_BITS, DE_SHIFT_MAX, LOGIT_NEG_INF, VQ_FRAC, VU_MULT_BITS,
                                VU_NORM_SHIFT, VU_OP, VU_SHIFT_MAX, fixed_point_dist, quantize, ta_multiplier,
                                vu_scale_words, vu_turns)
from hwcontract.regmap import VU_OPS

M32 = 0xFFFFFFFF

#: The INV_TEMP values a random round picks from (plus one drawn from 1..1023): 1.0 twice, the
#: extremes (65535 clips tempered codes to +-32767, 1 divides them by 256) and a few in between.
INV_TEMPS = (256, 256, 128, 512, 64, 65535, 1)
#: Shapes of random trees: uniform parents, long thin, two-wide, a chain, bushy (late parents).
TREE_STYLES = ("random", "deep", "wide", "chain", "bushy")
#: Medusa/vLLM tree paths (``specdec.decoding.tree.parents_from_paths``): a 3-chain and the Medusa example tree
#: (two root children, two grandchildren each), parents (-1, 0, 0, 1, 1, 2, 2).
CHAIN3_PATHS = ((0,), (0, 0), (0, 0, 0))
MEDUSA_PATHS = ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
#: The losslessness test tree: three children at the root (node 3 repeats node 1's token in
#: :func:`make_tree_case`), two under the first child (nodes 4, 5).
TREE_PARENTS = (-1, 0, 0, 0, 1, 1)


def rng_seed(rng: np.random.Generator) -> tuple[int, int, int, int]:
    """A random nonzero xoshiro128++ seed s[0..3]."""
    s = [int(x) for x in rng.integers(0, 1 << 32, size=4, dtype=np.uint64)]
    if not any(s):
        s[0] = 1
    return tuple(s)


def rng_seeds(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` (>= 4) nonzero uint32[4] seeds, the first four sparse: a single low bit, a single high
    bit, all ones, two zero words."""
    if count < 4:
        raise ValueError(f"rng_seeds makes at least the 4 sparse seeds, got count={count}")
    seeds = rng.integers(0, 1 << 32, size=(count, 4), dtype=np.uint64).astype(np.uint32)
    seeds[0] = (1, 0, 0, 0)
    seeds[1] = (0, 0, 0, 1 << 31)
    seeds[2] = (M32, M32, M32, M32)
    seeds[3, :2] = 0
    seeds[~seeds.any(axis=1), 0] = 1
    return seeds


@dataclass(frozen=True)
class RngCase:
    """One rng vector: load ``seed``, ``steps`` single STEPs (OUT read after each), then a START burst
    of ``burst`` steps (OUT, XOR and STEPS read after it)."""

    seed: tuple[int, int, int, int]
    steps: int
    burst: int


def rng_set(seed: int, count: int) -> list[RngCase]:
    """The rng agreement vectors: the four sparse seeds of :func:`rng_seeds` (bursts of 0, 1 and two
    random lengths), then ``count`` random seeds; 0..4 single steps and bursts up to 999."""
    rng = np.random.default_rng(seed)
    out = []
    for k, s in enumerate(rng_seeds(rng, 4)):
        out.append(RngCase(tuple(int(w) for w in s), int(rng.integers(0, 5)),
                           k if k < 2 else int(rng.integers(2, 1000))))
    for _ in range(count):
        out.append(RngCase(rng_seed(rng), int(rng.integers(0, 5)), int(rng.integers(2, 1000))))
    return out


# ------------------------------------------------------------------------------------------------
# verifier: chain rounds
# ------------------------------------------------------------------------------------------------

def random_inv_temp(rng: np.random.Generator) -> int:
    """An INV_TEMP from :data:`INV_TEMPS` or 1..1023."""
    return int(rng.choice(INV_TEMPS + (int(rng.integers(1, 1024)),)))


def logit_codes(rng: np.random.Generator, base: np.ndarray, noise: float, mask_frac: float) -> np.ndarray:
    """Rows of codes: ``base`` (float logits, shape (..., V)) plus Gaussian ``noise``, a fraction
    ``mask_frac`` masked to -inf (one random entry of each row stays live), quantized as the host does."""
    x = np.array(base, dtype=np.float64) + rng.normal(0.0, noise, np.shape(base))
    if mask_frac:
        m = rng.random(x.shape) < mask_frac
        flat = m.reshape(-1, x.shape[-1])
        flat[np.arange(flat.shape[0]), rng.integers(0, x.shape[-1], flat.shape[0])] = False
        x[m] = -np.inf
    return quantize(x).astype(np.int16)


@dataclass(frozen=True)
class ChainRound:
    """One chain round: rows p (g+1, V) and q (g, V; None in greedy mode) of codes, the draft tokens,
    the mode and INV_TEMP, and the RNG seed the core is loaded with before the round."""

    p: np.ndarray
    q: np.ndarray | None
    draft: tuple[int, ...]
    greedy: bool
    inv_temp: int
    seed: tuple[int, int, int, int]

    @property
    def vocab(self) -> int:
        return int(self.p.shape[1])

    @property
    def gamma(self) -> int:
        return len(self.draft)

    def words(self) -> np.ndarray:
        """The RNG words the core draws from :attr:`seed`: enough for any round (g + 2)."""
        return xoshiro128pp(self.seed, self.gamma + 2)[0]


def chain_round(rng: np.random.Generator, vocab: int, gamma: int, greedy: bool, *, mask_frac: float | None = None,
                empty: bool = False, inv_temp: int | None = None) -> ChainRound:
    """A random round whose draft rows overlap the target's, so that drafts are often accepted.

    Each position has float logits ``base`` (scale 0.5 .. 200; all ties one time in ten); p_i and q_i add
    their own noise and -inf masks. Greedy drafts are p_i's argmax (85 %) or uniform; sampling drafts are
    drawn from q_i's fixed-point distribution (70 %), q_i's argmax (15 %) or uniform. ``empty`` makes one
    p or q row all -inf (EMPTY_ROW when the round reaches it).
    """
    scale = float(rng.choice([0.5, 2.0, 5.0, 40.0, 200.0]))
    if mask_frac is None:
        mask_frac = float(rng.choice([0.0, 0.0, 0.3, 0.8]))
    base = rng.normal(0.0, scale, (gamma + 1, vocab))
    base[rng.random(gamma + 1) < 0.1] = 0.0
    p = logit_codes(rng, base, float(rng.choice([0.0, 0.1, 1.0])), mask_frac)
    q = logit_codes(rng, base[:gamma], float(rng.choice([0.1, 1.0, 3.0])), mask_frac)
    t = random_inv_temp(rng) if inv_temp is None else int(inv_temp)
    draft = []
    for i in range(gamma):
        u = rng.random()
        if greedy:
            x = int(np.argmax(p[i])) if u < 0.85 else int(rng.integers(vocab))
        elif u < 0.7:
            x = int(rng.choice(vocab, p=fixed_point_dist(q[i], t)))
        else:
            x = int(np.argmax(q[i])) if u < 0.85 else int(rng.integers(vocab))
        draft.append(x)
    if empty:
        rows = p if (greedy or gamma == 0 or rng.random() < 0.5) else q
        rows[int(rng.integers(rows.shape[0]))] = LOGIT_NEG_INF
    return ChainRound(p, None if greedy else q, tuple(draft), bool(greedy), t, rng_seed(rng))


def random_chain_round(rng: np.random.Generator, vocab_max: int, gamma_max: int, greedy: bool | None = None,
                       empty: bool = False) -> ChainRound:
    """:func:`chain_round` at a random V (1, 2, 3, any up to ``vocab_max``, or ``vocab_max``) and gamma
    (0..``gamma_max``); greedy one time in three when ``greedy`` is None."""
    vocab = int(rng.choice([1, 2, 3, rng.integers(1, vocab_max + 1), rng.integers(1, vocab_max + 1), vocab_max]))
    gamma = int(rng.integers(0, gamma_max + 1))
    if greedy is None:
        greedy = bool(rng.random() < 0.35)
    return chain_round(rng, min(vocab, vocab_max), gamma, greedy, empty=empty)


def chain_set(seed: int, count: int, *, vocab_max: int, gamma_max: int) -> list[ChainRound]:
    """The chain agreement vectors: ``count`` random rounds, one in twenty with an empty row."""
    rng = np.random.default_rng(seed)
    return [random_chain_round(rng, vocab_max, gamma_max, empty=bool(rng.random() < 0.05)) for _ in range(count)]


def full_vocab_round(rng: np.random.Generator, vocab: int, gamma: int, kind: str):
    """A round at a real vocabulary size: GPT-2-like logits (a few strong tokens, a long tail).

    ``kind``: ``sample`` (drafts from q's fixed-point distribution at INV_TEMP 256), ``topk`` (the same
    with q masked to its top 2000), ``greedy`` (the first draft is p_0's argmax, the second misses p_1's),
    ``last`` (every draft token V - 1, the row buffers' last lane). Returns ``p, q, draft``.
    """
    if kind not in ("sample", "topk", "greedy", "last"):
        raise ValueError(f"full_vocab_round kind {kind!r} not in sample, topk, greedy, last")
    base = rng.standard_normal(vocab) * 2.0
    base[rng.integers(0, vocab, 8)] += 12.0
    p = np.array([base + rng.standard_normal(vocab) * 0.5 for _ in range(gamma + 1)])
    q = np.array([base + rng.standard_normal(vocab) * 1.5 for _ in range(gamma)]).reshape(gamma, vocab)
    if kind == "topk":
        for row in q:
            row[np.argsort(row)[:-2000]] = -np.inf
    p, q = quantize(p), quantize(q)
    if kind == "greedy":
        draft = [int(np.argmax(p[0])), (int(np.argmax(p[1])) + 1) % vocab][:gamma]
    elif kind == "last":
        draft = [vocab - 1] * gamma
    else:
        draft = [int(rng.choice(vocab, p=fixed_point_dist(q[i], 256))) for i in range(gamma)]
    return p, q, draft


def make_family(name: str, vocab: int, rng: np.random.Generator, g: int):
    """Target rows p (g+1, V) and draft rows q (g, V) of one of the losslessness families.

    ``random``: independent rows; ``equal``: q == p; ``disjoint``: p lives on the upper half of the
    vocabulary, q on the lower; ``peaked_p`` / ``peaked_q``: one token carries almost all the mass.
    """
    p = rng.integers(-1500, 1, (g + 1, vocab)).astype(np.int16)
    q = rng.integers(-1500, 1, (g, vocab)).astype(np.int16)
    if name == "equal":
        q = p[:g].copy()
    elif name == "disjoint":
        half = vocab // 2
        p[:, :half] = LOGIT_NEG_INF
        q[:, half:] = LOGIT_NEG_INF
    elif name == "peaked_p":
        p = rng.integers(-12000, -6000, (g + 1, vocab)).astype(np.int16)
        p[:, 1] = 0
    elif name == "peaked_q":
        q = rng.integers(-12000, -6000, (g, vocab)).astype(np.int16)
        q[:, 2] = 0
    elif name != "random":
        raise ValueError(f"unknown family {name!r}; families: random, equal, disjoint, peaked_p, peaked_q")
    return p, q


# ------------------------------------------------------------------------------------------------
# Trees: parent arrays (treemask, verifier tree mode) and verifier tree rounds
# ------------------------------------------------------------------------------------------------

def random_parents(rng: np.random.Generator, n: int, style: str = "random") -> list[int]:
    """A tree of ``n`` nodes in one of :data:`TREE_STYLES`; ``parents[0] = -1``.

    ``random``: parent of node i uniform in 0..i-1; ``deep``: i-1 or i-2; ``wide``: 0 or 1; ``chain``:
    i-1; ``bushy``: uniform in i//3..i-1.
    """
    pick = {"random": lambda i: int(rng.integers(0, i)), "deep": lambda i: max(0, i - int(rng.integers(1, 3))),
            "wide": lambda i: int(rng.integers(min(i, 2))), "chain": lambda i: i - 1,
            "bushy": lambda i: int(rng.integers(max(1, i // 3), i)) if i > 1 else 0}
    if style not in pick:
        raise ValueError(f"tree style {style!r} not in {TREE_STYLES}")
    return [-1] + [pick[style](i) for i in range(1, n)]


@dataclass(frozen=True)
class TreeRound:
    """One tree round: a row of codes per node (N, V), the parents and tokens (node 0's ignored), the
    mode and INV_TEMP, and the RNG seed the core is loaded with before the round."""

    rows: np.ndarray
    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    greedy: bool
    inv_temp: int
    seed: tuple[int, int, int, int]

    @property
    def vocab(self) -> int:
        return int(self.rows.shape[1])

    def words(self) -> np.ndarray:
        """The RNG words the core draws from :attr:`seed`: enough for any round (N + 2)."""
        return xoshiro128pp(self.seed, len(self.parents) + 2)[0]


def tree_round(rng: np.random.Generator, vocab: int, greedy: bool, *, n: int | None = None, parents=None,
               mask_frac: float | None = None, empty: bool = False, inv_temp: int | None = None) -> TreeRound:
    """A random tree round whose tokens often follow their parent's row, so paths get long.

    The tree is ``parents`` or a random one of ``n`` nodes in a random style. Each node's token is a
    sibling's (a duplicate, 15 %), follows the parent's row (60 %: its argmax in greedy mode, a draw from
    its fixed-point distribution in sampling mode) or is uniform. ``empty`` makes one row all -inf.
    """
    if parents is None:
        parents = random_parents(rng, n, str(rng.choice(TREE_STYLES)))
    parents = tuple(int(x) for x in parents)
    n = len(parents)
    scale = float(rng.choice([0.5, 2.0, 5.0, 40.0]))
    if mask_frac is None:
        mask_frac = float(rng.choice([0.0, 0.0, 0.3, 0.8]))
    rows = logit_codes(rng, rng.normal(0.0, scale, (n, vocab)), 0.0, mask_frac)
    t = random_inv_temp(rng) if inv_temp is None else int(inv_temp)
    tokens = [0]
    for j in range(1, n):
        r = rows[parents[j]]
        sibs = [tokens[k] for k in range(1, j) if parents[k] == parents[j]]
        u = rng.random()
        if sibs and u < 0.15:
            tokens.append(int(rng.choice(sibs)))
        elif u < 0.75:
            tokens.append(int(np.argmax(r)) if greedy else int(rng.choice(vocab, p=fixed_point_dist(r, t))))
        else:
            tokens.append(int(rng.integers(vocab)))
    if empty:
        rows[int(rng.integers(n))] = LOGIT_NEG_INF
    return TreeRound(rows, parents, tuple(tokens), bool(greedy), t, rng_seed(rng))


def random_tree_round(rng: np.random.Generator, vocab_max: int, tree_max: int, greedy: bool | None = None,
                      empty: bool = False) -> TreeRound:
    """:func:`tree_round` at a random V (as :func:`random_chain_round`) and N (1, 2, any up to
    ``tree_max``, or ``tree_max``); greedy two times in five when ``greedy`` is None."""
    vocab = int(rng.choice([1, 2, 3, rng.integers(1, vocab_max + 1), rng.integers(1, vocab_max + 1), vocab_max]))
    n = int(rng.choice([1, 2, rng.integers(1, tree_max + 1), rng.integers(1, tree_max + 1), tree_max]))
    if greedy is None:
        greedy = bool(rng.random() < 0.4)
    return tree_round(rng, min(vocab, vocab_max), greedy, n=n, empty=empty)


def tree_set(seed: int, count: int, *, vocab_max: int, tree_max: int) -> list[TreeRound]:
    """The tree agreement vectors: ``count`` random tree rounds, one in twenty with an empty row."""
    rng = np.random.default_rng(seed)
    return [random_tree_round(rng, vocab_max, tree_max, empty=bool(rng.random() < 0.05)) for _ in range(count)]


def make_tree_case(vocab: int, rng: np.random.Generator, inv_temp: int):
    """Rows (one per node of :data:`TREE_PARENTS`) and tokens: the root's children propose its two most
    likely tokens and the most likely once more (a duplicate); node 1's children its two most likely
    tokens. ``vocab`` >= 2."""
    rows = rng.integers(-1500, 1, (len(TREE_PARENTS), vocab)).astype(np.int16)
    top0 = np.argsort(-fixed_point_dist(rows[0], inv_temp), kind="stable")
    top1 = np.argsort(-fixed_point_dist(rows[1], inv_temp), kind="stable")
    tokens = (0, int(top0[0]), int(top0[1]), int(top0[0]), int(top1[0]), int(top1[1]))
    return rows, tokens


def treemask_set(seed: int, count: int, nodes_max: int) -> list[list[int]]:
    """The treemask agreement trees: the chain and the star of ``nodes_max`` nodes, two refused trees
    (N = 0: BAD_NODES; the last node its own parent: BAD_PARENT), then ``count`` random trees of
    sizes 1, 2, .. ``nodes_max``, 1, .. in random styles."""
    rng = np.random.default_rng(seed)
    trees = [[-1] + list(range(nodes_max - 1)), [-1] + [0] * (nodes_max - 1), [],
             [-1] + list(range(max(nodes_max, 2) - 2)) + [max(nodes_max, 2) - 1]]
    for k in range(count):
        trees.append(random_parents(rng, 1 + k % nodes_max, str(rng.choice(TREE_STYLES))))
    return trees


# ------------------------------------------------------------------------------------------------
# kvpage: operation sequences
# ------------------------------------------------------------------------------------------------

def kvpage_dump(st: kv.KVState) -> list[kv.Op]:
    """Read-only operations that show the whole state: INFO of every slot, TRANSLATE of every row of every
    live slot, REFS of every page."""
    ops = [kv.Op("INFO", slot=s) for s in range(len(st.kind))]
    ops += [kv.Op("TRANSLATE", slot=s, row=r) for s in range(len(st.kind)) if st.live(s) for r in range(st.length[s])]
    return ops + [kv.Op("REFS", page=p) for p in range(st.pages)]


def kvpage_ops(rng: np.random.Generator, pages: int, max_blocks: int, count: int,
               dump_every: int = 0, slots: int = kv.KV_SLOTS) -> list[kv.Op]:
    """``count`` operations of :func:`hls_ref.kvpage.random_op` from an empty table, each drawn for the
    state the ones before it leave (the golden model tracks it), with a :func:`kvpage_dump` after every
    ``dump_every`` operations (0: none) and at the end."""
    st = kv.KVState.empty(pages, max_blocks, slots)
    ops: list[kv.Op] = []
    for i in range(count):
        op = kv.random_op(st, rng)
        st, _ = kv.step(st, op)
        ops.append(op)
        if dump_every and (i + 1) % dump_every == 0:
            ops += kvpage_dump(st)
    return ops + kvpage_dump(st)


def kvpage_exhaust(pages: int, max_blocks: int, slots: int = kv.KV_SLOTS) -> list[kv.Op]:
    """Directed operations that run out of everything, then CLEAR: sequences written to MAX_BLOCKS rows
    until the pool is empty, a WRITE that needs a page (POOL_EMPTY) and a copy on write that needs one
    (POOL_EMPTY), NEW until every slot is taken (NO_SLOT)."""
    st = kv.KVState.empty(pages, max_blocks, slots)
    ops: list[kv.Op] = []

    def run(op: kv.Op) -> kv.Result:
        nonlocal st
        st, res = kv.step(st, op)
        ops.append(op)
        return res

    seq = run(kv.Op("NEW")).regs["RES_SLOT"]
    while st.free_pages:
        if st.length[seq] == max_blocks:
            res = run(kv.Op("NEW"))
            if res.err:
                break
            seq = res.regs["RES_SLOT"]
        run(kv.Op("WRITE", slot=seq, row=st.length[seq]))
    other = run(kv.Op("NEW")).regs.get("RES_SLOT", 0)
    run(kv.Op("WRITE", slot=other, row=0))
    br = run(kv.Op("FORK", slot=seq)).regs.get("RES_SLOT", 0)
    run(kv.Op("WRITE", slot=br, row=max(st.length[br] - 1, 0)))
    while not run(kv.Op("NEW")).err:
        pass
    run(kv.Op("CLEAR"))
    return ops


def kvpage_set(seed: int, count: int, *, pages: int, max_blocks: int, slots: int = kv.KV_SLOTS) -> list[kv.Op]:
    """The kvpage agreement vectors: :func:`kvpage_exhaust`, then ``count`` random operations with dumps
    every 100 and at the end."""
    return kvpage_exhaust(pages, max_blocks, slots) + kvpage_ops(np.random.default_rng(seed), pages, max_blocks,
                                                                 count, dump_every=100, slots=slots)


# ------------------------------------------------------------------------------------------------
# draftengine: int8 jobs
# ------------------------------------------------------------------------------------------------

#: The demo draft's (K, N) layer shapes (hidden 192, MLP 512, K/V 64 wide, the hot head at 8192 rows).
DRAFT_SHAPES = ((192, 192), (192, 64), (192, 512), (512, 192), (192, 8192))


def draftengine_job(rng: np.random.Generator, m: int, k: int, n: int, out_bits: int, *, extreme: bool = False):
    """One random job: operands over the whole int8 range (``extreme``: every operand -128, the largest sum),
    per-channel biases, multipliers and shifts that put outputs around the width's range, so some saturate."""
    if extreme:
        x = np.full((m, k), -128, np.int64)
        w = np.full((n, k), -128, np.int64)
    else:
        x = rng.integers(-128, 128, (m, k))
        w = rng.integers(-128, 128, (n, k))
    bias = rng.integers(-(1 << 20), 1 << 20, n)
    bias[rng.random(n) < 0.05] = rng.choice([-(1 << 31), (1 << 31) - 1])       # the bias range's ends
    mult = rng.integers(1 << (DE_MULT_BITS - 1), 1 << DE_MULT_BITS, n)
    mult[rng.random(n) < 0.05] = 0
    # sums of k products of int8 have a spread of about 128 * 128 * sqrt(k) / 3; scale them near the range
    spread = max(1.0, 128 * 128 * np.sqrt(k) / 3)
    want = float(1 << (out_bits - 1)) if out_bits < 32 else 1.0
    base = int(np.clip(np.round(np.log2(spread * (1 << DE_MULT_BITS) / max(want, 1.0))), 0, DE_SHIFT_MAX))
    shift = np.clip(base + rng.integers(-2, 3, n), 0, DE_SHIFT_MAX)
    shift[rng.random(n) < 0.05] = rng.choice([0, DE_SHIFT_MAX])
    return DEJob(x, w, bias, mult, shift, out_bits)


def draftengine_set(seed: int, count: int) -> list:
    """A 1 x 1 x 1 job; ``count`` small random jobs (M 1..16, K and N 1..96) and ``count`` large ones (K and N
    1..600), any output width, K and N mostly off the array's multiples; the two largest sums (K = 4096, every
    operand extreme); then each demo-draft shape at M = 1 and 16 with every output width. The cheapest come
    first, so that a slow stage can run a prefix (:func:`draftengine_prefix`)."""
    rng = np.random.default_rng(seed)
    first = draftengine_job(rng, 1, 1, 1, 8)
    largest = [draftengine_job(rng, 2, 4096, 3, 32, extreme=True), draftengine_job(rng, 1, 4096, 2, 16, extreme=True)]
    jobs = [first]
    for top in (96, 600):
        for _ in range(count):
            jobs.append(draftengine_job(rng, int(rng.integers(1, 17)), int(rng.integers(1, top + 1)),
                                        int(rng.integers(1, top + 1)), int(rng.choice(DE_OUT_BITS))))
    jobs += largest
    for i, (k, n) in enumerate(DRAFT_SHAPES):
        for m in (1, 16):
            jobs.append(draftengine_job(rng, m, k, n, DE_OUT_BITS[(i + m) % len(DE_OUT_BITS)]))
    return jobs


#: The parts of :func:`draftengine_set`, in order; a prefix ends after one of them.
DRAFTENGINE_PARTS = ("small", "large", "largest", "shapes")


def draftengine_prefix(count: int, upto: str) -> int | None:
    """How many jobs of ``draftengine_set(seed, count)`` there are up to the end of the part ``upto``
    (:data:`DRAFTENGINE_PARTS`; None for the whole set)."""
    sizes = {"small": 1 + count, "large": 1 + 2 * count, "largest": 3 + 2 * count, "shapes": None}
    if upto not in sizes:
        raise ValueError(f"upto: {upto!r} is not one of {DRAFTENGINE_PARTS}")
    return sizes[upto]


# ------------------------------------------------------------------------------------------------
# treeattn: attention jobs (chains and trees over a committed context)
# ------------------------------------------------------------------------------------------------

#: Code scales (q, k) of real int8 attention: the int8 EAGLE head's q and k after RoPE sit around these.
TREEATTN_SCALES = ((0.021, 0.038), (0.012, 0.05), (0.045, 0.03), (0.008, 0.011))


def chain_mask(n: int) -> tuple[int, ...]:
    """The causal mask of an n-position chain: row r sees nodes 0..r."""
    return tuple((1 << (r + 1)) - 1 for r in range(n))


def tree_rows(parents, nodes_max: int) -> tuple[int, ...]:
    """The ancestor-or-self rows of a tree as the treemask core computes them (:func:`hls_ref.treemask.tree_mask`)."""
    m = tm.tree_mask(parents, nodes_max)
    if m.err:
        raise ValueError(f"tree {list(parents)} refused by the treemask model (ERR {m.err:#x})")
    return m.rows


def treeattn_job(rng: np.random.Generator, ctx: int, mask, params: dict, *, scales: tuple[float, float] | None = None,
                 amp: int | None = None, extreme: bool = False, mult_shift: tuple[int, int] | None = None) -> ta.Job:
    """One job over ``ctx`` context keys with step rows ``mask``: codes uniform in -amp..amp (default: a random
    amplitude, so that softmaxes range from flat to peaked), or every code -128 or 127 (``extreme``); MULT and SHIFT
    from ``scales`` (default: one of :data:`TREEATTN_SCALES`) unless ``mult_shift`` gives them."""
    hd, g, n = params["HEAD_DIM"], params["GROUP"], len(mask)
    if extreme:
        def codes(shape):
            return rng.choice(np.array([-128, 127]), shape)
    else:
        a = int(amp if amp is not None else rng.choice([16, 48, 96, 128]))

        def codes(shape):
            return rng.integers(-a, min(a, 127) + 1, shape)
    sq, sk = scales if scales is not None else TREEATTN_SCALES[int(rng.integers(len(TREEATTN_SCALES)))]
    mult, shift = mult_shift if mult_shift is not None else ta_multiplier(sq, sk, hd)
    return ta.Job(codes((n, g, hd)), codes((ctx, hd)), codes((ctx, hd)), codes((n, hd)), codes((n, hd)),
                  tuple(int(m) for m in mask), int(mult), int(shift))


def treeattn_errors(rng: np.random.Generator, params: dict) -> list[ta.Job]:
    """One job per ERR bit a job can raise: BAD_CTX (CTX_MAX + 1 keys), BAD_NODES (no rows), BAD_SCALE (MULT 0;
    SHIFT 32), BAD_MASK (row 1 without bit 1; row 0 with bit 1; at NODES_MAX 1 twice row 0 without bit 0)."""
    nm = min(params["NODES_MAX"], 2)
    good = chain_mask(nm)
    return [treeattn_job(rng, params["CTX_MAX"] + 1, (1,), params),
            treeattn_job(rng, 3, (), params),
            treeattn_job(rng, 3, good, params, mult_shift=(0, 4)),
            treeattn_job(rng, 3, good, params, mult_shift=(1 << 14, 32)),
            treeattn_job(rng, 3, (1, 1) if nm > 1 else (0,), params),
            treeattn_job(rng, 3, (3, 3) if nm > 1 else (0,), params)]


def treeattn_set(seed: int, count: int, params: dict | None = None) -> list[ta.Job]:
    """The treeattn agreement jobs, cheapest first (a slow stage runs a prefix): directed jobs (one row and no
    context; a chain with a short last block; a 7-node tree; NODES_MAX rows; extreme codes; flat and clamped
    distances: MULT 1 at SHIFT 31, MULT 65535 at SHIFT 0), the refused jobs (:func:`treeattn_errors`), ``count``
    random chains and trees (trees through the treemask model) of up to 9 rows over up to 4 blocks, and last the
    long contexts: CTX_MAX - 1 and CTX_MAX keys."""
    p = ta.build(params)
    rng = np.random.default_rng(seed)
    blk, nm, cmax = p["BLOCK"], p["NODES_MAX"], p["CTX_MAX"]
    seven = tree_rows(random_parents(rng, min(7, nm), "bushy"), nm)

    def ctx(keys: int) -> int:
        return min(keys, cmax)
    jobs = [treeattn_job(rng, 0, (1,), p),
            treeattn_job(rng, ctx(2 * blk + 3), chain_mask(min(5, nm)), p),
            treeattn_job(rng, ctx(blk), seven, p),
            treeattn_job(rng, 5, chain_mask(nm), p),
            treeattn_job(rng, ctx(blk + 1), tree_rows(random_parents(rng, nm, "wide"), nm), p),
            treeattn_job(rng, ctx(blk + 7), chain_mask(min(3, nm)), p, extreme=True),
            treeattn_job(rng, 9, chain_mask(min(2, nm)), p, mult_shift=(1, 31)),
            treeattn_job(rng, 9, seven, p, mult_shift=((1 << 16) - 1, 0))]
    q = np.full((1, p["GROUP"], p["HEAD_DIM"]), 127)
    k = np.full((ctx(blk + 1), p["HEAD_DIM"]), -128)
    jobs.append(ta.Job(q, k, k, k[:1], k[:1], (1,), *ta_multiplier(0.02, 0.02, p["HEAD_DIM"])))  # o = -128.0
    jobs += treeattn_errors(rng, p)
    for i in range(count):
        n = int(rng.integers(1, min(9, nm) + 1))
        mask = chain_mask(n) if i % 3 == 0 else tree_rows(random_parents(rng, n, str(rng.choice(TREE_STYLES))), nm)
        jobs.append(treeattn_job(rng, int(rng.integers(0, ctx(4 * blk) + 1)), mask, p))
    jobs += [treeattn_job(rng, cmax - 1, (1,), p), treeattn_job(rng, cmax, chain_mask(min(2, nm)), p)]
    return jobs


# ------------------------------------------------------------------------------------------------
# vecunit: vector jobs (every operation, the edge values, every ERR bit)
# ------------------------------------------------------------------------------------------------

I32_EDGES = (-(1 << 31), (1 << 31) - 1, -(1 << 31) + 1, 0, 1, -1, 1 << 16, -(1 << 16))


def vecunit_words(rng: np.random.Generator, n: int, style: str = "mixed") -> np.ndarray:
    """``n`` X words (int32 values): ``"small"`` Q15.16 values of a few units, ``"wide"`` uniform over int32,
    ``"edge"`` the int32 extremes and their neighbours (:data:`I32_EDGES`), ``"mixed"`` each word one of the three."""
    small = np.round(rng.normal(0.0, float(rng.choice([0.05, 1.0, 8.0])), n) * (1 << VQ_FRAC)).astype(np.int64)
    small = np.clip(small, -(1 << 31), (1 << 31) - 1)
    wide = rng.integers(-(1 << 31), 1 << 31, n)
    edge = rng.choice(np.array(I32_EDGES, dtype=np.int64), n)
    if style != "mixed":
        return {"small": small, "wide": wide, "edge": edge}[style]
    pick = rng.integers(0, 3, n)
    return np.where(pick == 0, small, np.where(pick == 1, wide, edge))


def vecunit_scales(rng: np.random.Generator, n: int, shift: int = 24, edges: bool = True) -> np.ndarray:
    """``n`` C words (vu_scale: MULT | SHIFT << 16): MULT over 16 bits, SHIFT within 4 of ``shift``; with
    ``edges`` some MULT 0 and 65535 and some SHIFT 0 and 63."""
    mult = rng.integers(1 << (VU_MULT_BITS - 1), 1 << VU_MULT_BITS, n)
    sh = np.clip(shift + rng.integers(-4, 5, n), 0, VU_SHIFT_MAX)
    if edges:
        mult[rng.random(n) < 0.1] = 0
        mult[rng.random(n) < 0.1] = (1 << VU_MULT_BITS) - 1
        sh[rng.random(n) < 0.1] = 0
        sh[rng.random(n) < 0.1] = VU_SHIFT_MAX
    return mult | (sh << 16)


def _vu_job(op: str, length: int, x, c, **regs) -> vu.Job:
    return vu.Job(VU_OP[op], length, np.asarray(x, np.int64), np.asarray(c, np.int64), **regs)


def vecunit_job(rng: np.random.Generator, op: str, length: int, params: dict, *, style: str = "mixed") -> vu.Job:
    """One random legal job of operation ``op`` over ``length`` elements (ROPE: ``length`` rounded to whole heads
    of a random HALF; TOPK: a random K) with X words of ``style`` (:func:`vecunit_words`)."""
    p = vu.build(params)
    flags = int(rng.integers(0, 8))
    if op == "QUANT":
        return _vu_job(op, length, vecunit_words(rng, length, style), vecunit_scales(rng, length), flags=flags)
    if op == "DEQ":
        parts = int(rng.integers(1, p["PARTS_MAX"] + 1))
        res = bool(flags & vu.FLAG["RES"])
        per = parts + res
        c = np.zeros((length, per), np.int64)
        c[:, 0] = vecunit_scales(rng, length, shift=int(rng.choice([16, 24, 32])))
        c[:, 1:] = rng.integers(0, 1 << 32, (length, per - 1))        # ignored by the core
        return _vu_job(op, length, vecunit_words(rng, length * per, style), c.reshape(-1), flags=flags, parts=parts,
                       wmask=int(rng.integers(0, 1 << 32)))
    if op == "NORMQ":
        x = vecunit_words(rng, length, style)
        nm = min(round((1 << VU_NORM_SHIFT) / length), (1 << 32) - 1)
        c = np.concatenate([rng.integers(0, 1 << 32, length), vecunit_scales(rng, length, shift=26)])
        return _vu_job(op, length, np.concatenate([x, x]), c, flags=flags, eps=int(rng.integers(0, 1 << 32)),
                       norm_mult=int(rng.choice([nm, int(rng.integers(0, 1 << 32))])))
    if op == "ROPE":
        half = int(rng.choice([h for h in (1, 2, 4, 8, 16, 32, 64, 128) if h <= p["HALF_MAX"]]))
        heads = max(1, length // (2 * half))
        n = 2 * half * heads
        pos = int(rng.choice([0, (1 << 32) - 1, int(rng.integers(0, 1 << 32)), int(rng.integers(0, 4096))]))
        return _vu_job(op, n, vecunit_words(rng, n, style), rng.integers(0, 1 << 32, n), half=half, pos=pos)
    if op == "SILU":
        g = np.where(rng.random(length) < 0.5, rng.integers(-(20 << 16), 20 << 16, length),
                     vecunit_words(rng, length, style))
        x = np.stack([g, vecunit_words(rng, length, style)], 1).reshape(-1)
        return _vu_job(op, length, x, rng.integers(0, 1 << 32, 2 * length))
    if op == "TOPK":
        x = vecunit_words(rng, length, style)
        if rng.random() < 0.5:
            x = rng.integers(-3, 4, length)                             # many ties
        k = int(rng.integers(1, min(p["K_MAX"], length) + 1))
        return _vu_job(op, length, x, rng.integers(0, 1 << 32, length), k=k)
    raise ValueError(f"vecunit: no operation {op!r}; one of {VU_OPS}")


def vecunit_directed(rng: np.random.Generator, params: dict) -> list[vu.Job]:
    """The edge jobs: QUANT of the int32 extremes at SHIFT 0 and 63 (both plane settings); DEQ with PARTS_MAX parts,
    every weight, a residual and both saturations; NORMQ with m = 0 (a zero row), with the largest sums, with
    a tiny row (r at its top) and a typical one; ROPE at HALF 1 and HALF_MAX, POS 0 and 2**32-1, the extremes
    rotated by an eighth of a turn (saturating); SILU beyond +-16 and saturating; TOPK with ties and K = LEN."""
    p = vu.build(params)
    e = np.array(I32_EDGES, np.int64)
    ne = len(e)
    pl = vu.FLAG["PLANES2"]
    words0 = np.tile(np.array([1 | 0 << 16, 0xFFFF | 0 << 16, 0xFFFF | 63 << 16, 1 | 63 << 16], np.int64), ne)
    jobs = [_vu_job("QUANT", 4 * ne, np.repeat(e, 4), words0, flags=pl),
            _vu_job("QUANT", 4 * ne, np.repeat(e, 4), words0),
            _vu_job("QUANT", 32, vecunit_words(rng, 32, "small"), vu_scale_words(np.full(32, 1 / (0.03 * 65536))),
                    flags=pl)]
    parts = p["PARTS_MAX"]
    big = np.tile(np.array([(1 << 31) - 1, -(1 << 31)], np.int64), (4, parts + 1))[:, :parts + 1]
    x = np.concatenate([big, vecunit_words(rng, 4 * (parts + 1), "wide").reshape(4, parts + 1)])
    c = np.zeros((8, parts + 1), np.int64)
    c[:, 0] = [0xFFFF, 1 << 16 | 0xFFFF, 63 << 16 | 0xFFFF, 0, 16 << 16 | 0x8000, 8 << 16 | 0xFFFF, 1, 40 << 16 | 9]
    jobs += [_vu_job("DEQ", 8, x.reshape(-1), c.reshape(-1), flags=vu.FLAG["RES"], parts=parts, wmask=0x5555),
             _vu_job("DEQ", 8, x[:, :parts].reshape(-1), c[:, :parts].reshape(-1), flags=vu.FLAG["SAT16"],
                     parts=parts, wmask=(1 << 32) - 1),
             vu.deq_job(rng.integers(-(1 << 20), 1 << 20, (min(2, parts), 24)),
                        vu_scale_words(np.full(24, 2.0 ** -12)), 0b01,
                        residual=vecunit_words(rng, 24, "small"), sat16=False),
             vu.deq_job(rng.integers(-(1 << 20), 1 << 20, (1, 16)), vu_scale_words(np.full(16, 2.0 ** -4)), 0,
                        sat16=True)]
    n = 16
    w = vu_scale_words(np.full(n, 1 / (0.05 * 65536)))
    edges = np.resize(e, n)
    jobs += [vu.normq_job(np.zeros(n, np.int64), w, 0),
             _vu_job("NORMQ", n, np.concatenate([edges, edges]), np.concatenate([np.zeros(n, np.int64), w]),
                     flags=pl, eps=(1 << 32) - 1, norm_mult=(1 << 32) - 1),
             vu.normq_job(np.resize(np.array([1, -1, 0], np.int64), n), w, 0),
             vu.normq_job(vecunit_words(rng, 64, "small"), vu_scale_words(np.full(64, 1 / (0.04 * 65536))),
                          round(1e-6 * 2 ** 32))]
    hm = p["HALF_MAX"]
    turns = vu_turns(10000.0 ** (-np.arange(hm) / hm))
    jobs += [vu.rope_job(vecunit_words(rng, 2, "wide"), turns[:1], 0, 1),
             vu.rope_job(vecunit_words(rng, 2 * hm, "mixed"), turns, (1 << 32) - 1, hm),
             vu.rope_job(np.full(2, -(1 << 31)), [1 << 29], 1, 1),             # an eighth of a turn: |y| > 2**31
             vu.rope_job(vecunit_words(rng, 4 * min(32, hm), "small"), turns[:min(32, hm)], 1234, min(32, hm))]
    g = np.array([-(1 << 31), -(17 << 16), -(16 << 16) - 1, -(16 << 16), -(16 << 16) + 1, -1, 0, 1, (16 << 16) - 1,
                  16 << 16, (16 << 16) + 1, 17 << 16, (1 << 31) - 1], np.int64)
    jobs += [vu.silu_job(g, np.resize(e, len(g))), vu.silu_job(g, np.full(len(g), (1 << 31) - 1)),
             vu.silu_job(vecunit_words(rng, 32, "small"), vecunit_words(rng, 32, "small"))]
    k = min(p["K_MAX"], 8)
    jobs += [vu.topk_job(np.zeros(k, np.int64), k), vu.topk_job(np.resize(e, k), k),
             vu.topk_job(np.array([5, 7, 7, 5, 9, 7, -1, 9, 9, 5], np.int64), min(p["K_MAX"], 10)),
             vu.topk_job(vecunit_words(rng, 64, "wide"), p["K_MAX"])]
    return jobs


def vecunit_errors(rng: np.random.Generator, params: dict) -> list[vu.Job]:
    """One job per ERR bit and edge of its check: BAD_OP (OP 6 and 2**32-1), BAD_LEN (0, LEN_MAX + 1), BAD_PARTS
    (0, PARTS_MAX + 1), BAD_HALF (0, HALF_MAX + 1, LEN not whole heads), BAD_K (0, K_MAX + 1, K > LEN), then
    SHORT_STREAM and LONG_STREAM (one beat missing or extra; a frame of one beat) for every operation. A refused
    job's frame is four beats (the core takes none of them)."""
    p = vu.build(params)
    x4, c4 = vecunit_words(rng, 4), rng.integers(0, 1 << 32, 4)
    jobs = [vu.Job(len(VU_OPS), 4, x4, c4), vu.Job((1 << 32) - 1, 4, x4, c4),
            _vu_job("QUANT", 0, x4, c4), _vu_job("QUANT", p["LEN_MAX"] + 1, x4, c4),
            _vu_job("DEQ", 4, x4, c4, parts=0), _vu_job("DEQ", 4, x4, c4, parts=p["PARTS_MAX"] + 1),
            _vu_job("ROPE", 4, x4, c4, half=0),
            _vu_job("ROPE", min(2 * p["HALF_MAX"] + 2, p["LEN_MAX"]), x4, c4, half=p["HALF_MAX"] + 1),
            _vu_job("ROPE", 6, x4, c4, half=2),
            _vu_job("TOPK", 4, x4, c4, k=0), _vu_job("TOPK", 4 * p["K_MAX"] + 4, x4, c4, k=p["K_MAX"] + 1),
            _vu_job("TOPK", 2, x4, c4, k=3) if p["K_MAX"] >= 3 else _vu_job("TOPK", 1, x4, c4, k=2)]
    for op in VU_OPS:
        j = vecunit_job(rng, op, 8, p)
        for cut in (j.x.size - 1, j.x.size + 1, 1):
            if cut != j.x.size:
                jobs.append(replace(j, x=np.resize(j.x, cut), c=np.resize(j.c, cut)))
    return jobs


def vecunit_set(seed: int, count: int, params: dict | None = None) -> list[vu.Job]:
    """The vecunit agreement jobs, cheapest first (a slow stage runs a prefix): the edge jobs
    (:func:`vecunit_directed`), the refused and mis-framed jobs (:func:`vecunit_errors`), then ``count`` random
    jobs (the operations in turn, 1..64 elements, X words small, wide, at the edges or mixed)."""
    p = vu.build(params)
    rng = np.random.default_rng(seed)
    jobs = vecunit_directed(rng, p) + vecunit_errors(rng, p)
    styles = ("mixed", "small", "wide", "edge")
    for i in range(count):
        op = VU_OPS[i % len(VU_OPS)]
        jobs.append(vecunit_job(rng, op, int(rng.integers(1, 65)), p, style=styles[(i // len(VU_OPS)) % 4]))
    return jobs
