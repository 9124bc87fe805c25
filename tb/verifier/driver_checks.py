"""The verifier driver's checks, run unchanged on every backend (golden model, Verilator, Icarus, a board).

Plain synchronous code, as a user would write it on a board: in simulation it runs in a thread started
with ``cocotb.task.bridge``. Every round's :class:`~specdec.drivers.Result` is compared field by field
with ``hls_ref.verifier.verify`` fed with the xoshiro128++ words of the seed, the RNG state carried
across rounds as on the core.
"""
from __future__ import annotations

import numpy as np

from hls_ref import rng as golden_rng
from hls_ref import verifier as golden
from specdec.drivers import Result, Verifier
from hwcontract.formats import inv_temp
from specdec.errors import CoreError

SEED = (0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978)
FIELDS = ("n_accept", "next_token", "accept_bits", "rows", "words", "last_ep", "last_eq", "last_sp", "last_sq")


class Checker:
    """A driver and the RNG state the core should hold; :meth:`round` runs and checks one round.

    Parameters
    ----------
    drv : Verifier
        A driver with its row stream attached.
    exact_cycles : bool
        Require ``CYCLES_BUSY`` to equal the cycle model's bound and ``CYCLES_STALL`` 0 (the golden model);
        otherwise only ``CYCLES_BUSY - CYCLES_STALL >= bound``.
    """

    def __init__(self, drv: Verifier, exact_cycles: bool = False) -> None:
        self.drv, self.exact_cycles = drv, exact_cycles
        self.state = np.array(SEED, dtype=np.uint32)
        drv.seed(SEED)
        self.kinds: dict[str, int] = {}

    def expect(self, draft, p, q, greedy: bool, temperature: float) -> golden.Decision:
        """The golden decision for a round (float logits quantized as the driver does)."""
        pc = golden.quantize(p) if np.issubdtype(np.asarray(p).dtype, np.floating) else p
        qc = None if q is None or greedy else (golden.quantize(q) if np.issubdtype(np.asarray(q).dtype, np.floating)
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
        bound = want.rows * -(-vocab // self.drv.lanes) + want.sample_beats
        if self.exact_cycles:
            assert (got.cycles_busy, got.cycles_stall) == (bound, 0), (got.cycles_busy, got.cycles_stall, bound)
        else:
            assert got.cycles_busy - got.cycles_stall >= bound, (got.cycles_busy, got.cycles_stall, bound)
        st = self.drv.read_fields("STATUS")
        assert st == {"BUSY": 0, "DONE": 1, "ERROR": 0}, st
        g = len(draft)
        kind = ("gamma0" if g == 0 else "greedy" if greedy else "bonus" if got.n_accept == g else "reject")
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return got

    def error(self, bits: list[str], fn, *args, **kw) -> CoreError:
        """``fn`` must raise CoreError with ``bits``; the core stays in error until soft_reset."""
        try:
            fn(*args, **kw)
        except CoreError as e:
            assert e.bits == bits, f"CoreError bits {e.bits}, expected {bits}"
            err = e
        else:
            raise AssertionError(f"no CoreError, expected {bits}")
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
        p, q = golden.quantize(p), golden.quantize(q)
    return draft, p, (None if greedy else q), greedy, temperature


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

    def idle_unchanged(fn, match: str) -> None:
        """A host-side ValueError: nothing reaches the core (still DONE from the last round, ERR 0)."""
        rows = drv.read_reg("ROWS")
        try:
            fn()
        except ValueError as e:
            assert match in str(e), f"{match!r} not in {e}"
        else:
            raise AssertionError(f"no ValueError ({match})")
        assert drv.read_reg("ERR") == 0 and drv.read_reg("ROWS") == rows
        assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 1, "ERROR": 0}

    pv = rnd.normal(size=(3, v))
    bad = pv.copy()
    bad[1, 2] = np.nan
    idle_unchanged(lambda: drv.verify([0, 1], bad, pv[:2]), "nan")
    bad[1, 2] = np.inf
    idle_unchanged(lambda: drv.verify([0, 1], pv, bad[:2]), "inf")
    idle_unchanged(lambda: drv.verify([0, 1], pv, pv[:2, :-1]), f"got (2, {v - 1})")
    idle_unchanged(lambda: drv.verify([0], pv, pv[:1]), "(2, V")
    idle_unchanged(lambda: drv.verify([], np.zeros((1, 0)), None), "(1, 0)")
    idle_unchanged(lambda: drv.verify([0, 1 << 16], pv, pv[:2]), "16 bits")
    idle_unchanged(lambda: drv.verify([0, 1], pv, pv[:2], temperature=-1.0), "-1.0")
    idle_unchanged(lambda: drv.verify([0, 1], pv, pv[:2], temperature=float("nan")), "nan")
    idle_unchanged(lambda: drv.verify([0, 1], pv, pv[:2], temperature=1e-3), "0.001")
    idle_unchanged(lambda: drv.verify([0, 1], pv, None), "q_logits")

    # start errors: decoded bits, every result register 0, soft reset recovers (the RNG state is intact)
    c.error(["BAD_TEMP"], drv.verify, [0, 1], pv, pv[:2], temperature=0.0)
    assert all(drv.read_reg(r) == 0 for r in ("N_ACCEPT", "ROWS", "WORDS", "NEXT_TOKEN"))
    c.recover()
    c.round([1, 0], pv, pv[:2])
    c.error(["BAD_TOKEN"], drv.verify, [0, v], pv, pv[:2])
    c.recover()
    c.error(["BAD_TOKEN"], drv.verify, [v], pv[:2], greedy=True)
    c.recover()
    g = gmax + 1
    c.error(["BAD_GAMMA"], drv.verify, [0] * g, np.zeros((g + 1, v)), np.zeros((g, v)))
    c.recover()
    c.error(["BAD_VOCAB"], drv.verify, [], np.zeros((1, vmax + 1)), None)
    c.recover()
    c.round([0], pv[:2], greedy=True)

    # EMPTY_ROW after an accepted position: the words taken before it still advance the RNG
    pe = np.stack([pv[0], np.full(v, -np.inf)])
    x = int(pv[0].argmax())
    c.error(["EMPTY_ROW"], drv.verify, [x], pe, pe[:1])
    assert (drv.read_reg("N_ACCEPT"), drv.read_reg("ROWS"), drv.read_reg("WORDS")) == (1, 3, 1)
    c.take(1)
    c.recover()
    c.round([1, 0], pv, pv[:2])

    # an all-zero seed: SEED_ZERO, the state is not loaded
    c.error(["SEED_ZERO"], drv.seed, [0, 0, 0, 0])
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
        c.error(bits, lambda: (drv.stream.send(np.zeros(nbeats * L, dtype=np.int16)), drv.wait_done()))
        assert drv.read_fields("STATUS")["BUSY"] == 0
        c.recover()
        c.round([1, 0], pv, pv[:2])
    # a row while idle (after a finished round) is dropped: UNEXPECTED_DATA, the stream never hangs
    c.error(["UNEXPECTED_DATA"], lambda: (drv.stream.send(np.zeros(L, dtype=np.int16)), drv.check()))
    drv.stream.send(np.zeros(L, dtype=np.int16))
    c.recover()
    c.round([1, 0], pv, pv[:2], temperature=0.5)
    return c.kinds
