"""The verifier driver's checks, run unchanged on every backend (golden model, Verilator, Icarus, a board).

Plain synchronous code, as a user would write it on a board: in simulation it runs in a thread started
with ``cocotb.task.bridge``. Every round's :class:`~specdec.hw.drivers.verifier.Result` is compared field by field
with ``hls_ref.verifier.verify`` fed with the xoshiro128++ words of the seed, the RNG state carried
across rounds as on the core.
"""
from __future__ import annotations

import numpy as np

from hls_ref import rng as golden_rng
from hls_ref import verifier as golden
from hwcontract import formats as fmt
from specdec.hw.drivers.verifier import Result, Verifier
from specdec.hw.streams import RowStream
from hwcontract.formats import inv_temp
from specdec.errors import CoreError, SpecdecError

SEED = (0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978)
FIELDS = ("n_accept", "next_token", "accept_bits", "rows", "words", "last_ep", "last_eq", "last_sp", "last_sq")


class Checker:
    """A driver and the RNG state the core should hold; :meth:`round` runs and checks one round.

    Parameters
    ----------
    drv : Verifier
        A driver with its row stream attached.
    exact_cycles : bool
        Require ``CYCLES_STALL`` 0 (the golden model, which has no clock). On every backend
        ``CYCLES_BUSY - CYCLES_STALL`` must equal the RTL's cycle model
        (:func:`hls_ref.verifier.chain_rtl_cycles`).
    """

    def __init__(self, drv: Verifier, exact_cycles: bool = False) -> None:
        self.drv, self.exact_cycles = drv, exact_cycles
        self.state = np.array(SEED, dtype=np.uint32)
        drv.seed(SEED)
        self.kinds: dict[str, int] = {}

    def expect(self, draft, p, q, greedy: bool, temperature: float) -> golden.Decision:
        """The golden decision for a round (float logits quantized as the driver does)."""
        pc = fmt.quantize(p) if np.issubdtype(np.asarray(p).dtype, np.floating) else p
        qc = None if q is None or greedy else (fmt.quantize(q) if np.issubdtype(np.asarray(q).dtype, np.floating)
                                              else q)
        words, _ = golden_rng.xoshiro128pp(self.state, len(draft) + 2)
        return golden.verify(pc, qc, draft, greedy=greedy, inv_temp=0 if greedy else inv_temp(temperature),
                             words=words, lanes=self.drv.lanes, vocab_max=self.drv.vocab_max,
                             gamma_max=self.drv.gamma_max)

    def take(self, words: int) -> None:
        if words:
            self.state = golden_rng.xoshiro128pp(self.state, words)[1]

    def round(self, draft, p, q=None, greedy: bool = False, temperature: float = 1.0) -> Result:
        """One round through the driver, every result field against the golden model."""
        want = self.expect(draft, p, q, greedy, temperature)
        assert want.err == 0, f"a correct round expected, the golden model says ERR={want.err:#x}"
        got = self.drv.verify(draft, p, q, greedy=greedy, temperature=temperature)
        self.take(want.words)
        exp = {f: int(getattr(want, f)) for f in FIELDS}
        have = {f: getattr(got, f) for f in FIELDS}
        vocab = np.asarray(p).shape[1]
        assert have == exp, f"V={vocab} g={len(draft)} greedy={greedy} T={temperature}\n got {have}\nwant {exp}"
        assert got.tokens == [*draft[:got.n_accept], got.next_token]
        model = golden.chain_rtl_cycles(want, vocab, self.drv.lanes, greedy)
        assert got.cycles_busy - got.cycles_stall == model, (got.cycles_busy, got.cycles_stall, model)
        assert got.cycles_stall == 0 or not self.exact_cycles, got.cycles_stall
        st = self.drv.read_fields("STATUS")
        assert st == {"BUSY": 0, "DONE": 1, "ERROR": 0}, st
        g = len(draft)
        kind = ("gamma0" if g == 0 else "greedy" if greedy else "bonus" if got.n_accept == g else "reject")
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return got

    def error(self, bits: list[str], fn, *args, in_round: bool = True, **kw) -> CoreError:
        """``fn`` must raise CoreError with ``bits``. A round (``in_round``: ``verify``, ``verify_tree``) leaves
        the core idle, soft-reset by the driver; anything else (``seed``, raw register and stream traffic)
        leaves it in error until :meth:`recover`."""
        try:
            fn(*args, **kw)
        except CoreError as e:
            assert e.bits == bits, f"CoreError bits {e.bits}, expected {bits}"
            err = e
        else:
            raise AssertionError(f"no CoreError, expected {bits}")
        if in_round:
            assert self.drv.read_reg("ERR") == 0, f"ERR={self.drv.read_reg('ERR'):#x} after a refused round"
            assert self.drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
        else:
            assert self.drv.read_fields("STATUS")["ERROR"] == 1
        return err

    def recover(self) -> None:
        """Soft reset; the configuration and the RNG state survive (the next round checks the latter)."""
        gamma = self.drv.read_reg("GAMMA")
        self.drv.soft_reset()
        assert self.drv.read_reg("ERR") == 0
        assert self.drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
        assert self.drv.read_reg("GAMMA") == gamma


def random_round(rnd: np.random.Generator, lanes: int, vocab_max: int, gamma_max: int):
    """Random float logits (some -inf masked) with overlapping p and q so that drafts are accepted."""
    v = int(rnd.choice([1, 2, lanes + 1, rnd.integers(1, vocab_max + 1), vocab_max]))
    g = int(rnd.integers(0, gamma_max + 1)) if rnd.random() < 0.85 else 0
    greedy = bool(rnd.random() < 0.3)
    scale = float(rnd.choice([0.5, 2.0, 5.0]))
    p = rnd.normal(0, scale, (g + 1, v))
    same = rnd.random() < 0.15                      # q = p: every position accepted, a bonus sample
    q = p[:g].copy() if same else p[:g] + rnd.normal(0, float(rnd.choice([0.3, 2.0, 5.0])), (g, v))
    if rnd.random() < 0.4 and v > 1:                # top-k style masking, never a whole row
        mask = rnd.random((g + 1, v)) < 0.5
        mask[np.arange(g + 1), p.argmax(axis=1)] = False
        p[mask] = -np.inf
        q[mask[:g]] = -np.inf
    draft = []
    for i in range(g):
        if greedy:
            x = int(p[i].argmax()) if rnd.random() < 0.85 else int(rnd.integers(v))
        elif rnd.random() < 0.8:
            w = np.exp(q[i] - q[i].max())
            x = int(rnd.choice(v, p=w / w.sum()))
        else:
            x = int(rnd.integers(v))
        draft.append(x)
    temperature = float(rnd.choice([1.0, 1.0, 0.7, 1.5, 0.3]))
    as_codes = rnd.random() < 0.2                   # integer codes go out as they are
    if as_codes:
        p, q = fmt.quantize(p), fmt.quantize(q)
    return draft, p, (None if greedy else q), greedy, temperature


def host_error(drv: Verifier, fn, match: str) -> None:
    """``fn`` raises a host-side ValueError holding ``match``, and nothing reaches the core: it is still DONE
    from the last round, with ERR 0 and the same ROWS."""
    rows = drv.read_reg("ROWS")
    try:
        fn()
    except ValueError as e:
        assert match in str(e), f"{match!r} not in {e}"
    else:
        raise AssertionError(f"no ValueError ({match})")
    assert drv.read_reg("ERR") == 0 and drv.read_reg("ROWS") == rows
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 1, "ERROR": 0}


def check_tree_inputs(c: Checker, rnd: np.random.Generator) -> None:
    """Tree rounds: NaN or +inf in any node's row is a ValueError naming the node before the round starts,
    whether the walk would reach that row (nodes 0, 2) or not (node 3, under the rejected node 1); the
    core's BAD_TOKEN and BAD_TREE name the nodes."""
    drv = c.drv
    v = min(drv.vocab_max, 2 * drv.lanes + 3)
    p = rnd.normal(size=(4, v))
    a = int(p[0].argmax())
    parents, tokens = [0, 0, 0, 1], [0, (a + 1) % v, a, 0]     # greedy: node 1 rejected, node 2 accepted
    for node, value in ((3, np.nan), (2, np.inf), (0, np.nan)):
        bad = p.copy()
        bad[node, 1] = value
        host_error(drv, lambda: drv.verify_tree(parents, tokens, bad, greedy=True),
                   f"p_logits[{node}, 1] is {value!r} in the target's row at tree node {node}")
    res = drv.verify_tree(parents, tokens, p, greedy=True)
    assert (res.n_accept, res.path, res.next_token, res.rows) == (1, (2,), int(p[2].argmax()), 2), res
    e = c.error(["BAD_TOKEN"], drv.verify_tree, parents, [v, 0, v, 1], p, greedy=True)    # the root's is ignored
    assert f"token {v} at tree node 2 is not below VOCAB = {v}" in str(e), e
    e = c.error(["BAD_TREE"], drv.verify_tree, [0, 0, 2, 1], tokens, p, greedy=True)
    assert "node 2 has parent 2 (each node's parent must be below it)" in str(e), e


class StreamFault(RuntimeError):
    """The fault :class:`FailingStream` injects."""


class FailingStream(RowStream):
    """``inner``, except that sending its row number ``fail_at`` (from 0) raises :class:`StreamFault`."""

    def __init__(self, inner: RowStream, fail_at: int) -> None:
        self.inner, self.fail_at, self.sent = inner, fail_at, 0

    @property
    def compute_s(self) -> float:
        return self.inner.compute_s

    def send(self, codes: np.ndarray) -> None:
        if self.sent == self.fail_at:
            raise StreamFault(f"row {self.sent}: DMA fault (injected)")
        self.sent += 1
        self.inner.send(codes)


def check_round_aborts(c: Checker, pv: np.ndarray) -> None:
    """An exception inside a round (the stream's, at its second row, in chain and tree mode) leaves the core
    idle, and the next round is decided from its own rows; a core someone else left BUSY is refused before
    anything is written."""
    drv, stream = c.drv, c.drv.stream
    v = pv.shape[1]
    a0, a1 = int(pv[0].argmax()), int(pv[1].argmax())
    rounds = {"chain": lambda: drv.verify([a0, a1], pv, greedy=True),            # p_0 accepted, p_1 fails
              "tree": lambda: drv.verify_tree([0, 0, 1], [0, a0, a1], pv, greedy=True)}  # node 1's row fails
    for mode, run in rounds.items():
        drv.stream = FailingStream(stream, 1)
        try:
            run()
        except StreamFault:
            pass
        else:
            raise AssertionError(f"{mode}: the injected stream fault did not reach the caller")
        finally:
            drv.stream = stream
        assert drv.read_reg("ERR") == 0, f"{mode}: ERR={drv.read_reg('ERR'):#x} after an aborted round"
        assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}, mode
        c.round([1, 0], pv, pv[:2])     # checked against the golden model (greedy rounds take no words)

    drv.write_fields("CONFIG", GREEDY=1, TREE=0)
    drv.write_reg("GAMMA", 0)
    drv.write_reg("VOCAB", v)
    drv.start()                         # a round nobody streams rows for
    try:
        drv.verify([1, 0], pv, pv[:2])
    except CoreError as e:
        raise AssertionError(f"a BUSY core raised {e!r}") from e
    except SpecdecError as e:
        assert "BUSY" in str(e) and "soft_reset()" in str(e), e
    else:
        raise AssertionError("a round on a BUSY core was not refused")
    assert drv.read_fields("STATUS")["BUSY"] == 1 and drv.read_reg("GAMMA") == 0
    c.recover()
    c.round([1, 0], pv, pv[:2])


def check_verifier_driver(drv: Verifier, rounds: int = 30, seed: int = 5, exact_cycles: bool = False) -> dict:
    """Random rounds and every error path of the verifier through the driver; returns the path counts."""
    c = Checker(drv, exact_cycles)
    L, vmax, gmax = drv.lanes, drv.vocab_max, drv.gamma_max
    rnd = np.random.default_rng(seed)

    # a bonus round (q = p), a gamma-0 round, a greedy round, then random ones
    v = min(vmax, 3 * L + 1)
    p = rnd.normal(0, 2.0, (4, v))
    res = c.round([int(p[i].argmax()) for i in range(3)], p, p[:3].copy())
    assert res.n_accept == 3 and res.words == 4 and len(res.tokens) == 4
    c.round([], p[:1], None)
    c.round([int(p[0].argmax()), int(p[1].argmin())], p[:3], greedy=True, temperature=0.0)
    for _ in range(rounds):
        c.round(*random_round(rnd, L, vmax, gmax))
    assert {"bonus", "reject", "greedy", "gamma0"} <= set(c.kinds), c.kinds

    pv = rnd.normal(size=(3, v))
    bad = pv.copy()
    bad[1, 2] = np.nan
    host_error(drv, lambda: drv.verify([0, 1], bad, pv[:2]), "p_logits[1, 2] is nan in p_1 (the target's row")
    bad[1, 2] = np.inf
    host_error(drv, lambda: drv.verify([0, 1], pv, bad[:2]), "q_logits[1, 2] is inf in q_1 (the draft's row")
    host_error(drv, lambda: drv.verify([0, 1], pv, pv[:2, :-1]), f"got (2, {v - 1})")
    host_error(drv, lambda: drv.verify([0], pv, pv[:1]), "(2, V")
    host_error(drv, lambda: drv.verify([], np.zeros((1, 0)), None), "(1, 0)")
    host_error(drv, lambda: drv.verify([0, 1 << 16], pv, pv[:2]), "16 bits")
    host_error(drv, lambda: drv.verify([0, 1], pv, pv[:2], temperature=-1.0), "-1.0")
    host_error(drv, lambda: drv.verify([0, 1], pv, pv[:2], temperature=float("nan")), "nan")
    host_error(drv, lambda: drv.verify([0, 1], pv, pv[:2], temperature=1e-3), "0.001")
    host_error(drv, lambda: drv.verify([0, 1], pv, None), "q_logits")
    check_tree_inputs(c, rnd)

    # start errors: decoded bits, every result register 0; the driver soft-resets the core (the RNG state
    # is intact) and names the bad input
    e = c.error(["BAD_TEMP"], drv.verify, [0, 1], pv, pv[:2], temperature=0.0)
    assert all(e.registers[r] == 0 for r in ("N_ACCEPT", "ROWS", "WORDS", "NEXT_TOKEN")), e.registers
    assert "temperature 0.0" in str(e), e
    c.round([1, 0], pv, pv[:2])
    e = c.error(["BAD_TOKEN"], drv.verify, [v, 1, v + 5], np.zeros((4, v)), np.zeros((3, v)))
    assert f"draft tokens {v} at position 0, {v + 5} at position 2 are not below VOCAB = {v}" in str(e), e
    e = c.error(["BAD_TOKEN"], drv.verify, [0, v], pv, greedy=True)
    assert f"draft token {v} at position 1 is not below VOCAB = {v}" in str(e), e
    g = gmax + 1
    e = c.error(["BAD_GAMMA"], drv.verify, [0] * g, np.zeros((g + 1, v)), np.zeros((g, v)))
    assert f"{g} draft tokens" in str(e) and f"GAMMA_MAX = {gmax}" in str(e), e
    e = c.error(["BAD_VOCAB"], drv.verify, [], np.zeros((1, vmax + 1)), None)
    assert f"V = {vmax + 1}" in str(e) and f"VOCAB_MAX = {vmax}" in str(e), e
    c.round([0], pv[:2], greedy=True)

    # EMPTY_ROW after an accepted position: the words taken before it still advance the RNG
    pe = np.stack([pv[0], np.full(v, -np.inf)])
    x = int(pv[0].argmax())
    e = c.error(["EMPTY_ROW"], drv.verify, [x], pe, pe[:1])
    assert (e.registers["N_ACCEPT"], e.registers["ROWS"], e.registers["WORDS"]) == (1, 3, 1), e.registers
    assert "p_1 (the target's row at position 1) has every logit -inf" in str(e), e
    c.take(1)
    c.round([1, 0], pv, pv[:2])

    check_round_aborts(c, pv)

    # an all-zero seed: SEED_ZERO, the state is not loaded
    c.error(["SEED_ZERO"], drv.seed, [0, 0, 0, 0], in_round=False)
    e = c.error(["SEED_ZERO"], drv.verify, [1, 0], pv, pv[:2], in_round=False)     # refused, nothing written
    assert "an all-zero seed()" in str(e) and "call soft_reset() to recover" in str(e), e
    c.recover()
    c.round([1, 0], pv, pv[:2])

    # stream errors, rows sent raw through the stream
    vs = min(vmax, 2 * L + 1)
    nb = -(-vs // L)
    for bits, nbeats in ((["SHORT_ROW"], nb - 1), (["LONG_ROW", "UNEXPECTED_DATA"], nb + 1)):
        drv.write_fields("CONFIG", GREEDY=0)
        drv.write_reg("GAMMA", 1)
        drv.write_reg("VOCAB", vs)
        drv.write_reg("INV_TEMP", 256)
        drv.write_fields("DRAFT0", LO=0, HI=0)
        drv.start()
        c.error(bits, lambda: (drv.stream.send(np.zeros(nbeats * L, dtype=np.int16)), drv.wait_done()),
                in_round=False)
        assert drv.read_fields("STATUS")["BUSY"] == 0
        c.recover()
        c.round([1, 0], pv, pv[:2])
    # a row while idle (after a finished round) is dropped: UNEXPECTED_DATA, the stream never hangs
    c.error(["UNEXPECTED_DATA"], lambda: (drv.stream.send(np.zeros(L, dtype=np.int16)), drv.check()),
            in_round=False)
    drv.stream.send(np.zeros(L, dtype=np.int16))
    # a round on a core left in error by someone else is refused before anything is written
    e = c.error(["UNEXPECTED_DATA"], drv.verify, [1, 0], pv, pv[:2], in_round=False)
    assert "soft_reset()" in str(e) and "earlier" in str(e), e
    c.recover()
    c.round([1, 0], pv, pv[:2], temperature=0.5)
    return c.kinds
