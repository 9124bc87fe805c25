"""Golden backend: register-level models of the cores built on the golden models in ``hls_ref``.

A model answers register accesses exactly as the RTL's AXI-Lite block does (SLVERR for a write to a
read-only register, DECERR outside the map) and runs an operation to completion when it is started, or,
for a streaming core, as its rows arrive (:meth:`GoldenDevice.stream`).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np

from hls_ref import draftengine as de_ref
from hls_ref import kvpage as kv_ref
from hwcontract import params as hwparams
from hwcontract.formats import vu_frame_words
from hwcontract.latency import DE_CHECK, TA_CHECK, de_wpipe
from hwcontract.regmap import DE_OUT_CODES
from hls_ref import rng as rng_ref
from hls_ref import treeattn as ta_ref
from hls_ref import treemask as tm_ref
from hls_ref import vecunit as vu_ref
from hls_ref import verifier as ver_ref

from hwcontract.regmap import RESP_DECERR, RESP_SLVERR, TREE_MAX_NODES, TREE_PARENT_BITS, TREE_TOKEN_BITS, CoreMap, core

from ..errors import BusError, CoreTimeout
from .streams import RegisterDevice, RowStream, WordSink


class RegisterModel(ABC):
    """Register semantics common to every core; subclasses implement ``on_ctrl`` and keep ``ro``."""

    def __init__(self, cmap: CoreMap) -> None:
        self.cmap = cmap
        self.rw = {r.name: r.reset for r in cmap.registers if r.access == "rw"}
        self.ro = {r.name: 0 for r in cmap.registers if r.access == "ro" and r.name != "ID"}
        self.busy = self.done = False
        self.err = 0
        self.frames: list[list[int]] = []       # output frames not yet taken (a core with an m_axis stream)
        self.pending: dict | None = None        # the job or operation waiting for its s_axis frame

    @property
    def has_output(self) -> bool:
        """Whether the core has an output stream (an ``out`` stream in its contract)."""
        return any(st.direction == "out" for st in self.cmap.streams)

    def read(self, offset: int) -> int:
        r = self.cmap.at(offset)
        if r is None:
            raise BusError("read", offset, RESP_DECERR)
        if r.name == "ID":
            return self.cmap.map_hash()
        if r.name == "STATUS":
            return r.encode(BUSY=self.busy, DONE=self.done, ERROR=self.err != 0)
        if r.name == "ERR":
            return self.err
        if r.access == "pulse":
            return 0
        return self.rw[r.name] if r.access == "rw" else self.ro[r.name]

    def write(self, offset: int, value: int) -> None:
        r = self.cmap.at(offset)
        if r is None:
            raise BusError("write", offset, RESP_DECERR)
        if r.access == "ro":
            raise BusError("write", offset, RESP_SLVERR)
        if r.access == "rw":
            self.rw[r.name] = value
            return
        bits = r.decode(value)
        if bits.get("SOFT_RESET"):
            self.busy = self.done = False
            self.err = 0
            self.on_soft_reset()
            return
        if self.err:
            return
        self.on_ctrl(bits)

    def emit(self, words: list[int]) -> None:
        """Queue ``words`` as the frame on the core's output stream (``frames``): BUSY, not DONE, until
        :class:`GoldenSink` takes it, as the RTL's output stage holds it."""
        self.frames.append(words)
        self.busy, self.done = True, False

    def raise_err(self, name: str) -> None:
        self.err |= self.cmap.reg("ERR").field(name).mask

    def on_soft_reset(self) -> None:
        """What else a soft reset clears in this core: its output stage (no frame is left to receive) and the job
        waiting for its input frame; a core with more datapath state extends it."""
        self.frames.clear()
        self.pending = None

    @abstractmethod
    def on_ctrl(self, bits: dict[str, int]) -> None:
        """Act on the CTRL bits written (SOFT_RESET and the error state are handled already)."""


class RngModel(RegisterModel):
    """Register-level model of the rng core over ``hls_ref.rng``."""

    def __init__(self) -> None:
        super().__init__(core("rng"))
        self.state = None

    def _steps(self, n: int) -> None:
        if self.state is None:  # the RTL's state is zero until a seed is loaded: zero outputs
            self.ro["OUT"] = 0
            self.ro["STEPS"] = (self.ro["STEPS"] + n) & 0xFFFFFFFF
            return
        out, self.state = rng_ref.xoshiro128pp(self.state, n)
        if n:
            self.ro["OUT"] = int(out[-1])
            self.ro["XOR"] ^= int(np.bitwise_xor.reduce(out))
        self.ro["STEPS"] = (self.ro["STEPS"] + n) & 0xFFFFFFFF

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if bits["LOAD_SEED"]:
            seed = [self.rw[f"SEED{i}"] for i in range(4)]
            if not any(seed):
                self.raise_err("SEED_ZERO")
                return
            self.state = np.array(seed, dtype=np.uint32)
            self.ro.update(OUT=0, XOR=0, STEPS=0)
            self.done = False
        elif bits["STEP"]:
            self._steps(1)
        elif bits["START"]:
            self._steps(self.rw["COUNT"])
            self.done = True


class VerifierModel(RegisterModel):
    """Register-level model of the verifier core over ``hls_ref.verifier``, with its row stream.

    A round is :func:`hls_ref.verifier.round_steps` (tree mode: :func:`~hls_ref.verifier.tree_steps`) fed
    one row per frame (each row is processed once),
    with the words the RNG state gives (peeked, not taken); while it waits for a row, the state of its
    :class:`~hls_ref.verifier.Need` is what the result registers show (``N_ACCEPT`` grows position by
    position, as on the core). The RNG state advances by ``WORDS`` as they are taken and persists
    across rounds and soft resets.

    ``CYCLES_BUSY`` reports the RTL's cycle model once a round is done
    (:func:`hls_ref.verifier.chain_rtl_cycles`, in tree mode :func:`~hls_ref.verifier.tree_rtl_cycles`)
    and ``ROWS * (ceil(V / L) + 1)`` (the rows' beats and row ends) while it runs or when it stops on an
    error; ``CYCLES_STALL`` is 0: the model has no clock, a beat is never late.

    Parameters
    ----------
    lanes, vocab_max, gamma_max, tree_max : int
        The build parameters ``LANES``, ``VOCAB_MAX``, ``GAMMA_MAX`` and ``TREE_MAX``.
    """

    def __init__(self, lanes: int = 4, vocab_max: int = 64, gamma_max: int = 16, tree_max: int = 64,
                 row_uram: int = 0) -> None:
        super().__init__(core("verifier"))
        # row_uram picks the row buffers' memory (UltraRAM or block RAM): the registers and cycles are the same
        hwparams.check("verifier", dict(LANES=lanes, VOCAB_MAX=vocab_max, GAMMA_MAX=gamma_max, TREE_MAX=tree_max,
                                        ROW_URAM=row_uram))
        self.lanes, self.vocab_max, self.gamma_max, self.tree_max = lanes, vocab_max, gamma_max, tree_max
        self.ro["PARAMS"] = self.cmap.reg("PARAMS").encode(LANES=lanes, GAMMA_MAX=gamma_max, TREE_MAX=tree_max)
        self.ro["VOCAB_MAX"] = vocab_max
        self.state = None  # RNG state; None = never seeded (the RTL's zero state: zero words)
        self.tree_mode = self.greedy = False
        self.tree_parents: list[int] = []      # the tree of the round in progress (its cycle model)

    # -- control ------------------------------------------------------------------------------------
    def on_ctrl(self, bits: dict[str, int]) -> None:
        if self.busy:  # START and LOAD_SEED are ignored inside a round
            return
        if bits["LOAD_SEED"]:
            seed = [self.rw[f"SEED{i}"] for i in range(4)]
            if not any(seed):
                self.raise_err("SEED_ZERO")
                self.done = False
                return
            self.state = np.array(seed, dtype=np.uint32)
        if bits["START"]:
            self._start()

    def _start(self) -> None:
        for name in self.ro:
            if name not in ("PARAMS", "VOCAB_MAX"):
                self.ro[name] = 0
        self.done = False
        g, self.vocab = self.rw["GAMMA"], self.rw["VOCAB"]
        config = self.cmap.reg("CONFIG").decode(self.rw["CONFIG"])
        greedy, tree = bool(config["GREEDY"]), bool(config["TREE"])
        self.tree_mode, self.greedy = tree, greedy
        itemp = self.rw["INV_TEMP"]
        if tree:
            parents, tokens = self.tree_registers()
            err = ver_ref.tree_start_error(parents, tokens, self.vocab, greedy=greedy, inv_temp=itemp,
                                           vocab_max=self.vocab_max, tree_max=self.tree_max)
            n = len(parents) + 1    # a word per child tested on the walk, and one sample
        else:
            draft = [(self.rw[f"DRAFT{k // 2}"] >> (16 * (k % 2))) & 0xFFFF for k in range(min(g, 16))]
            err = ver_ref.start_error(g, self.vocab, draft, greedy=greedy, inv_temp=itemp,
                                      vocab_max=self.vocab_max, gamma_max=self.gamma_max)
            n = g + 2   # every word a round can take: one per position and one sample
        if err:     # every result register stays 0
            self.err |= err
            return
        self.round_state = self.state
        words = np.zeros(n, dtype=np.uint32) if self.state is None else rng_ref.xoshiro128pp(self.state, n)[0]
        if tree:
            self.tree_parents = parents
            self.steps = ver_ref.tree_steps(self.vocab, parents, tokens, greedy=greedy, inv_temp=itemp,
                                            words=words, lanes=self.lanes)
        else:
            self.steps = ver_ref.round_steps(self.vocab, draft, greedy=greedy, inv_temp=itemp, words=words,
                                             lanes=self.lanes)
        self.busy = True
        self._advance(None)

    def tree_registers(self) -> tuple[list[int], list[int]]:
        """The tree the registers hold: NODES parents and tokens (at most TREE_MAX_NODES of each; a NODES
        beyond that is refused by the start check before the lists are read)."""
        n = min(self.rw["NODES"], TREE_MAX_NODES)
        pb, tb = 32 // TREE_PARENT_BITS, 32 // TREE_TOKEN_BITS
        parents = [(self.rw[f"TREE_PARENT{i // pb}"] >> (TREE_PARENT_BITS * (i % pb))) & 0xFF for i in range(n)]
        tokens = [(self.rw[f"TREE_TOKEN{i // tb}"] >> (TREE_TOKEN_BITS * (i % tb))) & 0xFFFF for i in range(n)]
        if self.rw["NODES"] > TREE_MAX_NODES:       # NODES > TREE_MAX: BAD_TREE, whatever the arrays hold
            parents += [0] * (self.rw["NODES"] - n)
            tokens += [0] * (self.rw["NODES"] - n)
        return parents, tokens

    # -- stream ---------------------------------------------------------------------------------------
    def frame(self, codes: np.ndarray) -> None:
        """One AXI-Stream frame: ``codes`` in beats of ``lanes``, TLAST on the last beat only."""
        codes = np.asarray(codes).ravel()
        if codes.size == 0 or codes.size % self.lanes:
            raise ValueError(f"a frame is whole beats of {self.lanes} codes, got {codes.size} codes")
        beats = codes.size // self.lanes
        if not self.busy:  # idle, done or in error: TREADY stays high and every beat is dropped
            self.raise_err("UNEXPECTED_DATA")
            return
        nb = -(-self.vocab // self.lanes)
        if beats != nb:  # TLAST early, or missing on the row's last beat (the rest arrive while in error)
            self.raise_err("SHORT_ROW" if beats < nb else "LONG_ROW")
            if beats > nb:
                self.raise_err("UNEXPECTED_DATA")
            self.busy = False
            return
        self._advance(codes[:self.vocab].astype(np.int16))

    def _advance(self, row: np.ndarray | None) -> None:
        """Feed the round one row (None: start it); the result registers show what the core shows."""
        nb = -(-self.vocab // self.lanes)
        try:
            n = next(self.steps) if row is None else self.steps.send(row)
        except StopIteration as stop:
            d = stop.value
            self.busy = False
            if d.err:
                cycles = d.rows * (nb + 1)
            elif self.tree_mode:
                cycles = ver_ref.tree_rtl_cycles(d, self.vocab, self.lanes, self.greedy, self.tree_parents)
            else:
                cycles = ver_ref.chain_rtl_cycles(d, self.vocab, self.lanes, self.greedy)
            self._set(d.n_accept, d.next_token, d.accept_bits, d.rows, d.words, d.last_ep, d.last_eq, d.last_sp,
                      d.last_sq, cycles, d.path, d.node)
            self.err |= d.err
            self.done = not d.err
            return
        self._set(n.n_accept, 0, n.accept_bits, n.rows, n.words, *n.last, n.rows * (nb + 1), n.path,
                  n.i if self.tree_mode else 0)

    def _set(self, n_accept, next_token, accept_bits, rows, words, ep, eq, sp, sq, cycles, path=0,
             node=0) -> None:
        self.ro.update(N_ACCEPT=n_accept, NEXT_TOKEN=next_token, ACCEPT_BITS=accept_bits, ROWS=rows,
                       WORDS=words, LAST_EP=ep, LAST_EQ=eq, LAST_SP=sp, LAST_SQ=sq, CYCLES_BUSY=cycles,
                       CUR_NODE=node, PATH_LO=path & 0xFFFFFFFF, PATH_HI=path >> 32)
        if self.round_state is not None:
            self.state = rng_ref.xoshiro128pp(self.round_state, words)[1]


class GoldenStream(RowStream):
    """The row stream of a golden model: each :meth:`send` is one frame, taken at once."""

    def __init__(self, model: VerifierModel) -> None:
        self.model = model
        self.compute_s = 0.0

    def send(self, codes: np.ndarray) -> None:
        t0 = time.perf_counter()
        self.model.frame(codes)
        self.compute_s += time.perf_counter() - t0


class TreemaskModel(RegisterModel):
    """Register-level model of the treemask core over ``hls_ref.treemask``, with its word stream.

    CTRL.START (idle or done, no error) clears ROWS, MAX_DEPTH and the cycle counters, then checks NODES
    (BAD_NODES) and the PARENT fields of nodes 1..NODES-1 (BAD_PARENT), as the RTL does; a good tree is
    run at once: its N words are queued as one frame for :class:`GoldenSink`, ``ROWS = N``, ``CYCLES_BUSY``
    is the cycle model ``hls_ref.treemask.cycles(N)`` and ``CYCLES_STALL`` 0 (the model has no clock). As on
    the RTL, whose output stage holds the frame until the stream takes it, the core is BUSY (a START ignored)
    until the sink has received it.

    Parameters
    ----------
    nodes_max : int
        The build parameter ``NODES_MAX`` (1..64).
    """

    def __init__(self, nodes_max: int = 64) -> None:
        super().__init__(core("treemask"))
        hwparams.check("treemask", dict(NODES_MAX=nodes_max))
        self.nodes_max = nodes_max
        self.ro["PARAMS"] = self.cmap.reg("PARAMS").encode(NODES_MAX=nodes_max)

    def parents(self, n: int) -> list[int]:
        """The PARENT fields of nodes 0..n-1 as the registers hold them."""
        per = len(self.cmap.reg("PARENT0").fields)
        return [self.cmap.reg(f"PARENT{k // per}").decode(self.rw[f"PARENT{k // per}"])[f"P{k % per}"]
                for k in range(n)]

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if not bits["START"] or self.busy:
            return
        self.ro.update(ROWS=0, MAX_DEPTH=0, CYCLES_BUSY=0, CYCLES_STALL=0)
        self.done = False
        n = self.rw["NODES"]
        if not 1 <= n <= self.nodes_max:
            self.raise_err("BAD_NODES")
            return
        m = tm_ref.tree_mask(self.parents(n), self.nodes_max)
        if m.err:
            self.err |= m.err
            return
        self.ro.update(ROWS=n, MAX_DEPTH=m.max_depth, CYCLES_BUSY=tm_ref.cycles(n))
        self.emit(tm_ref.stream_words(m))


class GoldenSink(WordSink):
    """The word stream out of a golden model: :meth:`recv` takes the frame it holds, and the model is done."""

    def __init__(self, model: TreemaskModel | DraftengineModel | TreeattnModel | VecunitModel) -> None:
        self.model = model

    def recv(self) -> list[int]:
        if not self.model.frames:
            raise CoreTimeout(f"{self.model.cmap.name}: no frame on the output stream (the core sent nothing)")
        words = self.model.frames.pop(0)
        if not self.model.frames:
            self.model.busy, self.model.done = False, True
        return words


class KvpageModel(RegisterModel):
    """Register-level model of the kvpage core over ``hls_ref.kvpage``.

    CTRL.START (idle or done, no error) runs the operation in OP.CODE on the operand registers at once:
    :func:`hls_ref.kvpage.step` gives the next state, the result registers it writes, the error bits and
    ``CYCLES_BUSY`` (the RTL's cycle count). An unknown code raises BAD_OP. The page table survives
    CTRL.SOFT_RESET, as on the core; CLEAR (or a new model) empties it.

    Parameters
    ----------
    pages, max_blocks, slots : int
        The build parameters ``PAGES``, ``MAX_BLOCKS`` and ``SLOTS``.
    """

    def __init__(self, pages: int = 256, max_blocks: int = 64, slots: int = kv_ref.KV_SLOTS) -> None:
        super().__init__(core("kvpage"))
        self.state = kv_ref.KVState.empty(pages, max_blocks, slots)
        self.ro["PARAMS"] = self.cmap.reg("PARAMS").encode(
            PAGES_LOG2=pages.bit_length() - 1, BLOCKS_LOG2=max_blocks.bit_length() - 1, SLOTS=slots)
        self.ro.update(kv_ref.status_regs(self.state))

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if not bits["START"]:
            return
        self.done = False
        code = self.cmap.reg("OP").decode(self.rw["OP"])["CODE"]
        if code not in kv_ref.OP_NAMES:
            self.ro["CYCLES_BUSY"] = kv_ref.CYCLES_ERROR
            self.raise_err("BAD_OP")
            return
        op = kv_ref.Op(kv_ref.OP_NAMES[code], slot=self.rw["SLOT"], row=self.rw["ROW"], page=self.rw["PAGE"],
                       mask=self.rw["MASK_LO"] | self.rw["MASK_HI"] << 32)
        self.state, res = kv_ref.step(self.state, op)
        self.ro["CYCLES_BUSY"] = res.cycles
        if res.err:
            self.err |= res.err
            return
        self.ro.update(res.regs)
        self.ro.update(kv_ref.status_regs(self.state))
        self.ro["OPS"] = (self.ro["OPS"] + 1) & 0xFFFFFFFF
        self.done = True


class DraftengineModel(RegisterModel):
    """Register-level model of the draftengine core over ``hls_ref.draftengine``, with both its streams.

    It holds the core's three memories as beats. CTRL.START (idle or done, no error) checks CONFIG and the
    operand registers as the RTL's CHECK cycles do (BAD_OP, BAD_SHAPE, BAD_OUT, BAD_RANGE); a good operation
    then waits for its s_axis frame (:meth:`frame`): LOAD_W / LOAD_P write it into the weight / parameter
    memory, RUN takes it as activations and computes the job from the memories
    (:func:`hls_ref.draftengine.memory_run`), queuing its m_axis words for :class:`GoldenSink` (BUSY until the
    sink takes them, as the RTL holds its results until the stream takes them). A frame
    shorter than expected raises SHORT_STREAM, a longer one LONG_STREAM (the rest is dropped, as the core
    drains it). ``CYCLES_BUSY`` is the cycle model ``hls_ref.draftengine.cycles``; ``CYCLES_STALL`` 0. Memory
    never loaded reads as :data:`hls_ref.draftengine.UNLOADED` (zero).

    Parameters
    ----------
    rows, cols, wdepth, pdepth, k_max, m_max, uram : int
        The build parameters (``hwcontract.params``).
    """

    def __init__(self, rows: int = 8, cols: int = 8, wdepth: int = 1024, pdepth: int = 256, k_max: int = 1024,
                 m_max: int = 16, uram: int = 0) -> None:
        super().__init__(core("draftengine"))
        p = hwparams.check("draftengine", dict(ROWS=rows, COLS=cols, WDEPTH=wdepth, PDEPTH=pdepth, K_MAX=k_max,
                                               M_MAX=m_max, URAM=uram))
        self.rows, self.cols, self.wdepth, self.pdepth = p["ROWS"], p["COLS"], p["WDEPTH"], p["PDEPTH"]
        self.k_max, self.m_max, self.uram = p["K_MAX"], p["M_MAX"], p["URAM"]
        self.wpipe = de_wpipe(self.wdepth, self.uram)
        rc = self.rows * self.cols
        self.wmem = np.full((self.wdepth, rc), de_ref.UNLOADED, np.uint8)
        self.pmem = np.full((self.pdepth, rc), de_ref.UNLOADED, np.uint8)
        self.ro.update(PARAMS=self.cmap.reg("PARAMS").encode(ROWS=self.rows, COLS=self.cols, M_MAX=self.m_max,
                                                             URAM=self.uram),
                       WDEPTH=self.wdepth, PDEPTH=self.pdepth, K_MAX=self.k_max)

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if not bits["START"] or self.busy:
            return
        self.ro.update(SATURATED=0, BEATS_IN=0, BEATS_OUT=0, CYCLES_BUSY=0, CYCLES_STALL=0)
        self.done = False
        cfg = self.cmap.reg("CONFIG").decode(self.rw["CONFIG"])
        op = {v: n for n, v, _ in self.cmap.reg("CONFIG").field("OP").values}.get(cfg["OP"])
        outs = {code: bits for bits, code in DE_OUT_CODES.items()}
        r = self.rw
        self.ro["CYCLES_BUSY"] = DE_CHECK             # the CHECK cycles run before any error is known
        if op is None:
            self.raise_err("BAD_OP")
            return
        if op == "RUN":
            m, k, n = r["M"], r["K"], r["N"]
            bad_shape = not (1 <= m <= self.m_max and 1 <= k <= self.k_max and 1 <= n <= self.rows * self.pdepth)
            if bad_shape:
                self.raise_err("BAD_SHAPE")
            if cfg["OUT"] not in outs:
                self.raise_err("BAD_OUT")
            if self.err:
                return
            nt, kc, ab = de_ref.tiles(m, k, n, self.rows, self.cols)
            if r["WBASE"] + nt * kc > self.wdepth or r["PBASE"] + nt > self.pdepth:
                self.raise_err("BAD_RANGE")
                return
            self.pending = dict(op=op, beats=m * ab, m=m, k=k, n=n, out_bits=outs[cfg["OUT"]])
        else:
            depth = self.wdepth if op == "LOAD_W" else self.pdepth
            if r["COUNT"] == 0 or r["ADDR"] + r["COUNT"] > depth:
                self.raise_err("BAD_RANGE")
                return
            self.pending = dict(op=op, beats=r["COUNT"], addr=r["ADDR"])
        self.busy = True

    def frame(self, codes: np.ndarray) -> None:
        """One s_axis frame (the bytes of whole beats, viewed as int16 words), TLAST on its last beat."""
        data = np.ascontiguousarray(codes).view(np.uint8)
        rc = self.rows * self.cols
        if data.size % rc:
            raise ValueError(f"draftengine: a frame is whole beats of {rc} bytes, got {data.size} bytes")
        beats = data.reshape(-1, rc)
        job = self.pending
        if job is None:
            return                                 # not expecting a frame: the core's TREADY is low (or it drains)
        want = job["beats"]
        if len(beats) != want:
            self.ro["BEATS_IN"] = min(len(beats), want)
            self.ro["CYCLES_BUSY"] = DE_CHECK + min(len(beats), want)
            self.raise_err("SHORT_STREAM" if len(beats) < want else "LONG_STREAM")
            self.busy, self.pending = False, None
            return
        self.ro["BEATS_IN"] = want
        if job["op"] == "LOAD_W":
            self.wmem[job["addr"]:job["addr"] + want] = beats
        elif job["op"] == "LOAD_P":
            self.pmem[job["addr"]:job["addr"] + want] = beats
        else:
            m, k, n = job["m"], job["k"], job["n"]
            nt, kc, _ = de_ref.tiles(m, k, n, self.rows, self.cols)
            wb, pb = self.rw["WBASE"], self.rw["PBASE"]
            lanes, sat = de_ref.memory_run(self.wmem[wb:wb + nt * kc], self.pmem[pb:pb + nt], beats, m, k, n,
                                           job["out_bits"], self.rows, self.cols)
            raw = np.ascontiguousarray(lanes.astype("<i4")).view(np.uint8).reshape(len(lanes), -1)
            self.ro.update(SATURATED=sat, BEATS_OUT=len(lanes))
        self.ro["CYCLES_BUSY"] = de_ref.cycles(job["op"], want, job.get("m", 0), job.get("k", 0), job.get("n", 0),
                                               self.rows, self.cols, self.wpipe)
        self.pending = None
        if job["op"] == "RUN":
            self.emit([int.from_bytes(b.tobytes(), "little") for b in raw])     # done once the sink takes it
        else:
            self.busy, self.done = False, True


class TreeattnModel(RegisterModel):
    """Register-level model of the treeattn core over ``hls_ref.treeattn``, with both its streams.

    CTRL.START (idle or done, no error) clears MACS and the cycle counters and makes the START checks
    (:func:`hls_ref.treeattn.start_error`: BAD_CTX, BAD_NODES, BAD_SCALE, before any beat is taken; the CHECK
    cycles count); a good job then waits for its s_axis frame (:meth:`frame`), which
    :func:`hls_ref.treeattn.run_frame` runs as the core does (BAD_MASK from the MASK beats, SHORT_STREAM and
    LONG_STREAM from the frame's length; the core drains a frame in error). Its output beats are queued for
    :class:`GoldenSink` (BUSY until the sink takes them); ``CYCLES_BUSY`` is the cycle model
    :func:`hls_ref.treeattn.cycles`, ``CYCLES_STALL`` 0.

    Parameters
    ----------
    head_dim, group, nodes_max, lanes, ctx_max, block : int
        The build parameters (``hwcontract.params`` core "treeattn").
    """

    def __init__(self, head_dim: int = 64, group: int = 3, nodes_max: int = 64, lanes: int = 16,
                 ctx_max: int = 8192, block: int = 32) -> None:
        super().__init__(core("treeattn"))
        self.params = hwparams.check("treeattn", dict(HEAD_DIM=head_dim, GROUP=group, NODES_MAX=nodes_max,
                                                      LANES=lanes, CTX_MAX=ctx_max, BLOCK=block))
        p = self.params
        self.ro.update(PARAMS=self.cmap.reg("PARAMS").encode(HEAD_DIM=p["HEAD_DIM"], GROUP=p["GROUP"],
                                                             NODES_MAX=p["NODES_MAX"], LANES=p["LANES"],
                                                             BLOCK=p["BLOCK"]),
                       CTX_MAX=p["CTX_MAX"])

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if not bits["START"] or self.busy:
            return
        self.ro.update(MACS=0, CYCLES_BUSY=TA_CHECK, CYCLES_STALL=0)
        self.done = False
        regs = {n: self.rw[n.upper()] for n in ("ctx", "nodes", "mult", "shift")}
        err = ta_ref.start_error(regs["ctx"], regs["nodes"], regs["mult"], regs["shift"], self.params)
        if err:
            self.err |= err
            self.ro.update(CYCLES_BUSY=0)          # a refused job counts no cycles (hls_ref.treeattn.run, the RTL)
            return
        self.pending = regs
        self.busy = True

    def frame(self, codes: np.ndarray) -> None:
        """One s_axis frame (the bytes of whole beats, viewed as int16 words), TLAST on its last beat."""
        data = np.ascontiguousarray(codes).view(np.uint8)
        if data.size % ta_ref.BEAT_BYTES:
            raise ValueError(f"treeattn: a frame is whole beats of {ta_ref.BEAT_BYTES} bytes, got {data.size} bytes")
        job = self.pending
        if job is None:
            return                                 # not expecting a frame: the core's TREADY is low (or it drains)
        self.pending = None
        out = ta_ref.run_frame(data.reshape(-1, ta_ref.BEAT_BYTES), job["ctx"], job["nodes"], job["mult"],
                               job["shift"], self.params)
        self.ro.update(MACS=out.macs, CYCLES_BUSY=out.cycles)
        if out.err:
            self.err |= out.err
            self.busy = False
            return
        self.emit(ta_ref.beats_out(out.out))       # done once the sink takes it


class VecunitModel(RegisterModel):
    """Register-level model of the vecunit core over ``hls_ref.vecunit``, with both its streams.

    CTRL.START (idle or done, no error) clears the RESULT and COUNTERS registers and makes the start checks
    (:func:`hls_ref.vecunit.start_error`: BAD_OP, BAD_LEN, then the operation's BAD_PARTS, BAD_HALF or BAD_K,
    before any beat is taken); a good job then waits for its s_axis frame (:meth:`frame`), which
    :func:`hls_ref.vecunit.run` runs with the registers (SHORT_STREAM and LONG_STREAM from the frame's length; the
    core drains a frame in error). Its m_axis words are queued for :class:`GoldenSink` (BUSY until the sink takes
    them). ``CYCLES_BUSY`` is the cycle model :func:`hls_ref.vecunit.cycles` (0 for a job in error, as the
    golden model reports it), ``CYCLES_STALL`` 0: the model has no clock.

    Parameters
    ----------
    len_max, parts_max, half_max, k_max : int
        The build parameters (``hwcontract.params`` core "vecunit").
    """

    def __init__(self, len_max: int = 16384, parts_max: int = 16, half_max: int = 64, k_max: int = 8) -> None:
        super().__init__(core("vecunit"))
        self.params = vu_ref.build(dict(LEN_MAX=len_max, PARTS_MAX=parts_max, HALF_MAX=half_max, K_MAX=k_max))
        p = self.params
        self.ro.update(PARAMS=self.cmap.reg("PARAMS").encode(PARTS_MAX=p["PARTS_MAX"], HALF_MAX=p["HALF_MAX"],
                                                             K_MAX=p["K_MAX"]),
                       LEN_MAX=p["LEN_MAX"])

    def job(self, x: np.ndarray, c: np.ndarray) -> vu_ref.Job:
        """The job the registers hold, with the beats' X words ``x`` and C words ``c``."""
        regs = {name.lower(): self.rw[name] for name in ("FLAGS", "PARTS", "WMASK", "POS", "HALF", "EPS",
                                                         "NORM_MULT", "K")}
        return vu_ref.Job(self.rw["OP"], self.rw["LEN"], x, c, **regs)

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if not bits["START"] or self.busy:
            return
        self.ro.update(SATURATED=0, BEATS_IN=0, BEATS_OUT=0, CYCLES_BUSY=0, CYCLES_STALL=0)
        self.done = False
        empty = np.zeros(0, np.int64)
        err = vu_ref.start_error(self.job(empty, empty), self.params)
        if err:
            self.err |= err
            return
        self.pending = {"want": vu_ref.frame_beats(self.rw["OP"], self.rw["LEN"], self.rw["PARTS"],
                                                   self.rw["FLAGS"])}
        self.busy = True

    def frame(self, codes: np.ndarray) -> None:
        """One s_axis frame (the bytes of whole beats, viewed as int16 words), TLAST on its last beat."""
        x, c = vu_frame_words(codes)
        job = self.pending
        if job is None:
            return                                 # not expecting a frame: the core's TREADY is low (or it drains)
        self.pending = None
        out = vu_ref.run(self.job(x, c), self.params)
        self.ro["BEATS_IN"] = min(len(x), job["want"])
        if out.err:
            self.err |= out.err
            self.busy = False
            return
        self.ro.update(SATURATED=out.saturated, BEATS_OUT=len(out.y), CYCLES_BUSY=out.cycles)
        self.emit([int(v) & 0xFFFFFFFF for v in out.y])      # done once the sink takes it


MODELS = {"rng": RngModel, "verifier": VerifierModel, "treemask": TreemaskModel, "kvpage": KvpageModel,
          "draftengine": DraftengineModel, "treeattn": TreeattnModel,
          "vecunit": VecunitModel}


class GoldenDevice(RegisterDevice):
    """pynq device whose IP are golden register models, each at its own base address.

    Parameters
    ----------
    cores : dict[int, str]
        Base address -> core name.
    params : dict[int, dict], optional
        Base address -> keyword arguments of that model (the build parameters, e.g.
        ``{"lanes": 4, "vocab_max": 64}`` for the verifier).
    """

    name = "specdec-golden"

    def __init__(self, cores: dict[int, str], params: dict[int, dict] | None = None) -> None:
        self.models = {}
        for base, name in cores.items():
            if name not in MODELS:
                raise KeyError(f"no golden model for core {name!r}; available: {sorted(MODELS)}")
            self.models[base] = MODELS[name](**(params or {}).get(base, {}))

    def stream(self, base: int = 0) -> GoldenStream:
        """The row stream into the model at ``base`` (a core with a stream input)."""
        m = self.models.get(base)
        if not hasattr(m, "frame"):
            raise KeyError(f"no streaming core at {base:#x}; cores: "
                           f"{ {hex(b): m.cmap.name for b, m in self.models.items()} }")
        return GoldenStream(m)

    def sink(self, base: int = 0) -> GoldenSink:
        """The word stream out of the model at ``base`` (a core with a stream output)."""
        m = self.models.get(base)
        if m is None or not m.has_output:
            raise KeyError(f"no core with an output stream at {base:#x}; cores: "
                           f"{ {hex(b): m.cmap.name for b, m in self.models.items()} }")
        return GoldenSink(m)

    def _find(self, address: int):
        for base, m in self.models.items():
            if base <= address < base + (1 << m.cmap.addr_width):
                return m, address - base
        raise BusError("access", address, RESP_DECERR)

    def read_word(self, address: int) -> int:
        m, off = self._find(address)
        return m.read(off)

    def write_word(self, address: int, value: int) -> None:
        m, off = self._find(address)
        m.write(off, value)
