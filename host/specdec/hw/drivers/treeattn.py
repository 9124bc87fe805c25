"""treeattn driver: one KV head's tree attention, the committed context gathered from its KV pages.

On a board::

    ol = pynq.Overlay("specdec.bit")
    ta = ol.treeattn                                       # bound through ``bindto``
    ta.attach(DmaGatherStream(ol.treeattn_dma), DmaSink(ol.treeattn_dma, max_words=ta.max_out_beats))
    pages = ta.pages(pool, table.rows)                     # the sequence's KV pages in page-table order
    o = ta.attend(q, pages, ctx, k_step, v_step, mask, mult, shift)     # (N, GROUP, HEAD_DIM) Q7.8 codes
    ta.cycles, ta.macs                                     # CYCLES_BUSY and MACS of that call

A KV page is an int8 array ``(block, 2, HEAD_DIM)``: token t's key at ``[t, 0]``, its value at ``[t, 1]``, the
layout the s_axis frame takes key by key, so each page goes out as it lies (one DMA descriptor from its own
physical address on a board). The pages come in the order the kvpage core's block table lists the sequence's
rows (``specdec.kv.pagetable.PagedKV.rows``: row i holds positions ``i * block .. i * block + block - 1``); the
last may be partly filled, and ``ctx`` says how many keys count.

Off the board the same class takes a golden or simulation device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`) and the matching stream and sink. Every value is checked on the host before the core
is touched (the golden model's checks: ``hls_ref.treeattn``); what the core still refuses comes back as
:class:`~specdec.errors.CoreError` with the decoded ERR bits.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hls_ref import treeattn as golden
from hwcontract.regmap import integer

from ...errors import SpecdecError
from ..streams import RowStream, WordSink
from .base import SpecdecIP, vlnv

_START_ERRORS = {golden.ERR_BAD_CTX: "CTX={ctx} above the core's CTX_MAX {ctx_max}",
                 golden.ERR_BAD_NODES: "N={n} query rows outside the core's 1..{nodes_max}",
                 golden.ERR_BAD_SCALE: "MULT={mult}, SHIFT={shift}: MULT must be 1..65535 and SHIFT 0..31"}


class TreeAttn(SpecdecIP):
    """Driver of the ``treeattn`` core (golden model ``hls_ref.treeattn``, RTL ``fpga.treeattn``).

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
    stream : RowStream, optional
        The core's s_axis (:meth:`~specdec.hw.streams.RowStream.send_parts` sends a job's header, pages and step
        as one frame); or :meth:`attach` later.
    sink : WordSink, optional
        The core's m_axis.
    """

    core_name = "treeattn"
    bindto = [vlnv("treeattn")]

    def __init__(self, description: dict, stream: RowStream | None = None, sink: WordSink | None = None) -> None:
        super().__init__(description)
        #: The build parameters (hwcontract.params names), read from PARAMS and CTX_MAX.
        self.params = {**self.read_fields("PARAMS"), "CTX_MAX": self.read_reg("CTX_MAX")}
        self.stream, self.sink = stream, sink
        #: COUNTERS and RESULT registers of the last :meth:`attend`.
        self.cycles = self.stall = self.macs = 0
        #: Jobs done and their CYCLES_BUSY summed, since the driver was made.
        self.jobs = self.busy_cycles = 0

    def attach(self, stream: RowStream, sink: WordSink) -> None:
        """Send jobs through ``stream`` and receive outputs through ``sink``."""
        self.stream, self.sink = stream, sink

    @property
    def max_out_beats(self) -> int:
        """m_axis beats of the largest job (NODES_MAX rows): a receive buffer's size."""
        p = self.params
        return p["NODES_MAX"] * p["GROUP"] * p["HEAD_DIM"] // golden.OUT_CODES

    @staticmethod
    def pages(pool: np.ndarray, rows: Sequence[int]) -> list[np.ndarray]:
        """The pages ``rows`` names (a block table's pages, row 0 first) of an int8 KV pool ``(pages, block, 2,
        HEAD_DIM)``, as views: what :meth:`attend` gathers."""
        if not isinstance(pool, np.ndarray):
            raise ValueError(f"KV pool: expected an int8 array (pages, block, 2, HEAD_DIM), got {type(pool).__name__}")
        if pool.ndim != 4 or pool.shape[2] != 2:
            raise ValueError(f"KV pool: expected (pages, block, 2, HEAD_DIM), got shape {pool.shape}")
        out = []
        for i, r in enumerate(rows):
            page = integer(r, f"page of row {i}")
            if not 0 <= page < pool.shape[0]:
                raise ValueError(f"row {i} names page {page}, outside the pool's 0..{pool.shape[0] - 1}")
            out.append(pool[page])
        return out

    # -- checks ---------------------------------------------------------------------------------------
    def _context(self, pages: Sequence[np.ndarray], ctx: int) -> list[np.ndarray]:
        """The page parts the frame takes: every page whole but the last, its first keys up to ``ctx``."""
        hd = self.params["HEAD_DIM"]
        ctx = integer(ctx, "treeattn: ctx")
        if ctx < 0:
            raise ValueError(f"treeattn: ctx={ctx} context keys must be >= 0")
        pages = list(pages)
        if not pages and ctx:
            raise ValueError(f"treeattn: ctx={ctx} keys but no KV pages")
        if not pages:
            return []
        pages = [np.asanyarray(pg) for pg in pages]     # a pynq buffer's page keeps its physical address
        block = pages[0].shape[0] if pages[0].ndim == 3 else -1
        for i, a in enumerate(pages):
            if a.dtype != np.int8 or a.shape != (block, 2, hd) or block < 1:
                raise ValueError(f"treeattn: KV page {i} must be int8 (block, 2, HEAD_DIM={hd}) like page 0, got "
                                 f"{a.dtype} {a.shape}")
        need = -(-ctx // block)
        if need != len(pages):
            raise ValueError(f"treeattn: ctx={ctx} keys at {block} a page take {need} pages, got {len(pages)}")
        last = ctx - (need - 1) * block
        return pages[:-1] + [pages[-1][:last]]

    def _step(self, q, k_step, v_step, mask, mult, shift, ctx: int) -> golden.Job:
        """The step's arrays and registers checked by the golden model (an empty context stands for the pages), and
        every START and MASK check the core makes, as ValueError naming the value."""
        hd = self.params["HEAD_DIM"]
        empty = np.zeros((0, hd), np.int8)
        job = golden.check(golden.Job(q, empty, empty, k_step, v_step, mask, mult, shift), self.params)
        err = golden.start_error(ctx, job.n, job.mult, job.shift, self.params)
        if err:
            p = self.params
            raise ValueError("treeattn: " + _START_ERRORS[err].format(
                ctx=ctx, ctx_max=p["CTX_MAX"], n=job.n, nodes_max=p["NODES_MAX"], mult=job.mult, shift=job.shift))
        if golden.mask_error(job.mask):
            bad = next(r for r in range(job.n) if golden.mask_error(job.mask[:r + 1]))
            raise ValueError(f"treeattn: mask row {bad} = {job.mask[bad]:#x} must have bit {bad} set and none above "
                             "(nodes in topological order)")
        return job

    # -- one job ----------------------------------------------------------------------------------------
    def attend(self, q, pages: Sequence[np.ndarray], ctx: int, k_step, v_step, mask, mult: int,
               shift: int) -> np.ndarray:
        """The attention of the step's rows over ``ctx`` context keys in ``pages`` and the step's own nodes.

        Parameters
        ----------
        q : array of int8 codes, shape (N, GROUP, HEAD_DIM)
            The rows' query heads of this KV head, RoPE applied.
        pages : sequence of int8 arrays (block, 2, HEAD_DIM)
            The context's KV pages in block-table order (:meth:`pages`), exactly ``ceil(ctx / block)`` of them.
        ctx : int
            Committed context keys L (0..CTX_MAX).
        k_step, v_step : arrays of int8 codes, shape (N, HEAD_DIM)
            The step's nodes' keys (RoPE applied) and values.
        mask : sequence of int, length N
            Row r's visible step nodes (bit j: node j), the treemask core's rows; a chain's row r is
            ``2**(r + 1) - 1``.
        mult, shift : int
            MULT and SHIFT (``hls_ref.treeattn.multiplier``).

        Returns
        -------
        ndarray of int16, shape (N, GROUP, HEAD_DIM)
            Q7.8 codes in units of v's codes.

        Raises
        ------
        ValueError
            A bad shape, code, page, mask row or register value (checked before the core is touched).
        CoreError
            The core refused the job (its ERR bits); it is soft-reset, idle for the next call.
        """
        if self.stream is None or self.sink is None:
            raise SpecdecError("treeattn: no stream or sink attached (call attach(stream, sink) first)")
        parts = self._context(pages, ctx)
        job = self._step(q, k_step, v_step, mask, mult, shift, int(ctx))
        head, step = golden.header_bytes(job, self.params), golden.kv_bytes(job.k_step, job.v_step)
        self.check_idle()
        self.check_stream(self.sink)
        try:
            for name, v in (("CTX", ctx), ("NODES", job.n), ("MULT", job.mult), ("SHIFT", job.shift)):
                self.write_reg(name, v)
            self.start()
            if self.read_fields("STATUS")["ERROR"]:
                self.check()
            self.stream.send_parts([head, *parts, step])
            if self.read_fields("STATUS")["ERROR"]:
                self.check()            # refused after the frame went in (it was drained): no output will come
            words = self.sink.recv()
            self.wait_done()
        except BaseException:
            self.soft_reset()
            raise
        self.cycles, self.stall, self.macs = (self.read_reg(r) for r in ("CYCLES_BUSY", "CYCLES_STALL", "MACS"))
        self.jobs += 1
        self.busy_cycles += self.cycles
        return golden.unpack_out(words, job.n, self.params)

    def run(self, job: golden.Job, block: int | None = None) -> golden.Output:
        """One golden-model job end to end, its context cut into pages of ``block`` keys (default the core's
        BLOCK): the output, no error, MACS and ``CYCLES_BUSY - CYCLES_STALL``."""
        job = golden.check(job, self.params)
        block = self.params["BLOCK"] if block is None else integer(block, "treeattn: block")
        if block < 1:
            raise ValueError(f"treeattn: block={block} keys a page must be >= 1")
        kv = np.stack([job.k_ctx, job.v_ctx], axis=1).astype(np.int8)
        pad = -len(kv) % block
        pool = np.concatenate([kv, np.zeros((pad, 2, kv.shape[2]), np.int8)]).reshape(-1, block, 2, kv.shape[2])
        out = self.attend(job.q, list(pool), job.ctx, job.k_step, job.v_step, job.mask, job.mult, job.shift)
        return golden.Output(out, 0, self.macs, self.cycles - self.stall)
