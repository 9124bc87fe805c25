"""verifier testbench classes: the chain TB (:class:`VerifierTB`) and the tree TB (:class:`TreeTB`).

Shared by the cocotb test modules of tb/verifier (chain rounds, tree rounds, losslessness). Each class holds
the clock, reset and AXI-Lite master (``AxilTB``), an AxiStreamSource on ``s_axis``, the RNG state the core
holds, and runs one round as a host streams it, every result register against ``hls_ref.verifier``. The
build parameters (LANES, GAMMA_MAX, TREE_MAX, VOCAB_MAX) are read from the PARAMS and VOCAB_MAX registers
by :meth:`VerifierTB.reset`, as the driver does.
"""
from __future__ import annotations

import logging

import numpy as np
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from hls_ref import rng as golden_rng
from hls_ref import verifier as gv
from hwcontract import formats as fmt
from hwcontract.formats import LOGIT_NEG_INF
from hwcontract.regmap import TREE_MAX_NODES, core
from specdec.sim.device import AxilTB
from tb.common import QUIET, Stimulus

CMAP = core("verifier")
ERRF = CMAP.reg("ERR")
RESULTS = CMAP.group("RESULT").registers + ("ERR",)   # checked against the golden Decision; ERR last
FIELDS = tuple(r.lower() for r in RESULTS)


def emask(name: str) -> int:
    return ERRF.field(name).mask


class VerifierTB(AxilTB):
    """Chain rounds: configure, START, stream the rows as a host does, compare with ``hls_ref.verifier``.

    ``stim`` sets idle cycles on the AXI-Lite master and the row stream, and backpressure on BREADY/RREADY.
    ``lanes``, ``gamma_max``, ``tree_max``, ``vocab_max`` and ``poll_limit`` are known after :meth:`reset`.
    """

    def __init__(self, dut, stim: Stimulus = QUIET) -> None:
        super().__init__(dut, CMAP)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.src.log.setLevel(logging.WARNING)
        stim.apply(self, sources=[self.src])
        self.state = np.array([0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978], dtype=np.uint32)
        self.ratios: list[tuple[int, float]] = []
        self.kinds: dict[str, int] = {}

    async def reset(self) -> None:
        """Reset, then read the build parameters from PARAMS and VOCAB_MAX."""
        await super().reset()
        params = await self.read_fields("PARAMS")
        self.lanes, self.gamma_max, self.tree_max = params["LANES"], params["GAMMA_MAX"], params["TREE_MAX"]
        self.vocab_max = await self.read("VOCAB_MAX")
        # a STATUS read takes >= 4 cycles; the longest wait is a sample (two passes over the buffer)
        self.poll_limit = 500 + 2 * -(-self.vocab_max // self.lanes)

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

    async def wait_rows(self, n: int) -> dict:
        """Poll until the core has taken ``n`` rows in full (ROWS) or stopped; the last STATUS."""
        for _ in range(self.poll_limit):
            taken = await self.read("ROWS") >= n
            st = await self.read_fields("STATUS")     # ROWS and EMPTY_ROW change in the same cycle
            if st["ERROR"] or st["DONE"] or taken:
                return st
        raise AssertionError(f"row {n} never taken")

    async def wait_stop(self) -> dict:
        for _ in range(self.poll_limit):
            st = await self.read_fields("STATUS")
            if st["DONE"] or st["ERROR"] or not st["BUSY"]:
                return st
        raise AssertionError("round never stopped")

    async def results(self) -> dict:
        return {f: await self.read(r) for f, r in zip(FIELDS, RESULTS, strict=True)}

    def _tally(self, p, q, draft, greedy, inv_temp, want) -> None:
        """Count the paths a round took (coverage of the test set)."""
        g = len(draft)
        if want.err:
            kind = "error"
        elif greedy:
            kind = "greedy_all" if want.n_accept == g else "greedy_reject"
        elif want.n_accept == g:
            kind = "bonus"
        else:
            i = want.n_accept
            ztp, ztq = fmt.temper(p[i], inv_temp), fmt.temper(q[i], inv_temp)
            mp, sp = gv.row_stats(ztp, self.lanes)
            mq, sq = gv.row_stats(ztq, self.lanes)
            w = np.maximum(gv._weights(ztp, mp) * sq - gv._weights(ztq, mq) * sp, 0)
            kind = "reject_fallback" if not w.any() else "reject"
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    async def run_round(self, p, q, draft, greedy, inv_temp, check=True) -> dict:
        """Stream one round as a host would and compare every result register with the golden model."""
        p = np.asarray(p)
        vocab = p.shape[1]
        g = len(draft)
        await self.configure(vocab, draft, greedy, inv_temp)
        await self.write("CTRL", START=1)
        st = await self.read_fields("STATUS")
        if not st["ERROR"]:
            for i in range(g + 1):
                await self.send(self.beats(p[i]))
                if not greedy and i < g:
                    st = await self.wait_rows(2 * i + 1)   # the row's end decides whether q_i is wanted
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
                bound = gv.stream_bound(want, vocab, self.lanes)
                model = gv.chain_rtl_cycles(want, vocab, self.lanes, greedy)
                assert active == model, f"active cycles {active} != chain_rtl_cycles {model} (bound {bound})"
                assert active >= bound
                self.ratios.append((vocab, active / bound))
                self.last_cycles = {"cycles_busy": busy, "cycles_stall": stall, "cycles": active,
                                    "bound_cycles": bound, "ratio": active / bound}
        return got


TREE_FIELDS = FIELDS + ("node", "path_lo", "path_hi")
TREE_RESULTS = RESULTS + ("CUR_NODE", "PATH_LO", "PATH_HI")


class Recorder:
    """Rows by node that remember which nodes the golden model asked for, in order."""

    def __init__(self, rows) -> None:
        self.rows, self.asked = rows, []

    def __getitem__(self, v):
        self.asked.append(int(v))
        return self.rows[v]


class TreeTB(VerifierTB):
    """Tree rounds (CONFIG.TREE = 1) as well as chain rounds, one RNG stream across both."""

    def __init__(self, dut, stim: Stimulus = QUIET) -> None:
        super().__init__(dut, stim)
        self.tree_kinds: dict[str, int] = {}

    async def reset(self) -> None:
        await super().reset()
        self.poll_limit += 8 * self.tree_max

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
        return {f: await self.read(r) for f, r in zip(TREE_FIELDS, TREE_RESULTS, strict=True)}

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
                model = gv.tree_rtl_cycles(want, vocab, self.lanes, greedy, parents)
                assert active == model, f"{ctx}: active cycles {active} != tree_rtl_cycles {model}"
                nb = -(-vocab // self.lanes)
                self.ratios.append((vocab, active / (want.rows * nb + want.sample_beats)))
        return got
