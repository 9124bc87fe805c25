"""draftengine driver: int8 matrix jobs on the draft engine, layers placed once in its on-chip memories.

On a board::

    ol = pynq.Overlay("specdec.bit")
    de = ol.draftengine                                    # bound through ``bindto``
    de.attach(DmaStream(ol.draftengine_dma), DmaSink(ol.draftengine_dma, max_words=...))
    layer = de.place(w, bias, mult, shift)                 # weights and parameters loaded once
    y, saturated = de.matmul(x, layer, out_bits=16)        # (M, N) int64, count of clipped outputs

Off the board the same class takes a golden or simulation device (``specdec.backends``) and the matching
stream and sink. Every value is checked on the host with the golden model's own checks
(``hls_ref.draftengine.check``) before the core is touched; what the core still refuses comes back as
:class:`~specdec.errors.CoreError` with the decoded ERR bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hls_ref import draftengine as golden
from hwcontract.formats import de_act_beats, de_param_beats, de_unpack_outputs, de_weight_beats
from hwcontract.regmap import DE_OUT_CODES

from ..backends.device import RowStream, WordSink
from ..errors import SpecdecError
from .base import SpecdecIP, vlnv


@dataclass(frozen=True)
class Placement:
    """Where a layer lives in the core: its weight beats from ``wbase``, its parameter tiles from ``pbase``."""

    wbase: int
    pbase: int
    n: int
    k: int


@dataclass(frozen=True)
class Streamed:
    """A layer whose weights stream through the core: slices of its output channels (``n0 .. n1``), each with
    its weight and parameter beats, loaded into the window past every placed layer (weight beats from
    ``wbase``, parameter tiles from ``pbase``) before the slice runs."""

    n: int
    k: int
    wbase: int
    pbase: int
    slices: tuple[tuple[int, int, np.ndarray, np.ndarray], ...]

    @property
    def weight_beats(self) -> int:
        return sum(len(wb) for _, _, wb, _ in self.slices)


class DraftEngine(SpecdecIP):
    """Driver of the ``draftengine`` core (golden model ``hls_ref.draftengine``, RTL ``fpga.draftengine``).

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.drivers.base.description`` off the board.
    stream : RowStream, optional
        The core's s_axis (frames of whole beats); or :meth:`attach` later.
    sink : WordSink, optional
        The core's m_axis.
    """

    core_name = "draftengine"
    bindto = [vlnv("draftengine")]

    def __init__(self, description: dict, stream: RowStream | None = None, sink: WordSink | None = None) -> None:
        super().__init__(description)
        p = self.read_fields("PARAMS")
        self.rows, self.cols, self.m_max = p["ROWS"], p["COLS"], p["M_MAX"]
        self.wdepth, self.pdepth, self.k_max = (self.read_reg(n) for n in ("WDEPTH", "PDEPTH", "K_MAX"))
        self.stream, self.sink = stream, sink
        self._wnext = self._pnext = 0                 # the next free weight beat / parameter tile
        #: COUNTERS and RESULT registers of the last operation.
        self.cycles = self.stall = self.saturated = 0
        #: RUN jobs done and their CYCLES_BUSY summed, since the driver was made.
        self.jobs = self.busy_cycles = 0
        #: Weight beats loaded for streamed layers (:meth:`matmul_streamed`), since the driver was made.
        self.streamed_beats = 0
        cfg = self.cmap.reg("CONFIG")
        self._ops = {n: v for n, v, _ in cfg.field("OP").values}

    def attach(self, stream: RowStream, sink: WordSink) -> None:
        """Send beats through ``stream`` and receive results through ``sink``."""
        self.stream, self.sink = stream, sink

    # -- memories ---------------------------------------------------------------------------------
    def reset_memory(self) -> None:
        """Forget every placement (the next :meth:`place` writes from beat 0 and tile 0 again)."""
        self._wnext = self._pnext = 0

    def free(self) -> tuple[int, int]:
        """Weight beats and parameter tiles not yet placed."""
        return self.wdepth - self._wnext, self.pdepth - self._pnext

    def window_tiles(self, k: int, free: tuple[int, int] | None = None) -> int:
        """ROWS-channel tiles of a K-column layer that one streamed load holds: as many as the free memories
        (:meth:`free`, or ``free``: weight beats and parameter tiles) take."""
        wfree, pfree = self.free() if free is None else free
        return min(wfree // -(-k // self.cols), pfree)

    def send_beats(self, beats: np.ndarray) -> None:
        """One s_axis frame of whole beats (``(count, ROWS*COLS)`` uint8), TLAST on the last."""
        if self.stream is None:
            raise SpecdecError("draftengine: no stream attached (call attach(stream, sink) first)")
        self.stream.send(np.ascontiguousarray(beats, dtype=np.uint8).reshape(-1).view("<i2"))

    def _operation(self, op: str, out_bits: int = 8, **regs: int) -> None:
        for name, value in regs.items():
            self.write_reg(name, value)
        self.write_fields("CONFIG", OP=self._ops[op], OUT=DE_OUT_CODES[out_bits])
        self.start()
        if self.read_fields("STATUS")["ERROR"]:
            self.check()

    def _finish(self) -> None:
        self.wait_done()
        self.cycles, self.stall = self.read_reg("CYCLES_BUSY"), self.read_reg("CYCLES_STALL")
        self.saturated = self.read_reg("SATURATED")

    def load(self, memory: str, addr: int, beats: np.ndarray) -> None:
        """Write ``beats`` ((count, ROWS*COLS) uint8) into the ``"weights"`` or ``"params"`` memory at ``addr``."""
        op = {"weights": "LOAD_W", "params": "LOAD_P"}.get(memory)
        if op is None:
            raise ValueError(f"memory {memory!r}: 'weights' or 'params'")
        beats = np.asarray(beats)
        depth = self.wdepth if op == "LOAD_W" else self.pdepth
        if beats.ndim != 2 or beats.shape[1] != self.rows * self.cols or not len(beats):
            raise ValueError(f"beats: expected (count >= 1, {self.rows * self.cols}), got shape {beats.shape}")
        if not 0 <= addr or addr + len(beats) > depth:
            raise ValueError(f"{memory}: beats {addr}..{addr + len(beats) - 1} outside the memory's 0..{depth - 1}")
        self._operation(op, ADDR=addr, COUNT=len(beats))
        try:
            self.send_beats(beats)
            self._finish()
        except BaseException:
            self.soft_reset()
            raise

    def footprint(self, n: int, k: int) -> tuple[int, int]:
        """Weight beats and parameter tiles an N x K layer takes in this core."""
        return -(-n // self.rows) * -(-k // self.cols), -(-n // self.rows)

    def _checked_layer(self, w, bias, mult, shift) -> golden.Job:
        """The layer as a golden job, after the golden model's checks and this core's K_MAX."""
        w = np.asarray(w)
        job = golden.check(golden.Job(np.zeros((1, w.shape[1] if w.ndim == 2 else 1), np.int64), w, bias, mult,
                                      shift, 8))
        if job.w.shape[1] > self.k_max:
            raise ValueError(f"K={job.w.shape[1]} above this core's K_MAX {self.k_max}")
        return job

    def stream_layer(self, w, bias, mult, shift) -> Streamed:
        """A layer prepared to stream (:meth:`matmul_streamed`): cut into slices of output channels that each
        fit the memories left free by the layers placed so far (the window); nothing is loaded yet. Place every
        layer that is to stay before preparing the streamed ones.

        Raises
        ------
        ValueError
            A bad shape or value (the golden model's checks), K above K_MAX, or a window too small for one
            tile of the layer.
        """
        job = self._checked_layer(w, bias, mult, shift)
        n, k = job.w.shape
        tiles = self.window_tiles(k)                                      # ROWS-channel tiles one load holds
        if tiles < 1:
            wfree, pfree = self.free()
            raise ValueError(f"a {n} x {k} layer cannot stream: one tile takes {-(-k // self.cols)} weight beats "
                             f"and 1 parameter tile; {wfree} of WDEPTH {self.wdepth} and {pfree} of PDEPTH "
                             f"{self.pdepth} are free")
        step = tiles * self.rows
        return Streamed(n, k, self._wnext, self._pnext, tuple(
            (n0, min(n0 + step, n), de_weight_beats(job.w[n0:n0 + step], self.rows, self.cols),
             de_param_beats(job.bias[n0:n0 + step], job.mult[n0:n0 + step], job.shift[n0:n0 + step], self.rows,
                            self.cols))
            for n0 in range(0, n, step)))

    def matmul_streamed(self, x, layer: Streamed, out_bits: int = 8) -> tuple[np.ndarray, int]:
        """Run a streamed layer on activation rows ``x`` (M, K), M any size: each slice's weights and parameters
        loaded into the layer's window, then its jobs (at most M_MAX rows each). ``(y (M, N), saturated)``.

        Raises
        ------
        SpecdecError
            A layer was placed into the window after this one was prepared: streaming would overwrite it.
        """
        if self._wnext > layer.wbase or self._pnext > layer.pbase:
            raise SpecdecError(f"draftengine: layers placed since this one was prepared to stream reach beat "
                               f"{self._wnext} and tile {self._pnext}, into its window from beat {layer.wbase} "
                               f"and tile {layer.pbase}: streaming would overwrite them (place every layer "
                               f"first, then prepare the streamed ones)")
        x = np.asarray(x)
        ys, sat = [], 0
        for n0, n1, wb, pb in layer.slices:
            self.load("weights", layer.wbase, wb)
            self.load("params", layer.pbase, pb)
            self.streamed_beats += len(wb)
            at = Placement(layer.wbase, layer.pbase, n1 - n0, layer.k)
            parts = [self.matmul(x[i:i + self.m_max], at, out_bits) for i in range(0, len(x), self.m_max)]
            ys.append(np.concatenate([y for y, _ in parts]))
            sat += sum(s for _, s in parts)
        return np.concatenate(ys, axis=1), sat

    def place(self, w, bias, mult, shift) -> Placement:
        """Load a layer (N x K int8 weights, per-channel BIAS/MULT/SHIFT) into the next free memory; its place.

        Raises
        ------
        ValueError
            A bad shape or value (the golden model's checks), or the layer does not fit what is left.
        """
        job = self._checked_layer(w, bias, mult, shift)
        n, k = job.w.shape
        wb = de_weight_beats(job.w, self.rows, self.cols)
        pb = de_param_beats(job.bias, job.mult, job.shift, self.rows, self.cols)
        wfree, pfree = self.free()
        if len(wb) > wfree or len(pb) > pfree:
            raise ValueError(f"a {n} x {k} layer needs {len(wb)} weight beats and {len(pb)} parameter tiles; "
                             f"{wfree} and {pfree} are free (WDEPTH {self.wdepth}, PDEPTH {self.pdepth})")
        at = Placement(self._wnext, self._pnext, n, k)
        self.load("weights", at.wbase, wb)
        self.load("params", at.pbase, pb)
        self._wnext += len(wb)
        self._pnext += len(pb)
        return at

    # -- jobs -------------------------------------------------------------------------------------
    def matmul(self, x, at: Placement, out_bits: int = 8) -> tuple[np.ndarray, int]:
        """Run the placed layer on M int8 activation rows ``x`` (M, K): ``(y, saturated)``, y (M, N) int64.

        Raises
        ------
        ValueError
            ``x`` is not M x K int8 with 1 <= M <= M_MAX, or ``out_bits`` not in DE_OUT_BITS.
        CoreError
            The core refused the job (its ERR bits).
        """
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != at.k or x.shape[0] < 1:
            raise ValueError(f"activations: expected (M, {at.k}) with M >= 1, got shape {x.shape}")
        golden.check(golden.Job(x, np.zeros((1, at.k), np.int64), [0], [0], [0], out_bits))   # values, out_bits
        m = x.shape[0]
        if m > self.m_max:
            raise ValueError(f"M={m} above this core's M_MAX {self.m_max}")
        self._operation("RUN", out_bits, M=m, K=at.k, N=at.n, WBASE=at.wbase, PBASE=at.pbase)
        try:
            self.send_beats(de_act_beats(x.astype(np.int8), self.rows, self.cols))
            if self.read_fields("STATUS")["ERROR"]:
                self.check()            # refused after the frame went in (it was drained): no result will come
            if self.sink is None:
                raise SpecdecError("draftengine: no sink attached (call attach(stream, sink) first)")
            words = self.sink.recv()
            self._finish()
            self.jobs += 1
            self.busy_cycles += self.cycles
        except BaseException:
            self.soft_reset()
            raise
        nbytes = 4 * self.rows
        raw = b"".join(int(wd).to_bytes(nbytes, "little") for wd in words)
        lanes = np.frombuffer(raw, dtype="<i4").reshape(-1, self.rows)
        return de_unpack_outputs(lanes, m, at.n, self.rows), self.saturated

    def run(self, job: golden.Job) -> golden.Output:
        """One golden-model job end to end: checked whole, placed at the start of the memories, run, and
        forgotten again."""
        job = golden.check(job)
        if job.x.shape[0] > self.m_max:
            raise ValueError(f"M={job.x.shape[0]} above this core's M_MAX {self.m_max}")
        self.reset_memory()
        at = self.place(job.w, job.bias, job.mult, job.shift)
        try:
            y, sat = self.matmul(job.x, at, job.out_bits)
        finally:
            self.reset_memory()
        return golden.Output(y, sat)
