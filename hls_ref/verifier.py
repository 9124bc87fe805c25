"""verifier: golden model of the speculative-decoding verifier (bit-exact with docs/verifier.md).

Every function here follows ``docs/verifier.md`` bit for bit; the C++ reference, the MyHDL block, the
testbench and the driver are checked against this module. Everything is vectorised over the vocabulary;
the only Python loops run over a round's positions and over the beats of a row where the running max
changes.

Integer widths (why int64 is enough)
------------------------------------
* A tempered code ``zt`` lies in -32768..32767, so a distance ``m - zt`` lies in 0..65535.
* ``e(x) = EXP(m - zt[x]) <= 32768 = 2**15`` and ``S <= V * 2**15 <= 2**31`` (V <= 65536).
* A rejection weight ``w(x) = max(0, e_p(x) * S_q - e_q(x) * S_p) <= 2**15 * 2**31 = 2**46``, so the
  total ``W`` and every running sum of ``w`` are ``<= 2**16 * 2**46 = 2**62 < 2**63``: int64 cumsums
  cannot overflow. ``u * W`` (up to ``2**86``) and ``e_p * S_q * 2**24`` (up to ``2**70``) are computed
  with Python integers.

Resolved details the spec leaves implicit
-----------------------------------------
* ``EMPTY_ROW`` stops the round at the row where it happens: ``rows`` counts that row (a draft row q_i is
  not streamed after an empty p_i), ``n_accept``/``accept_bits``/``words``/``last_*`` keep the values they
  had before that row, ``next_token`` is 0.
* A start-time error (BAD_GAMMA, BAD_VOCAB, BAD_TOKEN, BAD_TEMP) sets only the first failing check's bit.
* Greedy rounds leave ``last_ep``, ``last_eq``, ``last_sp``, ``last_sq`` at 0 (no softmax is computed).
* Draft tokens are unsigned 16-bit register fields: a negative or > 65535 draft token is a host error
  (``ValueError``), not ``BAD_TOKEN``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.formats import (EXP_DEAD, EXP_FRAC, EXP_LIMIT, EXP_PY, EXP_WIDE, LOGIT_NEG_INF, RNG_WORD_BITS, U_BITS,
                                draft_tokens, integers_in, rng_uniform, temper)
from hwcontract.formats import weights as _weights
from hwcontract.regmap import REG_BITS, TREE_MAX_NODES, VERIFIER_MAX_GAMMA, VOCAB_LIMIT, core, flag, integer
from hwcontract.tree import check_field_widths, node_entries

NEG_INF = LOGIT_NEG_INF

_ERR = core("verifier").reg("ERR")


def err_mask(name: str) -> int:
    """The mask of error bit ``name`` in the verifier's ``ERR`` register."""
    return _ERR.field(name).mask


ERR_BAD_GAMMA = err_mask("BAD_GAMMA")
ERR_BAD_VOCAB = err_mask("BAD_VOCAB")
ERR_BAD_TOKEN = err_mask("BAD_TOKEN")
ERR_BAD_TEMP = err_mask("BAD_TEMP")
ERR_EMPTY_ROW = err_mask("EMPTY_ROW")
ERR_BAD_TREE = err_mask("BAD_TREE")


#: What the INV_TEMP register holds (a whole 32-bit register; the core refuses 0 and values above 0xFFFF in
#: sampling mode with BAD_TEMP).
INV_TEMP_REG_MAX = (1 << REG_BITS) - 1


@functools.lru_cache(maxsize=64)
def check_build(lanes: int, vocab_max: int, limit_name: str, limit: int) -> tuple[int, int, int]:
    """``lanes``, ``vocab_max`` and the ``GAMMA_MAX`` or ``TREE_MAX`` ``limit`` as ints, checked against
    hwcontract.params (a ValueError names the parameter, its value and what is allowed), as a build has them."""
    sp = hwparams.spec("verifier")
    return (sp["LANES"].check(lanes, "verifier"), sp["VOCAB_MAX"].check(vocab_max, "verifier"),
            sp[limit_name].check(limit, "verifier"))


def rng_words(words) -> np.ndarray:
    """The RNG words a round may take (None: none) as uint32; a word that is not an integer or does not fit 32
    bits raises ValueError (a cast would wrap 2**32 to 0 and -1 to 0xFFFFFFFF)."""
    if words is None:
        return np.zeros(0, dtype=np.uint32)
    return integers_in("RNG words", words, 0, (1 << RNG_WORD_BITS) - 1).ravel().astype(np.uint32)


def check_inv_temp(inv_temp) -> int:
    """``inv_temp`` as an int that the 32-bit INV_TEMP register holds, or ValueError naming it."""
    v = integer(inv_temp, "inv_temp")
    if not 0 <= v <= INV_TEMP_REG_MAX:
        raise ValueError(f"inv_temp must be in 0..2**32-1 (the INV_TEMP register), got {v}")
    return v


def check_codes(codes: np.ndarray, name: str) -> np.ndarray:
    """A row (or rows) of logit codes as int64; a code outside int16 raises ValueError naming ``name``."""
    return integers_in(f"{name} codes", codes, NEG_INF, -NEG_INF - 1).astype(np.int64, copy=False)


def row_stats(zt: np.ndarray, lanes: int) -> tuple[int, int]:
    """Streaming softmax of one row: the final running max ``m`` and running sum ``S``.

    Follows the beat-by-beat recurrence of docs/verifier.md exactly (including the rounding of every
    rescale): element j sits on beat ``j // lanes``; for each beat ``m' = max(m, bm)``,
    ``S = (S * EXP(m' - m)) >> 15`` (0 while m is -inf), ``S += sum EXP(m' - zt)``, ``m = m'``.

    Parameters
    ----------
    zt : ndarray of int64, shape (V,)
        Tempered codes (-32768 = -inf).
    lanes : int
        Codes per beat, L >= 1.

    Returns
    -------
    m : int
        The row max, -32768 if every code is -inf (the caller raises EMPTY_ROW).
    S : int
        The running sum (0 for an all -inf row).
    """
    m, s, _ = row_scan(zt, lanes)
    return m, s


def row_scan(zt: np.ndarray, lanes: int) -> tuple[int, int, int]:
    """One row's :func:`row_stats` ``(m, S)`` and its rescales of ``S``, in one pass over it: the beats (L codes
    each) whose max exceeds a finite running max. The first beat with a real code sets the max from -inf and
    needs no rescale; so does every beat that does not raise it (``EXP(0) = 32768``).

    Vectorised: per-beat maxima (lane by lane: a reduction along rows of L codes costs more than L
    element-wise maxima), their cumulative max (the running max *at* each beat), then a fold over the
    groups of beats with the same running max. Within a group the rescale is by EXP(0) = 32768, which leaves
    S unchanged, so each group adds the sum of its elements' EXP(running max - zt) (a -inf code: 0).
    """
    if lanes < 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    zt = np.asarray(zt, dtype=np.int64).ravel()
    n = zt.size
    nb = -(-n // lanes)
    if nb == 0:
        return NEG_INF, 0, 0
    if nb * lanes == n:
        beats = zt.reshape(nb, lanes)
    else:
        pad = np.full(nb * lanes, NEG_INF, dtype=np.int64)
        pad[:n] = zt
        beats = pad.reshape(nb, lanes)
    bm = beats[:, 0].copy()                   # -inf (-32768) is below every real code
    for j in range(1, lanes):
        np.maximum(bm, beats[:, j], out=bm)
    run = np.maximum.accumulate(bm)           # running max after each beat
    if run[-1] == NEG_INF:
        return NEG_INF, 0, 0
    change = (run[1:] != run[:-1]).nonzero()[0] + 1         # beats that raise the running max
    n_resc = int((run[change - 1] != NEG_INF).sum())
    # each code against the running max at its beat; a -inf code must weigh 0. Beats before the first real
    # code (running max -inf) index EXP_WIDE's 0 entry; after it, a -inf code's distance is the running max
    # + 32768, at least EXP_LIMIT (EXP = 0 there) unless that max is below -32768 + EXP_LIMIT, when the -inf
    # codes are masked one by one
    d = run[:, None] - beats
    first = int(np.argmax(run != NEG_INF))
    d[:first] = EXP_DEAD
    if run[first] < NEG_INF + EXP_LIMIT:
        np.putmask(d, beats == NEG_INF, EXP_DEAD)
    d = d.reshape(-1)
    starts = np.concatenate(([0], change))
    gsum = np.add.reduceat(EXP_WIDE[d], starts * lanes)
    s = 0
    m = NEG_INF
    for mk, sk in zip(run[starts].tolist(), gsum.tolist()):
        s = 0 if m == NEG_INF else (s * EXP_PY[mk - m]) >> EXP_FRAC
        s += sk
        m = mk
    return int(m), int(s), n_resc


def e_of(zt_x: int, m: int) -> int:
    """``e(x) = EXP(m - zt[x])``, or 0 when ``zt[x]`` (or the row) is -inf."""
    zt_x, m = int(zt_x), int(m)
    if zt_x == NEG_INF or m == NEG_INF:
        return 0
    return EXP_PY[m - zt_x]


@dataclass(frozen=True)
class Decision:
    """The outcome of one verifier round: the values of the core's result registers.

    ``sample_beats`` is the cycle model's sampling cost: for each sample ``ceil(V / L)`` beats for the
    total plus ``x // L + 1`` for the walk (0 in greedy mode). ``rescales`` counts the beats, over the rows
    streamed in sampling mode, that raised a finite running max (:func:`rescales`): each costs the
    hardware ``VER_RESCALE`` cycles.
    """

    n_accept: int
    next_token: int
    accept_bits: int
    rows: int
    words: int
    last_ep: int
    last_eq: int
    last_sp: int
    last_sq: int
    err: int
    sample_beats: int
    path: int = 0       # tree mode: bit j = node j on the accepted path (PATH_HI:PATH_LO)
    node: int = 0       # tree mode: the last node of the accepted path (CUR_NODE)
    rescales: int = 0   # sampling mode: beats of the streamed rows that raised a finite running max


@dataclass(frozen=True)
class Need:
    """What :func:`round_steps` waits for: row ``name``_``i`` (``"p"`` or ``"q"``), and the round's state up
    to it, which is what the core's result registers show meanwhile: ``n_accept``, ``accept_bits``,
    ``rows`` (rows consumed), ``words`` (RNG words taken) and ``last`` (LAST_EP, LAST_EQ, LAST_SP, LAST_SQ).
    """

    name: str
    i: int
    n_accept: int
    accept_bits: int
    rows: int
    words: int
    last: tuple[int, int, int, int]
    path: int = 0


class MissingRow(ValueError):
    """:func:`verify` needs a row it was not given; ``need`` is the round's state up to that row."""

    def __init__(self, need: Need) -> None:
        super().__init__(f"the round needs row {need.name}_{need.i}, which was not given")
        self.need = need


def _sample(w: np.ndarray, u: int) -> int:
    """sample(w): the first x whose running sum of ``w`` exceeds ``t = (u * W) >> 24`` (W > 0)."""
    cs = np.cumsum(w, dtype=np.int64)         # <= 2**62, see the module docstring
    big_w = int(cs[-1])
    t = (int(u) * big_w) >> U_BITS
    return int(np.searchsorted(cs, t, side="right"))


def uniform(words: np.ndarray, k: int) -> int:
    """``u = words[k] >> 8``, the 24-bit uniform of the round's k-th RNG word (a ValueError past the end)."""
    if k >= words.size:
        raise ValueError(f"the round needs more than the {words.size} RNG words given")
    return rng_uniform(words[k])


def verify(p, q, draft, *, greedy: bool, inv_temp: int, words, lanes: int,
           vocab_max: int = VOCAB_LIMIT, gamma_max: int = VERIFIER_MAX_GAMMA) -> Decision:
    """One verifier round, bit-exact with docs/verifier.md.

    Parameters
    ----------
    p : array_like of int16, shape (g+1, V)
        Target rows p_0 .. p_g (logit codes). Rows the round does not consume are ignored.
    q : array_like of int16, shape (g, V), or None
        Draft rows q_0 .. q_{g-1}; ignored (may be None) in greedy mode.
    draft : array_like of int, shape (g,)
        Draft tokens x_0 .. x_{g-1}.
    greedy : bool
        ``CONFIG.GREEDY``.
    inv_temp : int
        ``INV_TEMP`` (Q8.8); unused in greedy mode.
    words : array_like of uint32, or None
        The RNG outputs available, consumed in order (None = none).
    lanes : int
        Codes per stream beat.
    vocab_max, gamma_max : int
        The core's ``VOCAB_MAX`` and ``GAMMA_MAX``.

    Returns
    -------
    Decision

    Raises
    ------
    MissingRow
        A row the round needs was not given (a ``ValueError``; it carries the partial state).
    ValueError
        If the round needs more RNG words than given, a draft token does not fit the 16-bit register
        field, an RNG word 32 bits, ``inv_temp`` the INV_TEMP register or a row's code int16, or a build
        parameter is not one hwcontract.params allows.
    """
    lanes, vocab_max, gamma_max = check_build(lanes, vocab_max, "GAMMA_MAX", gamma_max)
    inv_temp, greedy = check_inv_temp(inv_temp), flag(greedy, "greedy")      # a truthy "no" would run a greedy round
    p = np.asarray(p)
    if p.ndim != 2:
        raise ValueError(f"p must be 2-D (rows, V), got shape {p.shape}")
    vocab = p.shape[1]
    draft = np.array(draft_tokens(draft), dtype=np.int64)      # checked: an int64 cast takes 1.5 as token 1
    g = draft.size

    err = start_error(g, vocab, draft, greedy=greedy, inv_temp=inv_temp, vocab_max=vocab_max,
                      gamma_max=gamma_max)
    if err:     # only the first failing check's bit; every result register 0
        return Decision(0, 0, 0, 0, 0, 0, 0, 0, 0, err, 0)
    steps = round_steps(vocab, draft, greedy=greedy, inv_temp=inv_temp, words=words, lanes=lanes)
    try:
        need = next(steps)
        while True:
            arr = p if need.name == "p" else q
            if arr is None or need.i >= len(arr):
                raise MissingRow(need)
            need = steps.send(arr[need.i])
    except StopIteration as done:
        return done.value


def start_error(g: int, vocab: int, draft, *, greedy: bool, inv_temp: int, vocab_max: int, gamma_max: int) -> int:
    """CTRL.START's checks in order (BAD_GAMMA, BAD_VOCAB, BAD_TOKEN, BAD_TEMP): the first failing bit, or 0.

    ``draft`` is read only when ``g <= gamma_max`` (then it holds the g tokens).
    """
    if g > gamma_max:
        return ERR_BAD_GAMMA
    if not 1 <= vocab <= vocab_max:
        return ERR_BAD_VOCAB
    if g and max(int(x) for x in draft[:g]) >= vocab:
        return ERR_BAD_TOKEN
    if not greedy and not 0 < int(inv_temp) <= 0xFFFF:
        return ERR_BAD_TEMP
    return 0


def round_steps(vocab: int, draft, *, greedy: bool, inv_temp: int, words, lanes: int):
    """The round of :func:`verify` after its start checks, as a generator fed one row at a time.

    Yields a :class:`Need` for each row the round consumes, in stream order, and takes the row (int
    codes, shape (V,)) through ``send``; returns the :class:`Decision`. A register model drives it as rows
    arrive, so each row is processed once.
    """
    draft = np.asarray(draft, dtype=np.int64).ravel()
    g = draft.size
    words = rng_words(words)

    def row(name: str, i: int):
        r = check_codes((yield Need(name, i, n_accept, accept_bits, rows, nw, tuple(last))), f"row {name}_{i}")
        if r.shape != (vocab,):
            raise ValueError(f"row {name}_{i} has shape {r.shape}, expected ({vocab},)")
        return r

    n_accept = accept_bits = rows = 0
    nw = 0
    last = [0, 0, 0, 0]  # ep, eq, sp, sq
    if greedy:
        for i in range(g + 1):
            z = yield from row("p", i)
            rows += 1
            if (z == NEG_INF).all():
                return Decision(n_accept, 0, accept_bits, rows, 0, 0, 0, 0, 0, ERR_EMPTY_ROW, 0)
            a = int(np.argmax(z))             # lowest index on ties
            if i < g and a == int(draft[i]):
                n_accept += 1
                accept_bits |= 1 << i
                continue
            return Decision(n_accept, a, accept_bits, rows, 0, 0, 0, 0, 0, 0, 0)

    nbeats = -(-vocab // lanes)

    def take() -> int:
        nonlocal nw
        u = uniform(words, nw)
        nw += 1
        return u

    def empty() -> Decision:
        return Decision(n_accept, 0, accept_bits, rows, nw, *last, ERR_EMPTY_ROW, 0, rescales=resc)

    resc = 0
    for i in range(g):
        ztp = temper((yield from row("p", i)), inv_temp)
        rows += 1
        mp, sp, n_resc = row_scan(ztp, lanes)
        resc += n_resc
        if mp == NEG_INF:
            return empty()
        ztq = temper((yield from row("q", i)), inv_temp)
        rows += 1
        mq, sq, n_resc = row_scan(ztq, lanes)
        resc += n_resc
        if mq == NEG_INF:
            return empty()
        x = int(draft[i])
        ep, eq = e_of(ztp[x], mp), e_of(ztq[x], mq)
        last = [ep, eq, sp, sq]
        u = take()
        if u * eq * sp < (ep * sq) << U_BITS:
            n_accept += 1
            accept_bits |= 1 << i
            continue
        wp = _weights(ztp, mp)
        w = np.maximum(wp * sq - _weights(ztq, mq) * sp, 0)
        if not w.any():
            w = wp
        x_next = _sample(w, take())
        return Decision(n_accept, x_next, accept_bits, rows, nw, *last, 0, nbeats + x_next // lanes + 1,
                        rescales=resc)

    ztp = temper((yield from row("p", g)), inv_temp)
    rows += 1
    mp, sp, n_resc = row_scan(ztp, lanes)
    resc += n_resc
    if mp == NEG_INF:
        return empty()
    last[2] = sp
    x_next = _sample(_weights(ztp, mp), take())
    return Decision(n_accept, x_next, accept_bits, rows, nw, *last, 0, nbeats + x_next // lanes + 1,
                    rescales=resc)


# ------------------------------------------------------------------------------------------------
# Tree mode (CONFIG.TREE = 1)
# ------------------------------------------------------------------------------------------------

def tree_start_error(parents, tokens, vocab: int, *, greedy: bool, inv_temp: int, vocab_max: int,
                     tree_max: int) -> int:
    """CTRL.START's checks in tree mode, in order: BAD_TREE (N = 0 or N > tree_max, or a node i >= 1 whose
    parent is not below i), BAD_VOCAB, BAD_TOKEN (a token of node 1..N-1 not below V), BAD_TEMP.

    ``parents[0]`` and ``tokens[0]`` (the root's) are ignored."""
    n = len(parents)
    if not 1 <= n <= tree_max or any(int(parents[i]) >= i for i in range(1, n)):
        return ERR_BAD_TREE
    if not 1 <= vocab <= vocab_max:
        return ERR_BAD_VOCAB
    if n > 1 and max(int(t) for t in tokens[1:n]) >= vocab:
        return ERR_BAD_TOKEN
    if not greedy and not 0 < int(inv_temp) <= 0xFFFF:
        return ERR_BAD_TEMP
    return 0


def verify_tree(rows, parents, tokens, *, greedy: bool, inv_temp: int, words, lanes: int,
                vocab_max: int = VOCAB_LIMIT, tree_max: int = TREE_MAX_NODES) -> Decision:
    """One tree-mode round, bit-exact with docs/verifier.md ("Tree mode").

    Parameters
    ----------
    rows : mapping or sequence of int16 rows, indexable by node
        ``rows[v]`` is the target row p_v (logit codes, shape (V,)) at node v: the target's distribution of
        the token after the path root..v. Only the rows of the walked path are read.
    parents, tokens : sequence of int, length N
        The tree: parent and draft token of each node (node 0's are ignored).
    greedy, inv_temp, words, lanes, vocab_max, tree_max :
        As :func:`verify`; ``tree_max`` is the core's ``TREE_MAX``.

    Returns
    -------
    Decision
        ``n_accept`` the path length (root excluded), ``path`` its node bits, ``node`` its last node,
        ``next_token`` the token after it.

    Raises
    ------
    MissingRow
        A row the walk needs is not in ``rows`` (node 0's too: its row gives V).
    ValueError
        As :func:`verify`; a tree of more nodes than a register set holds (``TREE_MAX_NODES + 1``, the one past
        it tests BAD_TREE).
    """
    lanes, vocab_max, tree_max = check_build(lanes, vocab_max, "TREE_MAX", tree_max)
    inv_temp, greedy = check_inv_temp(inv_temp), flag(greedy, "greedy")      # a truthy "no" would run a greedy round
    parents, tokens = node_entries("parents", parents), node_entries("tokens", tokens)   # not int(): 0.7 is no node
    if len(tokens) != len(parents):
        raise ValueError(f"a tree needs one token per node: {len(parents)} parents, {len(tokens)} tokens")
    if len(parents) > TREE_MAX_NODES + 1:
        raise ValueError(f"a tree register set holds at most {TREE_MAX_NODES} nodes ({TREE_MAX_NODES + 1} to test "
                         f"BAD_TREE), got {len(parents)}")
    check_field_widths(parents, tokens)
    first = None
    if parents:
        try:
            first = rows[0]
        except (IndexError, KeyError):
            raise MissingRow(Need("p", 0, 0, 0, 0, 0, (0, 0, 0, 0))) from None
    vocab = int(np.asarray(first).shape[-1]) if first is not None else 0
    err = tree_start_error(parents, tokens, vocab, greedy=greedy, inv_temp=inv_temp, vocab_max=vocab_max,
                           tree_max=tree_max)
    if err:
        return Decision(0, 0, 0, 0, 0, 0, 0, 0, 0, err, 0)
    steps = tree_steps(vocab, parents, tokens, greedy=greedy, inv_temp=inv_temp, words=words, lanes=lanes)
    try:
        need = next(steps)
        while True:
            try:
                row = rows[need.i]
            except (IndexError, KeyError):
                raise MissingRow(need) from None
            need = steps.send(row)
    except StopIteration as done:
        return done.value


def _tree_bits(n_accept: int) -> int:
    """ACCEPT_BITS in tree mode: ``(1 << n_accept) - 1``, as the 32-bit register holds it (all ones past
    depth 32)."""
    return ((1 << n_accept) - 1) & 0xFFFFFFFF


def stream_bound(d: Decision, vocab: int, lanes: int) -> int:
    """The streaming bound of a completed round (docs/verifier.md, "Cycle model"): one cycle per beat of
    every row streamed, plus the sampling beats, ``rows * ceil(V / L) + sample_beats``."""
    return d.rows * -(-int(vocab) // int(lanes)) + d.sample_beats


def _row_cycles(d: Decision, vocab: int, lanes: int) -> int:
    """CHECK, then per row its beats, the stream pipeline's depth and ROWEND."""
    nb = -(-int(vocab) // int(lanes))
    return lat.VER_START + d.rows * (nb + lat.VER_STREAM + 1)


def _sample_cycles(d: Decision, lanes: int) -> int:
    """The sample: TOTAL and WALK (``sample_beats``, each pass plus the sampling pipe's depth), TDONE, TCALC."""
    depth = lat.VER_SAMPLE + lat.ver_prefix(int(lanes))
    return d.sample_beats + 2 * depth + lat.VER_WALK_TAIL + 1 + lat.VER_TCALC


def chain_rtl_cycles(d: Decision, vocab: int, lanes: int, greedy: bool) -> int:
    """``CYCLES_BUSY - CYCLES_STALL`` of a completed chain round on fpga/verifier.py (docs/verifier.md).

    CHECK, then per row ``ceil(V / L)`` beats, ``VER_STREAM`` cycles of pipeline depth and ROWEND. Sampling
    adds ``VER_RESCALE`` per rescale (``d.rescales``), ``VER_TEST`` per tested position (``words - 1`` of
    them: each tested position takes one word and the sample one more) and the sample: TOTAL and WALK
    (``sample_beats`` plus the sampling pipe's depth each, WALK ``VER_WALK_TAIL`` more), TDONE and TCALC.
    The constants are ``hwcontract.latency``'s.
    """
    base = _row_cycles(d, vocab, lanes)
    if greedy:
        return base
    return base + lat.VER_RESCALE * d.rescales + lat.VER_TEST * (d.words - 1) + _sample_cycles(d, lanes)


def tree_rtl_cycles(d: Decision, vocab: int, lanes: int, greedy: bool, parents) -> int:
    """``CYCLES_BUSY - CYCLES_STALL`` of a completed tree round on fpga/verifier.py (docs/verifier.md), for the
    tree of ``parents`` (N nodes, root included).

    As :func:`chain_rtl_cycles` for the rows, after TCHECK (``VER_TCHECK`` and one cycle per node of 1..N-1,
    at least one). Greedy mode adds THIT (``VER_HIT``) per row; sampling adds the rescales, TPICK
    (``VER_PICK``), TREAD and TEST per tested child (``words - 1`` of them), one TPICK that finds no child left,
    and the sample. THIT and TPICK also read one node a cycle (:func:`tree_scan_nodes`).
    """
    base = (_row_cycles(d, vocab, lanes) + lat.VER_TCHECK + max(len(parents) - 1, 1)
            + tree_scan_nodes(d, parents, greedy))
    if greedy:
        return base + lat.VER_HIT * d.rows
    tests = d.words - 1
    return (base + lat.VER_RESCALE * d.rescales + (lat.VER_PICK + lat.VER_READ + lat.VER_TEST) * tests
            + lat.VER_PICK + _sample_cycles(d, lanes))


def tree_scan_nodes(d: Decision, parents, greedy: bool) -> int:
    """Nodes THIT or TPICK read over a completed tree round: at each node v of the path the scan reads from
    v + 1 up to the child taken, so the path's nodes before the last read ``d.node`` nodes in all; at the
    last node, v, the scans read on to node N - 1, N - 1 - v nodes, and one more, past the tree, when the last
    scan starts at N (greedy: v = N - 1; sampling: v = N - 1, or node N - 1 is a child of v and so tested
    last)."""
    last = len(parents) - 1
    past = d.node == last or (not greedy and last >= 1 and int(parents[last]) == d.node)
    return last + int(past)


def tree_steps(vocab: int, parents, tokens, *, greedy: bool, inv_temp: int, words, lanes: int):
    """The tree round of :func:`verify_tree` after its start checks, as a generator fed one row at a time.

    Yields a :class:`Need` ``("p", v)`` for the row of each node v the walk reaches (``path`` holds the
    accepted nodes so far), takes the row through ``send`` and returns the :class:`Decision`.

    At node v, after its row: greedy mode takes the first child (in node order) whose token is the row's
    argmax. Sampling mode tries the children in node order with recursive rejection sampling against
    point-mass draft distributions: child c with token x is accepted when ``u * S' < e_p(x) * 2**24``,
    where ``S' = S_p - R`` (0 if R >= S_p) and R is the sum of e_p over the children rejected so far at
    v; a rejected child's token is removed (its weight becomes 0). When no child is accepted, NEXT_TOKEN is
    sampled from the weights left (e_p with the rejected tokens removed; at a leaf, e_p itself).
    ACCEPT_BITS is ``(1 << n_accept) - 1`` truncated to the register's 32 bits.
    """
    parents = [int(p) for p in parents]
    tokens = [int(t) for t in tokens]
    n = len(parents)
    kids: list[list[int]] = [[] for _ in range(n)]
    for j in range(1, n):
        kids[parents[j]].append(j)
    words = rng_words(words)
    nbeats = -(-vocab // lanes)
    v = 0
    n_accept = path = rows = nw = 0
    last = [0, 0, 0, 0]

    def take() -> int:
        nonlocal nw
        u = uniform(words, nw)
        nw += 1
        return u

    def done(next_token: int, err: int = 0, beats: int = 0) -> Decision:
        return Decision(n_accept, next_token, _tree_bits(n_accept), rows, nw, *last, err, beats, path, v,
                        rescales=resc)

    resc = 0

    while True:
        r = check_codes((yield Need("p", v, n_accept, _tree_bits(n_accept), rows, nw, tuple(last), path)),
                        f"row p of node {v}")
        if r.shape != (vocab,):
            raise ValueError(f"row p of node {v} has shape {r.shape}, expected ({vocab},)")
        rows += 1
        if greedy:
            if (r == NEG_INF).all():
                return done(0, ERR_EMPTY_ROW)
            a = int(np.argmax(r))
            nxt = next((c for c in kids[v] if tokens[c] == a), None)
            if nxt is None:
                return done(a)
        else:
            zt = temper(r, inv_temp)
            mp, sp, n_resc = row_scan(zt, lanes)
            resc += n_resc
            if mp == NEG_INF:
                return done(0, ERR_EMPTY_ROW)
            last = [0, 0, sp, 0]
            w = _weights(zt, mp)
            removed = 0
            nxt = None
            for c in kids[v]:
                x = tokens[c]
                e = int(w[x])
                s_left = sp - removed if sp > removed else 0
                last = [e, 0, s_left, 0]
                if take() * s_left < e << U_BITS:
                    nxt = c
                    break
                removed += e
                w[x] = 0
            if nxt is None:
                if not w.any():
                    return done(0, ERR_EMPTY_ROW)
                x_next = _sample(w, take())
                return done(x_next, 0, nbeats + x_next // lanes + 1)
        v = nxt
        n_accept += 1
        path |= 1 << v
