"""draftengine driver: int8 matrix jobs on the draft engine, layers placed once in its on-chip memories.

On a board::

    ol = pynq.Overlay("specdec.bit")
    de = ol.draftengine                                    # bound through ``bindto``
    de.attach(DmaStream(ol.draftengine_dma), DmaSink(ol.draftengine_dma, max_words=...))
    layer = de.place(w, bias, mult, shift)                 # weights and parameters loaded once
    y, saturated = de.matmul(x, layer, out_bits=16)        # (M, N) int64, count of clipped outputs

Off the board the same class takes a golden or simulation device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`) and the matching stream and sink. Every value is checked on the host with the golden
model's own checks (``hls_ref.draftengine.check``) before the core is touched; what the core still refuses comes
back as :class:`~specdec.errors.CoreError` with the decoded ERR bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hls_ref import draftengine as golden
from hwcontract.formats import as_array, de_act_beats, de_param_beats, de_unpack_outputs, de_weight_beats
from hwcontract.latency import de_wpipe
from hwcontract.regmap import DE_OUT_CODES, integer

from ...errors import SpecdecError
from ..streams import RowStream, WordSink
from .base import SpecdecIP, vlnv


@dataclass(frozen=True)
class Placement:
    """Where a layer lives in the core: its weight beats from ``wbase``, its parameter tiles from ``pbase``;
    ``epoch``: the driver's memory epoch it was placed in (:meth:`DraftEngine.reset_memory` starts a new one,
    and the layers of an older epoch may have been overwritten since)."""

    wbase: int
    pbase: int
    n: int
    k: int
    epoch: int


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


def _bytes(beats) -> np.ndarray:
    """``beats`` as a C-contiguous uint8 array; ValueError naming the dtype or the values unless they are
    integers in 0..255 (a float or an int8 -1 is not silently taken as another byte)."""
    beats = as_array("beats", beats)
    if beats.dtype.kind not in "ui":
        raise ValueError(f"beats: expected integers in 0..255 (uint8 bytes), got dtype {beats.dtype}")
    if beats.size and not 0 <= beats.min() <= beats.max() <= 255:
        raise ValueError(f"beats: expected integers in 0..255 (uint8 bytes), got values {beats.min()}..{beats.max()}")
    return np.ascontiguousarray(beats, dtype=np.uint8)


class DraftEngine(SpecdecIP):
    """Driver of the ``draftengine`` core (golden model ``hls_ref.draftengine``, RTL ``fpga.draftengine``).

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
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
        self.rows, self.cols, self.m_max, self.uram = p["ROWS"], p["COLS"], p["M_MAX"], p["URAM"]
        self.wdepth, self.pdepth, self.k_max = (self.read_reg(n) for n in ("WDEPTH", "PDEPTH", "K_MAX"))
        #: Registers after the weight memory's read (UltraRAM builds): the cycle model's ``wpipe``.
        self.wpipe = de_wpipe(self.wdepth, self.uram)
        self.stream, self.sink = stream, sink
        self._wnext = self._pnext = 0                 # the next free weight beat / parameter tile
        self._epoch = 0                               # placements of another epoch are refused (reset_memory)
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
        """Forget every placement (the next :meth:`place` writes from beat 0 and tile 0 again): a
        :class:`Placement` made before is refused by :meth:`matmul` from now on."""
        self._wnext = self._pnext = 0
        self._epoch += 1

    def free(self) -> tuple[int, int]:
        """Weight beats and parameter tiles not yet placed."""
        return self.wdepth - self._wnext, self.pdepth - self._pnext

    def window_tiles(self, k: int, free: tuple[int, int] | None = None) -> int:
        """ROWS-channel tiles of a K-column layer that one streamed load holds: as many as the free memories
        (:meth:`free`, or ``free``: weight beats and parameter tiles) take."""
        if integer(k, "window_tiles: k") < 1:
            raise ValueError(f"window_tiles: a layer has K >= 1 columns, got {k}")
        wfree, pfree = self.free() if free is None else free
        return min(wfree // -(-k // self.cols), pfree)

    def send_beats(self, beats: np.ndarray) -> None:
        """One s_axis frame of whole beats (``(count, ROWS*COLS)`` uint8), TLAST on the last."""
        self._send(_bytes(beats))

    def _send(self, beats: np.ndarray) -> None:
        """:meth:`send_beats` of beats already checked (C-contiguous uint8)."""
        if self.stream is None:
            raise SpecdecError("draftengine: no stream attached (call attach(stream, sink) first)")
        self.stream.send(beats.reshape(-1).view("<i2"))

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
        beats = _bytes(beats)
        depth = self.wdepth if op == "LOAD_W" else self.pdepth
        if beats.ndim != 2 or beats.shape[1] != self.rows * self.cols or not len(beats):
            raise ValueError(f"beats: expected (count >= 1, {self.rows * self.cols}), got shape {beats.shape}")
        if not 0 <= addr or addr + len(beats) > depth:
            raise ValueError(f"{memory}: beats {addr}..{addr + len(beats) - 1} outside the memory's 0..{depth - 1}")
        self.check_idle()
        try:
            self._operation(op, ADDR=addr, COUNT=len(beats))
            self._send(beats)
            self._finish()
        except BaseException:
            self.soft_reset()
            raise

    def footprint(self, n: int, k: int) -> tuple[int, int]:
        """Weight beats and parameter tiles an N x K layer takes in this core."""
        if integer(n, "footprint: n") < 1 or integer(k, "footprint: k") < 1:
            raise ValueError(f"footprint: a layer has N, K >= 1, got {n} x {k}")
        return -(-n // self.rows) * -(-k // self.cols), -(-n // self.rows)

    def _checked_layer(self, w, bias, mult, shift) -> golden.Job:
        """The layer as a golden job, after the golden model's checks and this core's K_MAX."""
        w = as_array("weights", w)
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
        if not isinstance(layer, Streamed):
            raise ValueError(f"layer: expected a Streamed from stream_layer(), got {type(layer).__name__} (a Placement "
                             "from place() runs with matmul())")
        if self._wnext > layer.wbase or self._pnext > layer.pbase:
            raise SpecdecError(f"draftengine: layers placed since this one was prepared to stream reach beat "
                               f"{self._wnext} and tile {self._pnext}, into its window from beat {layer.wbase} "
                               f"and tile {layer.pbase}: streaming would overwrite them (place every layer "
                               f"first, then prepare the streamed ones)")
        x = self._activations(x, layer.k, out_bits, m_max=None)       # before any weights load
        ys, sat = [], 0
        for n0, n1, wb, pb in layer.slices:
            self.load("weights", layer.wbase, wb)
            self.load("params", layer.pbase, pb)
            self.streamed_beats += len(wb)
            at = Placement(layer.wbase, layer.pbase, n1 - n0, layer.k, self._epoch)
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
        at = Placement(self._wnext, self._pnext, n, k, self._epoch)
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
            ``x`` is not M x K int8 with 1 <= M <= M_MAX, or ``out_bits`` not in DE_OUT_BITS; ``at`` is not a
            placement of this driver's memories since its last :meth:`reset_memory`.
        CoreError
            The core refused the job (its ERR bits); it is soft-reset, idle for the next call.
        """
        self._check_placement(at)
        x = self._activations(x, at.k, out_bits, self.m_max)
        m = x.shape[0]
        self.check_idle()
        self.check_stream(self.sink)
        try:
            self._operation("RUN", out_bits, M=m, K=at.k, N=at.n, WBASE=at.wbase, PBASE=at.pbase)
            self._send(de_act_beats(x.astype(np.int8), self.rows, self.cols))   # uint8 by construction
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
        """One golden-model job end to end: checked whole, placed in the memories left free (the layers placed
        before stay usable), run, and its place freed again.

        Raises
        ------
        ValueError
            A bad job (the golden model's checks), M above M_MAX, or a layer that does not fit what is free.
        """
        job = golden.check(job)
        if job.x.shape[0] > self.m_max:
            raise ValueError(f"M={job.x.shape[0]} above this core's M_MAX {self.m_max}")
        free = self._wnext, self._pnext
        at = self.place(job.w, job.bias, job.mult, job.shift)
        try:
            y, sat = self.matmul(job.x, at, job.out_bits)
        finally:
            self._wnext, self._pnext = free
        return golden.Output(y, sat)

    def _check_placement(self, at: Placement) -> None:
        """ValueError unless ``at`` is a placement of this driver in its current memory epoch, inside the
        memories (a hand-made or stale one would run on whatever the memories now hold)."""
        if not isinstance(at, Placement):
            raise ValueError(f"placement: expected a Placement from place(), got {type(at).__name__}")
        if at.epoch != self._epoch:
            raise ValueError(f"placement {at}: made before the memories were reset (epoch {at.epoch}, now "
                             f"{self._epoch}): its weights may have been overwritten; place the layer again")
        wbeats, ptiles = self.footprint(at.n, at.k)
        if not (1 <= at.n and 1 <= at.k <= self.k_max and 0 <= at.wbase and at.wbase + wbeats <= self.wdepth
                and 0 <= at.pbase and at.pbase + ptiles <= self.pdepth):
            raise ValueError(f"placement {at}: outside this core (N >= 1, K in 1..{self.k_max}, weight beats "
                             f"{at.wbase}..{at.wbase + wbeats - 1} in 0..{self.wdepth - 1}, parameter tiles "
                             f"{at.pbase}..{at.pbase + ptiles - 1} in 0..{self.pdepth - 1})")

    @staticmethod
    def _activations(x, k: int, out_bits: int, m_max: int | None) -> np.ndarray:
        """``x`` checked as M x ``k`` int8 activations (the golden model's value and ``out_bits`` checks), M at
        least 1 and at most ``m_max`` (None: any M)."""
        x = as_array("activations", x)
        if x.ndim != 2 or x.shape[1] != k or x.shape[0] < 1:
            raise ValueError(f"activations: expected (M, {k}) with M >= 1, got shape {x.shape}")
        golden.check(golden.Job(x, np.zeros((1, k), np.int64), [0], [0], [0], out_bits))   # values, out_bits
        if m_max is not None and x.shape[0] > m_max:
            raise ValueError(f"M={x.shape[0]} above this core's M_MAX {m_max}")
        return x
