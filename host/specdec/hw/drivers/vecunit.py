"""vecunit driver: the vector unit's operations on numpy vectors, one job a call.

Over the golden backend (the unit is in no board design, ``hwcontract.board``)::

    vu = specdec.hw.cores.golden_vecunit()                 # or VecUnit(description, stream, sink)
    x1, x2 = vu.normq(h, words, eps)                       # RMSNorm, then the engine's int8 planes
    y = vu.deq(sums, words, wmask, residual=h)             # the engine's int32 sums back to Q15.16, plus h
    ids, vals = vu.topk(logits, 4)
    vu.last.saturated, vu.last.cycles                      # SATURATED and CYCLES_BUSY - CYCLES_STALL of it

Each operation builds its job with the golden model's helpers (``hls_ref.vecunit.quant_job`` ...) and runs it
through :meth:`VecUnit.run`, which writes the registers, sends the job's s_axis frame (a beat a 64-bit word: X in
bits 31..0, C in 63..32, :func:`hwcontract.formats.vu_frame_bytes`), receives its m_axis words and reads the
RESULT and COUNTERS registers. Every value is checked on the host before the core is touched (the golden model's
checks: :func:`hls_ref.vecunit.check` and :func:`~hls_ref.vecunit.start_error`, and the frame's length); what the
core still refuses comes back as :class:`~specdec.errors.CoreError` with the decoded ERR bits, and the core is
left idle with nothing of the job on its output stream (:meth:`VecUnit.abandon`).

The same class takes a golden or simulation device (:mod:`specdec.hw.golden`, :mod:`specdec.sim.device`) and the
matching stream and sink, or pynq's on a board whose overlay holds the core (``bindto``).
"""
from __future__ import annotations


from hls_ref import vecunit as golden
from hwcontract.formats import vu_frame_bytes, vu_out_values
from hwcontract.regmap import VU_OPS

from ...errors import SpecdecError
from ..streams import RowStream, WordSink
from .base import SpecdecIP, vlnv

#: The ERR bits of a stream error (seen at its beat, after the Y words of the beats before it may have left).
_STREAM_ERRORS = golden.ERR["SHORT_STREAM"] | golden.ERR["LONG_STREAM"]


def start_message(job: golden.Job, err: int, params: dict[str, int]) -> str:
    """What the start check ``err`` (an ERR bit of :func:`hls_ref.vecunit.start_error`) refuses in ``job``, naming
    the register and its value."""
    name = VU_OPS[job.op] if 0 <= job.op < len(VU_OPS) else "?"
    p = params
    messages = {
        "BAD_OP": f"OP={job.op} is not an operation (0..{len(VU_OPS) - 1}: {', '.join(VU_OPS)})",
        "BAD_LEN": f"{name}: LEN={job.length} outside the core's 1..{p['LEN_MAX']}",
        "BAD_PARTS": f"DEQ: PARTS={job.parts} outside the core's 1..{p['PARTS_MAX']}",
        "BAD_HALF": f"ROPE: HALF={job.half} must be 1..{p['HALF_MAX']} (the core's HALF_MAX) and LEN={job.length} "
                    f"a multiple of 2 * HALF",
        "BAD_K": f"TOPK: K={job.k} outside 1..{min(p['K_MAX'], job.length)} (the core's K_MAX {p['K_MAX']}, at "
                 f"most LEN={job.length})"}
    bit = next(n for n, mask in golden.ERR.items() if mask == err)
    return "vecunit: " + messages[bit]


class VecUnit(SpecdecIP, golden.Ops):
    """Driver of the ``vecunit`` core (golden model ``hls_ref.vecunit``, RTL ``fpga.vecunit``): the operations of
    :class:`hls_ref.vecunit.Ops` over :meth:`run`.

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
    stream : RowStream, optional
        The core's s_axis (:meth:`~specdec.hw.streams.RowStream.send_parts` sends a job's beats as one frame); or
        :meth:`attach` later.
    sink : WordSink, optional
        The core's m_axis.
    """

    core_name = "vecunit"
    bindto = [vlnv("vecunit")]

    def __init__(self, description: dict, stream: RowStream | None = None, sink: WordSink | None = None) -> None:
        super().__init__(description)
        #: The build parameters (hwcontract.params names), read from PARAMS and LEN_MAX.
        self.params = {**self.read_fields("PARAMS"), "LEN_MAX": self.read_reg("LEN_MAX")}
        self.stream, self.sink = stream, sink
        #: RESULT and COUNTERS registers of the last job: SATURATED, CYCLES_BUSY, CYCLES_STALL, BEATS_IN/OUT.
        self.saturated = self.cycles = self.stall = self.beats_in = self.beats_out = 0
        #: Jobs done and their CYCLES_BUSY summed, since the driver was made.
        self.jobs = self.busy_cycles = 0

    def attach(self, stream: RowStream, sink: WordSink) -> None:
        """Send jobs through ``stream`` and receive outputs through ``sink``."""
        self.stream, self.sink = stream, sink

    @property
    def max_out_beats(self) -> int:
        """m_axis beats of the largest job (LEN_MAX elements, or TOPK's 2 K_MAX words): a receive buffer's size."""
        return max(self.params["LEN_MAX"], 2 * self.params["K_MAX"])

    # -- checks ---------------------------------------------------------------------------------------
    def check_job(self, job: golden.Job) -> golden.Job:
        """``job`` checked as the core would take it: every register and word in its width
        (:func:`hls_ref.vecunit.check`), the start checks (:func:`~hls_ref.vecunit.start_error`) and the frame's
        length; ValueError naming the value, before anything is written."""
        job = golden.check(job)
        err = golden.start_error(job, self.params)
        if err:
            raise ValueError(start_message(job, err, self.params))
        want = golden.frame_beats(job.op, job.length, job.parts, job.flags)
        if len(job.x) != want:
            raise ValueError(f"vecunit: {VU_OPS[job.op]} of LEN={job.length} takes {want} s_axis beats, got a frame "
                             f"of {len(job.x)}")
        return job

    # -- one job ----------------------------------------------------------------------------------------
    def run(self, job: golden.Job) -> golden.Output:
        """One job end to end: its registers, its frame, its m_axis words and RESULT / COUNTERS.

        Parameters
        ----------
        job : hls_ref.vecunit.Job
            The registers and the s_axis beats' X and C words.

        Returns
        -------
        hls_ref.vecunit.Output
            ``y`` the m_axis words (int64 values), no error, SATURATED and ``CYCLES_BUSY - CYCLES_STALL``.

        Raises
        ------
        ValueError
            A register, word or frame length the core would refuse (checked before the core is touched).
        CoreError
            The core refused the job (its ERR bits), or was left in error by traffic this driver did not run; in
            the first case it is soft-reset, idle for the next call.
        SpecdecError
            No stream or sink attached, the core BUSY with a job this driver did not start, or an output frame of
            the wrong length.
        """
        if self.stream is None or self.sink is None:
            raise SpecdecError("vecunit: no stream or sink attached (call attach(stream, sink) first)")
        job = self.check_job(job)
        frame = vu_frame_bytes(job.x, job.c)
        self.check_idle()
        self.check_stream(self.sink)
        words = None
        try:
            for name, v in job.registers().items():
                self.write_reg(name, v)
            self.start()
            if self.read_fields("STATUS")["ERROR"]:
                self.check()
            self.stream.send_parts([frame])
            if self.read_fields("STATUS")["ERROR"]:
                self.check()            # refused after the frame went in (it was drained): no output will come
            words = self.sink.recv()
            self.wait_done()
        except BaseException:
            self.abandon(received=words is not None)
            raise
        self.saturated, self.beats_in, self.beats_out, self.cycles, self.stall = (
            self.read_reg(r) for r in ("SATURATED", "BEATS_IN", "BEATS_OUT", "CYCLES_BUSY", "CYCLES_STALL"))
        self.jobs += 1
        self.busy_cycles += self.cycles
        want = golden.out_beats(job.op, job.length, job.k)
        if len(words) != want:
            raise SpecdecError(f"vecunit: {len(words)} m_axis words for a {VU_OPS[job.op]} job of {want}")
        return golden.Output(vu_out_values(words), 0, self.saturated, self.cycles - self.stall)

    def abandon(self, received: bool = False) -> None:
        """Leave a job that failed with nothing of it behind: after a stream error in a job that sent Y words, the
        frame the core closes with a zero word (``fpga.vecunit``: STATUS shows ERROR once that word is taken) is
        received, unless ``received`` says the job's receive took it, and discarded; then a soft reset, and the
        frames a sink took early are dropped."""
        try:
            if not received and self.read_reg("ERR") & _STREAM_ERRORS and self.read_reg("BEATS_OUT"):
                self.sink.recv()
        finally:
            self.soft_reset()
            pending = getattr(self.sink, "pending", None)
            if pending is not None and pending():
                self.sink.drop()
