"""verifier: cocotb tests of the RTL (fpga/verifier.py) against the golden model (hls_ref.verifier).

The coroutines run inside the simulator; ``test_verifier`` (pytest) builds the core per parameter set and
runs them. Every round's result registers are compared with ``hls_ref.verifier.verify`` fed with the
same xoshiro128++ words the core takes (the RNG state is kept across rounds here, as on the core).

Host protocol used here (what a driver must do): write the configuration, CTRL.START, then stream one
row per AXI-Stream frame. After the row that completes a tested position (q_i in sampling mode, p_i in
greedy mode) poll until ``N_ACCEPT > i`` (accepted: stream the next rows) or ``STATUS.DONE``/``ERROR``.
Streaming ahead after a rejection would raise UNEXPECTED_DATA.
"""
from __future__ import annotations

import logging
import os
import random

import cocotb
import numpy as np
import pytest
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from hls_ref import rng as golden_rng
from hwcontract.formats import LOGIT_NEG_INF
from hwcontract.regmap import core
from specdec.backends import simulator as harness
from tb.common import STIMULUS, AxilTB, param

CMAP = core("verifier")
ERRF = CMAP.reg("ERR")
RESULTS = ("N_ACCEPT", "NEXT_TOKEN", "ACCEPT_BITS", "ROWS", "WORDS", "LAST_EP", "LAST_EQ", "LAST_SP",
           "LAST_SQ", "ERR")
FIELDS = ("n_accept", "next_token", "accept_bits", "rows", "words", "last_ep", "last_eq", "last_sp",
          "last_sq", "err")
ROUNDS = int(os.environ.get("VERIFIER_ROUNDS", "500"))   # per idle mode: 1,000 per build
# cocotb names a parametrized test "<name>/<param>=<value>"; the runner's testcase filter anchors at the end
RANDOM_ROUNDS = "random_rounds/idle=none,random_rounds/idle=random"


def emask(name: str) -> int:
    return ERRF.field(name).mask


def golden():
    """hls_ref.verifier (written alongside this testbench)."""
    from hls_ref import verifier
    return verifier


class VerifierTB(AxilTB):
    def __init__(self, dut, idle: str = "none") -> None:
        super().__init__(dut, CMAP)
        self.lanes = param("LANES", 4)
        self.vocab_max = param("VOCAB_MAX", 64)
        self.gamma_max = param("GAMMA_MAX", 16)
        # a STATUS read takes >= 4 cycles; the longest wait is a sample (two passes over the buffer)
        self.poll_limit = 500 + 2 * -(-self.vocab_max // self.lanes)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.src.log.setLevel(logging.WARNING)
        if STIMULUS[idle]:
            self.src.set_pause_generator(STIMULUS[idle]())
        self.state = np.array([0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978], dtype=np.uint32)
        self.ratios: list[tuple[int, float]] = []
        self.kinds: dict[str, int] = {}

    async def seed(self, state) -> None:
        self.state = np.asarray(state, dtype=np.uint32)
        for k, w in enumerate(self.state):
            await self.write(f"SEED{k}", int(w))
        await self.write("CTRL", LOAD_SEED=1)

    def beats(self, row, nbeats: int | None = None) -> bytes:
        """A row as LANES int16 codes per beat, little-endian, padded with -inf (``nbeats`` overrides)."""
        row = np.asarray(row, dtype=np.int64)
        nb = -(-row.size // self.lanes) if nbeats is None else nbeats
        codes = np.full(nb * self.lanes, LOGIT_NEG_INF, dtype="<i2")
        n = min(row.size, codes.size)
        codes[:n] = row[:n]
        return codes.tobytes()

    async def send(self, data: bytes) -> None:
        await self.src.send(AxiStreamFrame(tdata=data))
        await self.src.wait()

    async def configure(self, vocab, draft, greedy, inv_temp, gamma=None) -> None:
        g = len(draft) if gamma is None else gamma
        await self.write("CONFIG", GREEDY=int(greedy))
        await self.write("GAMMA", g)
        await self.write("VOCAB", vocab)
        await self.write("INV_TEMP", inv_temp)
        d = list(draft) + [0] * (16 - len(draft))
        for k in range((min(len(draft), 16) + 1) // 2):
            await self.write(f"DRAFT{k}", d[2 * k] | (d[2 * k + 1] << 16))

    async def wait_position(self, i: int) -> dict:
        """Poll until position i is decided: accepted (N_ACCEPT > i) or the round stopped."""
        for _ in range(self.poll_limit):
            st = await self.read_fields("STATUS")
            if st["DONE"] or st["ERROR"]:
                return st
            if await self.read("N_ACCEPT") > i:
                return st
        raise AssertionError(f"position {i} never decided")

    async def wait_stop(self) -> dict:
        for _ in range(self.poll_limit):
            st = await self.read_fields("STATUS")
            if st["DONE"] or st["ERROR"] or not st["BUSY"]:
                return st
        raise AssertionError("round never stopped")

    async def results(self) -> dict:
        return {f: await self.read(r) for f, r in zip(FIELDS, RESULTS)}

    def _tally(self, p, q, draft, greedy, inv_temp, want) -> None:
        """Count the paths a round took (coverage of the test set)."""
        gv = golden()
        g = len(draft)
        if want.err:
            kind = "error"
        elif greedy:
            kind = "greedy_all" if want.n_accept == g else "greedy_reject"
        elif want.n_accept == g:
            kind = "bonus"
        else:
            i = want.n_accept
            ztp, ztq = gv.temper(p[i], inv_temp), gv.temper(q[i], inv_temp)
            mp, sp = gv.row_stats(ztp, self.lanes)
            mq, sq = gv.row_stats(ztq, self.lanes)
            w = np.maximum(gv._weights(ztp, mp) * sq - gv._weights(ztq, mq) * sp, 0)
            kind = "reject_fallback" if not w.any() else "reject"
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    async def run_round(self, p, q, draft, greedy, inv_temp, check=True) -> dict:
        """Stream one round as a host would and compare every result register with the golden model."""
        gv = golden()
        p = np.asarray(p)
        vocab = p.shape[1]
        g = len(draft)
        nb = -(-vocab // self.lanes)
        await self.configure(vocab, draft, greedy, inv_temp)
        await self.write("CTRL", START=1)
        st = await self.read_fields("STATUS")
        if not st["ERROR"]:
            for i in range(g + 1):
                await self.send(self.beats(p[i]))
                if not greedy and i < g:
                    st = await self.read_fields("STATUS")
                    if st["ERROR"]:
                        break
                    await self.send(self.beats(q[i]))
                if i < g:
                    st = await self.wait_position(i)
                    if st["DONE"] or st["ERROR"]:
                        break
                else:
                    st = await self.wait_stop()
        got = await self.results()
        for name in ("CUR_NODE", "PATH_LO", "PATH_HI"):      # tree-only registers stay 0 in chain mode
            assert await self.read(name) == 0, name
        words, _ = golden_rng.xoshiro128pp(self.state, 2 * (g + 2))
        want = gv.verify(p, q, draft, greedy=greedy, inv_temp=inv_temp, words=words, lanes=self.lanes,
                         vocab_max=self.vocab_max, gamma_max=self.gamma_max)
        if want.words:
            self.state = golden_rng.xoshiro128pp(self.state, want.words)[1]
        exp = {f: int(getattr(want, f)) for f in FIELDS}
        self._tally(p, q, draft, greedy, inv_temp, want)
        if check:
            assert got == exp, f"V={vocab} g={g} greedy={greedy} T={inv_temp} draft={list(draft)}\n got {got}\nwant {exp}"
            st = await self.read_fields("STATUS")
            assert st == {"BUSY": 0, "DONE": int(want.err == 0), "ERROR": int(want.err != 0)}, st
            if want.err == 0:
                busy = await self.read("CYCLES_BUSY")
                stall = await self.read("CYCLES_STALL")
                active = busy - stall
                rows = want.rows
                bound = rows * nb + want.sample_beats
                # this RTL: one extra cycle per row (ROWEND), three per tested sampling position
                # (EXPX, ACC1, ACC2) and two per sample (TDONE, TCALC)
                tested = 0 if greedy else min(g, want.n_accept + 1)
                model = rows * (nb + 1) + 3 * tested + (0 if greedy else 2 + want.sample_beats)
                assert active == model, f"active cycles {active} != model {model} (bound {bound})"
                assert active >= bound
                self.ratios.append((vocab, active / bound))
                self.last_cycles = {"cycles_busy": busy, "cycles_stall": stall, "cycles": active,
                                    "bound_cycles": bound, "ratio": active / bound}
        return got


def _row(rnd: random.Random, base: np.ndarray, noise: float, mask_p: float) -> np.ndarray:
    gv = golden()
    v = base.size
    x = base + np.array([rnd.gauss(0, noise) for _ in range(v)])
    if mask_p and v > 1:
        m = np.array([rnd.random() < mask_p for _ in range(v)])
        m[rnd.randrange(v)] = False     # never an empty row here
        x = np.where(m, -np.inf, x)
    return gv.quantize(x).astype(np.int64)


def make_round(rnd: random.Random, vocab_max: int, gamma_max: int, greedy: bool):
    """Random p/q rows with overlapping distributions (so that some drafts are accepted)."""
    v = rnd.choice([1, 2, 3, rnd.randint(1, vocab_max), rnd.randint(1, vocab_max), vocab_max])
    g = rnd.randint(0, min(gamma_max, 16))
    scale = rnd.choice([0.5, 2.0, 5.0, 40.0, 200.0])
    mask_p = rnd.choice([0.0, 0.0, 0.3, 0.8])
    p, q, draft = [], [], []
    for i in range(g + 1):
        base = np.array([rnd.gauss(0, scale) for _ in range(v)])
        if rnd.random() < 0.1:
            base = np.zeros(v)                      # ties everywhere
        pi = _row(rnd, base, rnd.choice([0.0, 0.1, 1.0]), mask_p)
        qi = _row(rnd, base, rnd.choice([0.1, 1.0, 3.0]), mask_p)
        p.append(pi)
        q.append(qi)
        if i < g:
            live = [j for j in range(v) if qi[j] != LOGIT_NEG_INF]
            if greedy:
                x = int(np.argmax(pi)) if rnd.random() < 0.85 else rnd.randrange(v)
            elif rnd.random() < 0.8 and live:
                z = np.array([qi[j] for j in live], dtype=np.float64) / 256.0
                w = np.exp(z - z.max())
                x = live[int(np.searchsorted(np.cumsum(w / w.sum()), rnd.random()))] if w.sum() > 0 else live[0]
                x = min(x, v - 1)
            else:
                x = rnd.randrange(v)
            draft.append(x)
    inv_temp = rnd.choice([256, 256, 128, 512, 64, rnd.randint(1, 1024), 65535, 1])
    return np.array(p), (None if greedy else np.array(q[:g]).reshape(g, v)), draft, inv_temp


async def _tb(dut, idle="none") -> VerifierTB:
    tb = VerifierTB(dut, idle)
    await tb.reset()
    await tb.seed(tb.state)
    return tb


@cocotb.test()
async def registers(dut):
    """ID, PARAMS, VOCAB_MAX and the reset state."""
    tb = await _tb(dut)
    assert await tb.read("ID") == CMAP.map_hash()
    assert await tb.read_fields("PARAMS") == {"LANES": tb.lanes, "GAMMA_MAX": tb.gamma_max,
                                              "TREE_MAX": param("TREE_MAX", 64)}
    for name in ("CUR_NODE", "PATH_LO", "PATH_HI"):
        assert await tb.read(name) == 0, name
    assert await tb.read("VOCAB_MAX") == tb.vocab_max
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert dut.s_axis_tready.value == 1


@cocotb.test()
@cocotb.parametrize(idle=["none", "random"])
async def random_rounds(dut, idle):
    """Random greedy and sampling rounds, every result register against the golden model."""
    tb = await _tb(dut, idle)
    rnd = random.Random(1000 + tb.lanes + (7 if idle != "none" else 0))
    n_acc = n_rounds = 0
    for k in range(ROUNDS):
        greedy = rnd.random() < 0.35
        p, q, draft, inv_temp = make_round(rnd, tb.vocab_max, tb.gamma_max, greedy)
        got = await tb.run_round(p, q, draft, greedy, inv_temp)
        n_acc += got["n_accept"]
        n_rounds += 1
    r = np.array([x for _, x in tb.ratios])
    rf = np.array([x for v, x in tb.ratios if v == tb.vocab_max] or [np.nan])
    tb.log.info("lanes=%d idle=%s: %d rounds, %d accepted drafts; active cycles / bound: mean %.3f max %.3f; "
                "at V=VOCAB_MAX mean %.3f max %.3f", tb.lanes, idle, n_rounds, n_acc, r.mean(), r.max(),
                rf.mean(), rf.max())
    tb.log.info("paths: %s", tb.kinds)
    assert n_acc > 0


async def _recover(tb: VerifierTB, rnd: random.Random) -> None:
    """SOFT_RESET, check ERR cleared and the configuration kept, re-seed, then one correct round."""
    gamma = await tb.read("GAMMA")
    await tb.write("CTRL", SOFT_RESET=1)
    assert await tb.read("ERR") == 0
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert await tb.read("GAMMA") == gamma
    await tb.seed([rnd.getrandbits(32) | 1 for _ in range(4)])
    greedy = rnd.random() < 0.5
    p, q, draft, t = make_round(rnd, tb.vocab_max, tb.gamma_max, greedy)
    got = await tb.run_round(p, q, draft, greedy, t)
    assert got["err"] == 0


@cocotb.test()
async def error_cases(dut):
    """Each error sets its ERR bit and STATUS.ERROR; SOFT_RESET recovers for a correct round."""
    tb = await _tb(dut)
    rnd = random.Random(77)
    L, vmax, gmax = tb.lanes, tb.vocab_max, tb.gamma_max
    v = max(2 * L + 1, 5) if vmax >= max(2 * L + 1, 5) else vmax
    rowp = np.arange(v, dtype=np.int64) * 7 - 100
    gv = golden()

    async def start_err(p, q, draft, greedy, t, name, gamma=None, vocab=None):
        await tb.configure(p.shape[1] if vocab is None else vocab, draft, greedy, t, gamma=gamma)
        await tb.write("CTRL", START=1)
        st = await tb.read_fields("STATUS")
        assert st == {"BUSY": 0, "DONE": 0, "ERROR": 1}, (name, st)
        assert await tb.read("ERR") == emask(name), name
        for r in RESULTS[:-1]:
            assert await tb.read(r) == 0, (name, r)
        await _recover(tb, rnd)

    p1 = rowp[None, :]
    # BAD_GAMMA (GAMMA above GAMMA_MAX; the golden model agrees)
    d = gv.verify(np.zeros((1, v)), None, [0] * (gmax + 1), greedy=True, inv_temp=256, words=None, lanes=L,
                  vocab_max=vmax, gamma_max=gmax)
    assert d.err == emask("BAD_GAMMA")
    await start_err(p1, None, [0] * min(gmax, 16), True, 256, "BAD_GAMMA", gamma=gmax + 1)
    # BAD_VOCAB: 0 and VOCAB_MAX + 1
    await start_err(p1, None, [], True, 256, "BAD_VOCAB", vocab=0)
    await start_err(p1, None, [], True, 256, "BAD_VOCAB", vocab=vmax + 1)
    # BAD_TOKEN: x_1 = V (x_0 fine); BAD_GAMMA wins over BAD_TOKEN
    await start_err(np.tile(rowp, (3, 1)), None, [0, v], True, 256, "BAD_TOKEN")
    # BAD_TEMP: sampling with INV_TEMP = 0 (greedy ignores it: checked by the recovery rounds)
    await start_err(np.tile(rowp, (2, 1)), np.tile(rowp, (1, 1)), [1], False, 0, "BAD_TEMP")
    # ... and INV_TEMP above 65535 (outside Q8.8: the core must not silently use its low 16 bits)
    await start_err(np.tile(rowp, (2, 1)), np.tile(rowp, (1, 1)), [1], False, 0x10000, "BAD_TEMP")
    # BAD_TOKEN before BAD_TEMP
    await start_err(np.tile(rowp, (2, 1)), np.tile(rowp, (1, 1)), [v], False, 0, "BAD_TOKEN")

    nb = -(-v // L)
    for name, nbeats in (("SHORT_ROW", nb - 1), ("LONG_ROW", nb + 1)):
        if nbeats < 1:
            continue
        await tb.configure(v, [0], False, 256)
        await tb.write("CTRL", START=1)
        await tb.send(tb.beats(rowp, nbeats))
        st = await tb.read_fields("STATUS")
        assert st["ERROR"] == 1 and st["BUSY"] == 0, (name, st)
        err = await tb.read("ERR")
        # LONG_ROW: the beat after the row's last arrives while in error, which adds UNEXPECTED_DATA
        want = emask(name) | (emask("UNEXPECTED_DATA") if name == "LONG_ROW" else 0)
        assert err == want, (name, hex(err))
        await _recover(tb, rnd)

    # UNEXPECTED_DATA: a row while idle (after a finished round), TREADY stays high
    await tb.send(tb.beats(rowp))
    assert await tb.read("ERR") == emask("UNEXPECTED_DATA")
    assert (await tb.read_fields("STATUS"))["ERROR"] == 1
    await tb.send(tb.beats(rowp))       # still accepted (dropped), no hang
    await _recover(tb, rnd)

    # EMPTY_ROW, compared with the golden model: p_0 empty, q_0 empty, bonus row empty, greedy row empty
    empty = np.full(v, LOGIT_NEG_INF, dtype=np.int64)
    cases = [
        (np.stack([empty, rowp]), np.stack([rowp]), [1], False),
        (np.stack([rowp, rowp]), np.stack([empty]), [1], False),
        (np.stack([rowp]), None, [], False),
        (np.stack([empty]), None, [], False),
        (np.stack([rowp, empty]), None, [int(np.argmax(rowp))], True),
    ]
    # bonus row empty after an accepted position: identical p/q and a token accepted for sure (u < 1)
    cases.append((np.stack([rowp, empty]), np.stack([rowp]), [int(np.argmax(rowp))], False))
    for p, q, draft, greedy in cases:
        got = await tb.run_round(p, q, draft, greedy, 256)
        if got["err"] == emask("EMPTY_ROW"):
            await _recover(tb, rnd)
        else:
            assert got["err"] == 0
    assert (await tb.read_fields("STATUS"))["ERROR"] == 0


FULL_VOCABS = (49152, 50257, 50272)


def full_round(rng: np.random.Generator, vocab: int, g: int, kind: str):
    """A round at a real vocabulary size: GPT-2-like logits (a few strong tokens, a long tail, a top-k mask)."""
    gv = golden()
    base = rng.standard_normal(vocab) * 2.0
    base[rng.integers(0, vocab, 8)] += 12.0
    p = [base + rng.standard_normal(vocab) * 0.5 for _ in range(g + 1)]
    q = [base + rng.standard_normal(vocab) * 1.5 for _ in range(g)]
    if kind == "topk":                      # top-k = 2000 on the draft: -inf everywhere else
        for row in q:
            row[np.argsort(row)[:-2000]] = -np.inf
    p, q = gv.quantize(np.array(p)), gv.quantize(np.array(q)).reshape(g, vocab)
    if kind == "greedy":
        draft = [int(np.argmax(p[0])), (int(np.argmax(p[1])) + 1) % vocab][:g]
    elif kind == "last":                    # draft token V-1, the buffers' last lane
        draft = [vocab - 1] * g
    else:
        draft = []
        for i in range(g):
            w = gv.fixed_point_dist(q[i], 256)
            draft.append(int(rng.choice(vocab, p=w)))
    return p, q, draft


@cocotb.test()
async def full_vocab(dut):
    """Rounds at V = 49152, 50257 and 50272 (those <= VOCAB_MAX), every register against the golden model."""
    tb = await _tb(dut)
    rng = np.random.default_rng(tb.lanes)
    for vocab in [v for v in FULL_VOCABS if v <= tb.vocab_max]:
        for kind, g in (("sample", 2), ("topk", 1), ("greedy", 2), ("last", 1)):
            p, q, draft = full_round(rng, vocab, g, kind)
            got = await tb.run_round(p, None if kind == "greedy" else q, draft, kind == "greedy", 256)
            assert got["err"] == 0
    tb.log.info("full vocabulary: active cycles / bound %s", [(v, round(r, 5)) for v, r in tb.ratios])
    tb.log.info("paths: %s", tb.kinds)


@pytest.mark.icarus
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier(sim, waves, lanes):
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                waves=waves, extra_env={} if sim == "verilator" else {"VERIFIER_ROUNDS": "150"})


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
                testcase="full_vocab", waves=waves)


@pytest.mark.icarus
def test_verifier_split_buffer(sim, waves):
    """VOCAB_MAX 4200 at 4 lanes: 1050-beat buffers, split into 1024 + 26; V drawn up to 4200."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": 4, "VOCAB_MAX": 4200},
                testcase=RANDOM_ROUNDS + ",error_cases", waves=waves, extra_env={"VERIFIER_ROUNDS": "10"})


@pytest.mark.long
@pytest.mark.parametrize("lanes", [1, 4])
def test_verifier_10k(sim, waves, lanes):
    """10,000 random rounds per build (5,000 per idle mode)."""
    harness.run("verifier", "tb.verifier.test_verifier", sim, params={"LANES": lanes, "VOCAB_MAX": 64},
                testcase=RANDOM_ROUNDS, waves=waves, extra_env={"VERIFIER_ROUNDS": "5000"})
