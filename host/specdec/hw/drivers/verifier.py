"""verifier driver: one speculative-decoding round per call, rows streamed from preallocated buffers.

On a board::

    ol = pynq.Overlay("specdec.bit")
    ver = ol.verifier                              # bound through ``bindto``
    ver.attach(DmaStream(ol.verifier_dma))         # rows go out through the AXI DMA's MM2S channel
    ver.seed([1, 2, 3, 4])
    res = ver.verify(draft, p_logits, q_logits, temperature=0.8)
    res.tokens                                     # accepted draft tokens + the next token

Off the board the same class takes a golden or simulation device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`) and the matching stream (``GoldenDevice.stream``, :class:`specdec.sim.device.SimStream`).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from hwcontract.formats import LOGIT_NEG_INF, as_array, draft_tokens, inv_temp, quantize
from hwcontract.regmap import TREE_MAX_NODES, VERIFIER_MAX_GAMMA, core, flag
from hwcontract.tree import check_field_widths, node_entries

from ...errors import CoreError, CoreTimeout, SpecdecError, add_note
from ..streams import RowStream
from .base import SpecdecIP, vlnv
from .verifier_errors import RoundInputs, VerifierError, check_logits, draft_row, node_row, reason, target_row

_ROW_ALIGN = 32  # buffer rows start on 64-byte boundaries (DMA without data realignment)


@dataclass(frozen=True)
class Result:
    """The result registers of one round (docs/verifier.md); ``draft`` is the draft it verified."""

    n_accept: int
    next_token: int
    accept_bits: int
    rows: int
    words: int
    last_ep: int
    last_eq: int
    last_sp: int
    last_sq: int
    cycles_busy: int
    cycles_stall: int
    draft: tuple[int, ...] = field(default=(), repr=False)

    @property
    def tokens(self) -> list[int]:
        """The tokens the round emits: the accepted draft prefix, then ``next_token``."""
        return [*self.draft[:self.n_accept], self.next_token]


# result field -> its register: the map's RESULT and COUNTERS groups (Result declares the same fields, in order)
_GROUPS = [core("verifier").group(g) for g in ("RESULT", "COUNTERS")]
_RESULTS = {f: r for g in _GROUPS for f, r in zip(g.fields, g.registers, strict=True)}


@dataclass(frozen=True)
class TreeResult:
    """The result registers of one tree-mode round (docs/verifier.md, "Tree mode").

    ``path`` is the accepted path's nodes after the root, in order (PATH_HI:PATH_LO), ``node`` its last
    node (CUR_NODE, 0 when nothing was accepted), ``tree_tokens`` the tree's tokens it verified.
    """

    n_accept: int
    next_token: int
    path: tuple[int, ...]
    node: int
    rows: int
    words: int
    last_ep: int
    last_sp: int
    cycles_busy: int
    cycles_stall: int
    tree_tokens: tuple[int, ...] = field(default=(), repr=False)

    @property
    def tokens(self) -> list[int]:
        """The tokens the round emits: those of the accepted path, then ``next_token``."""
        return [self.tree_tokens[v] for v in self.path] + [self.next_token]




class Verifier(SpecdecIP):
    """Driver of the ``verifier`` core (golden model ``hls_ref.verifier``, RTL ``fpga.verifier``).

    Rows are streamed from one preallocated int16 buffer of ``2 * gamma_max + 1`` rows (p_i in row
    ``2i``, q_i in row ``2i + 1``), taken from the stream (:meth:`attach`) so that a DMA reads it in place.

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
    stream : RowStream, optional
        The core's row stream; or :meth:`attach` one later (pynq binds the driver without it).
    """

    core_name = "verifier"
    bindto = [vlnv("verifier")]

    def __init__(self, description: dict, stream: RowStream | None = None) -> None:
        super().__init__(description)
        params = self.read_fields("PARAMS")
        self._lanes, self._gamma_max, self._tree_max = params["LANES"], params["GAMMA_MAX"], params["TREE_MAX"]
        self._vocab_max = self.read_reg("VOCAB_MAX")
        self.stream: RowStream | None = None
        #: The last round's seconds: host quantization, row transfer, and the core's decision (polling).
        self.timing = {"quantize_s": 0.0, "transfer_s": 0.0, "verify_s": 0.0}
        self._buf: np.ndarray | None = None
        if stream is not None:
            self.attach(stream)

    def _mode(self, greedy) -> bool:
        """``greedy`` as a bool: a bool, or the integer 0 or 1. Anything else (the string "0", which the host
        would read as greedy and the CONFIG write as sampling) raises ValueError naming it. A sampling round needs the
        RNG seeded (u = 0 would accept every draft token and resample token 0)."""
        mode = flag(greedy, "greedy")
        if not mode:
            self.check_seeded("a sampling round")
        return mode

    @property
    def lanes(self) -> int:
        """Logit codes per stream beat (``PARAMS.LANES``)."""
        return self._lanes

    @property
    def gamma_max(self) -> int:
        """Largest draft length the core takes (``PARAMS.GAMMA_MAX``)."""
        return self._gamma_max

    @property
    def tree_max(self) -> int:
        """Largest token tree (nodes, root included) the core takes in tree mode (``PARAMS.TREE_MAX``)."""
        return self._tree_max

    @property
    def vocab_max(self) -> int:
        """Largest vocabulary the core takes (``VOCAB_MAX``)."""
        return self._vocab_max

    def attach(self, stream: RowStream) -> None:
        """Stream rows through ``stream``; allocates the row buffer from it."""
        width = -(-self.vocab_max // self.lanes) * self.lanes
        width = -(-width // _ROW_ALIGN) * _ROW_ALIGN
        self.stream = stream
        self._buf = stream.alloc((2 * self.gamma_max + 1, width))

    # -- one round --------------------------------------------------------------------------------
    def verify(self, draft, p_logits, q_logits=None, *, greedy: bool = False, temperature: float = 1.0) -> Result:
        """Verify ``draft`` against the target rows (and the draft rows, in sampling mode).

        Float logits are quantized on the host (``hwcontract.formats.quantize``: each row shifted by its
        max, -inf = masked); integer logits are taken as Q7.8 codes. Rows are streamed as the core asks
        for them: after a rejection the remaining rows are not sent.

        Parameters
        ----------
        draft : sequence of int, length g
            Draft tokens x_0 .. x_{g-1}.
        p_logits : array_like, shape (g+1, V)
            Target rows p_0 .. p_g.
        q_logits : array_like, shape (g, V)
            Draft rows q_0 .. q_{g-1}; needed in sampling mode (may be None when g = 0), ignored in
            greedy mode.
        greedy : bool
            Argmax verification (``CONFIG.GREEDY``).
        temperature : float
            Sampling temperature T, sent as ``INV_TEMP = round(256 / T)``; T = 0 lets the core raise
            BAD_TEMP. Ignored in greedy mode.

        Returns
        -------
        Result

        Raises
        ------
        ValueError
            Before anything reaches the core: shapes that do not match g and V, V = 0, a draft token
            that does not fit 16 bits, a bad temperature, NaN or +inf logits anywhere in p or q (naming the
            row, p_i or q_i), integer codes outside int16, a sampling round before :meth:`seed`.
        VerifierError
            A :class:`~specdec.errors.CoreError`: the core's decoded error bits (BAD_GAMMA for
            g > gamma_max, BAD_VOCAB for V > vocab_max, BAD_TOKEN for a token >= V, BAD_TEMP, EMPTY_ROW,
            stream errors), with the input behind them named (the tokens, their positions and V; the
            empty row) and the result registers as the error left them.
        SpecdecError
            The core was BUSY before the round (a round this driver did not start); nothing is written.

        Any exception raised once the round has begun (a core error, a timeout, the stream's) soft-resets
        the core before it reaches the caller, so the core is idle and the next round starts afresh (the
        configuration and the RNG state survive; the words taken so far stay taken).
        """
        if self.stream is None:
            raise RuntimeError("verifier: no row stream attached; call attach(stream) first")
        greedy = self._mode(greedy)
        draft = tuple(draft_tokens(draft))
        g = len(draft)
        p = as_array("p_logits", p_logits)
        if p.ndim != 2 or p.shape[0] != g + 1 or p.shape[1] == 0:
            raise ValueError(f"p_logits must have shape (g+1, V) = ({g + 1}, V >= 1) for g = {g} draft tokens, "
                             f"got {p.shape}")
        vocab = p.shape[1]
        q = None
        if not greedy and (g or q_logits is not None):
            if q_logits is None:
                raise ValueError(f"sampling mode needs q_logits of shape ({g}, {vocab}), got None")
            q = as_array("q_logits", q_logits)
            if q.shape != (g, vocab):
                raise ValueError(f"q_logits must have shape (g, V) = ({g}, {vocab}) to match p_logits {p.shape}, "
                                 f"got {q.shape}")
        itemp = None if greedy else inv_temp(temperature)
        t_start = time.perf_counter()
        check_logits(p, "p_logits", target_row)
        if q is not None:
            check_logits(q, "q_logits", draft_row)
        nb = -(-vocab // self.lanes)
        width = nb * self.lanes
        fits = g <= self.gamma_max and vocab <= self.vocab_max
        buf = self._buf
        if fits:  # quantize straight into the stream's buffer (else the core refuses the round at START)
            _load(p, buf[0:2 * g + 1:2, :vocab])
            if q is not None and g:
                _load(q, buf[1:2 * g:2, :vocab])
            buf[:2 * g + 1, vocab:width] = LOGIT_NEG_INF
        t_quant = time.perf_counter()
        self._check_idle()
        inputs = RoundInputs(vocab, greedy, temperature, itemp, self._limits(), draft=draft)
        with self._round(inputs):
            result, send_s, compute = self._chain_round(draft, vocab, itemp, greedy, q is not None, fits)
        self.timing = {"quantize_s": t_quant - t_start, "transfer_s": send_s - compute,
                       "verify_s": time.perf_counter() - t_quant - send_s + compute}
        return result

    def _chain_round(self, draft: tuple[int, ...], vocab: int, itemp: int | None, greedy: bool, sampling: bool,
                     fits: bool) -> tuple[Result, float, float]:
        """Registers, START, then the rows from the buffer as the core asks for them; ``(result, seconds
        sending, seconds the stream computed)``."""
        g = len(draft)
        width = -(-vocab // self.lanes) * self.lanes
        buf = self._buf
        send_s, compute0 = 0.0, self.stream.compute_s
        self.write_fields("CONFIG", GREEDY=int(greedy), TREE=0)
        self.write_reg("GAMMA", g)
        self.write_reg("VOCAB", vocab)
        if itemp is not None:
            self.write_reg("INV_TEMP", itemp)
        n = min(g, VERIFIER_MAX_GAMMA)
        padded = draft[:n] + (0,)
        for k in range((n + 1) // 2):
            self.write_fields(f"DRAFT{k}", LO=padded[2 * k], HI=padded[2 * k + 1])
        self.start()
        self.check()
        if not fits:
            raise SpecdecError(f"verifier: the core took a round of g={g}, V={vocab} beyond its gamma_max="
                               f"{self.gamma_max}, vocab_max={self.vocab_max} without an error")
        for i in range(g + 1):
            t = time.perf_counter()
            self.stream.send(buf[2 * i, :width])
            if sampling and i < g:
                self._wait_rows(2 * i + 1)  # an empty p_i stops the round: q_i is not sent
                self.stream.send(buf[2 * i + 1, :width])
            send_s += time.perf_counter() - t
            if i == g:
                self.wait_done()
            elif not self._wait_position(i):
                break
        result = Result(**{f: self.read_reg(r) for f, r in _RESULTS.items()}, draft=draft)
        return result, send_s, self.stream.compute_s - compute0

    # -- one tree round ----------------------------------------------------------------------------
    def verify_tree(self, parents, tokens, p_logits, *, greedy: bool = False,
                    temperature: float = 1.0) -> TreeResult:
        """Verify a token tree against the target's rows at its nodes (``CONFIG.TREE``).

        The core walks the tree from the root: it asks for the row of each node it reaches (``CUR_NODE``),
        which is quantized and streamed only then, so a round streams one row per node on the accepted
        path plus one.

        Parameters
        ----------
        parents : sequence of int, length N
            ``parents[i] < i`` for i >= 1; ``parents[0]`` (the root's) is ignored.
        tokens : sequence of int, length N
            Each node's draft token; ``tokens[0]`` (the root, already chosen) is ignored.
        p_logits : array_like, shape (N, V)
            Row v: the target's logits for the token after the path root..v (float, quantized here, or
            int16 codes).
        greedy, temperature :
            As :meth:`verify`.

        Returns
        -------
        TreeResult

        Raises
        ------
        ValueError
            Before anything reaches the core: shapes, parents or tokens that are not integers, parents
            that do not fit 8 bits, tokens that do not fit 16 bits, a bad temperature, NaN or +inf logits
            in any node's row (whether the walk would reach it or not; naming the node), a sampling round
            before :meth:`seed`.
        VerifierError
            BAD_TREE (N = 0 or over TREE_MAX, a parent not below its child), BAD_VOCAB, BAD_TOKEN,
            BAD_TEMP, EMPTY_ROW, stream errors, naming the nodes behind them.
        SpecdecError, CoreTimeout
            As :meth:`verify`; any exception once the round has begun leaves the core idle (soft-reset).
        """
        if self.stream is None:
            raise RuntimeError("verifier: no row stream attached; call attach(stream) first")
        greedy = self._mode(greedy)
        par, tok = node_entries("parents", parents), node_entries("tokens", tokens)     # the root's entries as 0
        n = len(par)
        if len(tok) != n:
            raise ValueError(f"a tree needs one token per node: {n} parents, {len(tok)} tokens")
        check_field_widths(par, tok)
        p = as_array("p_logits", p_logits)
        if p.ndim != 2 or p.shape[0] != n or p.shape[1] == 0:
            raise ValueError(f"p_logits must have shape (N, V) = ({n}, V >= 1) for a tree of N = {n} nodes, "
                             f"got {p.shape}")
        vocab = p.shape[1]
        itemp = None if greedy else inv_temp(temperature)
        t_start = time.perf_counter()
        check_logits(p, "p_logits", node_row)      # every row: the walk quantizes only those it reaches
        check_s = time.perf_counter() - t_start
        self._check_idle()
        inputs = RoundInputs(vocab, greedy, temperature, itemp, self._limits(), parents=tuple(par),
                             tokens=tuple(tok))
        with self._round(inputs):
            result, quant_s, send_s, compute = self._tree_round(par, tok, p, itemp, greedy)
        quant_s += check_s
        self.timing = {"quantize_s": quant_s, "transfer_s": send_s - compute,
                       "verify_s": time.perf_counter() - t_start - quant_s - send_s + compute}
        return result

    def _tree_round(self, par: list[int], tok: list[int], p: np.ndarray, itemp: int | None,
                    greedy: bool) -> tuple[TreeResult, float, float, float]:
        """Registers, START, then the row of each node the core asks for, quantized as it is asked;
        ``(result, seconds quantizing, seconds sending, seconds the stream computed)``."""
        n, vocab = len(par), p.shape[1]
        width = -(-vocab // self.lanes) * self.lanes
        fits = 1 <= n <= min(self.tree_max, TREE_MAX_NODES) and vocab <= self.vocab_max
        quant_s = send_s = 0.0
        compute0 = self.stream.compute_s
        self.write_fields("CONFIG", GREEDY=int(greedy), TREE=1)
        self.write_reg("VOCAB", vocab)
        if itemp is not None:
            self.write_reg("INV_TEMP", itemp)
        self.write_reg("NODES", n)
        m = min(n, TREE_MAX_NODES)
        padded = [0] + par[1:m] + [0] * 3
        for k in range(-(-m // 4)):
            self.write_fields(f"TREE_PARENT{k}", **{f"P{j}": padded[4 * k + j] for j in range(4)})
        padded = [0] + tok[1:m] + [0]
        for k in range(-(-m // 2)):
            self.write_fields(f"TREE_TOKEN{k}", T0=padded[2 * k], T1=padded[2 * k + 1])
        self.start()
        self.check()
        if not fits:
            raise SpecdecError(f"verifier: the core took a tree of N={n}, V={vocab} beyond its tree_max="
                               f"{self.tree_max}, vocab_max={self.vocab_max} without an error")
        buf = self._buf
        v, k = 0, 0
        while True:
            t = time.perf_counter()
            row = buf[k % 2]
            _load(p[v:v + 1], row[None, :vocab])
            row[vocab:width] = LOGIT_NEG_INF
            t1 = time.perf_counter()
            quant_s += t1 - t
            self.stream.send(row[:width])
            send_s += time.perf_counter() - t1
            if not self._wait_position(k):
                break
            v = self.read_reg("CUR_NODE")
            k += 1
        regs = {r: self.read_reg(r) for r in ("N_ACCEPT", "NEXT_TOKEN", "CUR_NODE", "PATH_LO", "PATH_HI", "ROWS",
                                               "WORDS", "LAST_EP", "LAST_SP", "CYCLES_BUSY", "CYCLES_STALL")}
        bits = regs["PATH_LO"] | regs["PATH_HI"] << 32
        result = TreeResult(regs["N_ACCEPT"], regs["NEXT_TOKEN"], tuple(j for j in range(64) if bits >> j & 1),
                            regs["CUR_NODE"], regs["ROWS"], regs["WORDS"], regs["LAST_EP"], regs["LAST_SP"],
                            regs["CYCLES_BUSY"], regs["CYCLES_STALL"], tree_tokens=tuple(tok))
        return result, quant_s, send_s, self.stream.compute_s - compute0

    # -- round safety ------------------------------------------------------------------------------
    def _limits(self) -> dict[str, int]:
        return {"LANES": self.lanes, "GAMMA_MAX": self.gamma_max, "VOCAB_MAX": self.vocab_max,
                "TREE_MAX": self.tree_max}

    def _check_idle(self) -> None:
        """Refuse a round on a core left BUSY or in error by someone else (this driver's rounds never do)."""
        try:
            self.check_idle()
        except CoreError as e:
            raise VerifierError(e.err, e.bits, "the core is still in error from an earlier operation outside a "
                                "round (an all-zero seed(), raw register or stream traffic, or another program); "
                                "nothing was written", {}, reset=False) from None

    @contextmanager
    def _round(self, inputs: RoundInputs) -> Iterator[None]:
        """One round's register and stream traffic: any exception in it soft-resets the core before it reaches
        the caller; a core error becomes a :class:`VerifierError` naming the input behind it."""
        try:
            yield
        except CoreError as e:
            try:
                regs = self._result_registers(inputs.tree)
            finally:
                self._abandon(e)
            raise VerifierError(e.err, e.bits, reason(e.bits, regs, inputs), regs) from None
        except BaseException as e:
            self._abandon(e)
            raise

    def _result_registers(self, tree: bool) -> dict[str, int]:
        groups = ("RESULT", "TREE_RESULT") if tree else ("RESULT",)
        return {r: self.read_reg(r) for g in groups for r in self.cmap.group(g).registers}

    def _abandon(self, error: BaseException) -> None:
        """Soft-reset the core after ``error`` inside a round; a failing reset is noted on ``error``."""
        try:
            self.soft_reset()
        except Exception as e:      # the bus itself may be what failed
            add_note(error, f"verifier: the soft reset after this error failed too ({e!r}); the core may "
                            "still be inside the round: call soft_reset()")

    def _wait_rows(self, n: int) -> None:
        """Poll until the core has taken ``n`` rows in full (ROWS; a row counts once its last beat has left
        the stream pipeline), raising :class:`CoreError` if it stopped with an error instead."""
        for _ in range(self.poll_limit):
            taken = self.read_reg("ROWS") >= n
            self.check()        # ROWS and an EMPTY_ROW error change in the same cycle
            if taken:
                return
        raise CoreTimeout(f"verifier: row {n} not taken after {self.poll_limit} polls")

    def _wait_position(self, i: int) -> bool:
        """Poll until position i is decided: True if accepted, False if the round is done."""
        for _ in range(self.poll_limit):
            if self.read_reg("N_ACCEPT") > i:
                return True
            s = self._status.decode(self.read_reg("STATUS"))
            if s["ERROR"]:
                self.check()
            if s["DONE"]:
                return False
        raise CoreTimeout(f"verifier: position {i} not decided after {self.poll_limit} polls")


def _load(a: np.ndarray, out: np.ndarray) -> None:
    """Logits validated by :func:`check_logits` into ``out``: floats quantized, integer codes as they are."""
    if np.issubdtype(a.dtype, np.floating):
        quantize(a, out=out)
    else:
        np.copyto(out, a, casting="unsafe")
