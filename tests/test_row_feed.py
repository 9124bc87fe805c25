"""The simulation's row feeder (``fpga.system.row_feed``): its MyHDL model against a rows file, with and
without backpressure, and the refusal of :class:`specdec.sim.device.FeedStream` without a rows file.

The converted Verilog runs in every ``sim`` decode (the system toplevel), where tests/test_simulator.py checks
from the dump that each row came as one load and tests/test_runtime.py that the tokens are the target's.
"""
from __future__ import annotations

import numpy as np
import pytest
from myhdl import ResetSignal, Signal, StopSimulation, always, block, delay, instance, intbv

from fpga.system import row_feed
from specdec.errors import SpecdecError


def write_rows(path, beats: list[int]) -> None:
    """The rows file as the Verilog's ``$readmemh`` reads it: one hex word a line (none without a path)."""
    if path is not None:
        path.write_text("".join(f"{b:08x}\n" for b in beats))


@block
def bench(rows_file, frames, ready, out, DEPTH=8, WIDTH=32):
    """Load each frame of ``frames`` (a list of beat lists) in turn; TREADY follows ``ready(cycle)``; each
    taken beat goes to ``out`` as ``(frame, value, tlast, cycle)``."""
    clk, rst = Signal(bool(0)), ResetSignal(1, active=1, isasync=False)
    load, busy = Signal(bool(0)), Signal(bool(0))
    length = Signal(intbv(0, min=0, max=DEPTH + 1))
    tdata, tvalid, tready, tlast = Signal(intbv(0)[WIDTH:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    dut = row_feed(clk, rst, load, length, busy, tdata, tvalid, tready, tlast, DEPTH=DEPTH, rows_file=rows_file)
    cycle, done = [0], []

    @always(delay(5))
    def clock():
        clk.next = not clk

    @always(clk.posedge)
    def monitor():
        if tvalid and tready:
            out.append((len(done), int(tdata), bool(tlast), cycle[0]))
        cycle[0] += 1
        tready.next = ready(cycle[0])

    @instance
    def stimulus():
        yield clk.negedge
        rst.next = 0
        for beats in frames:
            write_rows(rows_file, beats)
            length.next = len(beats)
            load.next = 1
            yield clk.negedge
            load.next = 0
            while busy:
                yield clk.negedge
            done.append(len(beats))
        raise StopSimulation

    return dut, clock, monitor, stimulus


@pytest.mark.parametrize("backpressure", [False, True], ids=["ready", "backpressure"])
def test_feeder_offers_each_frame_beat_by_beat(backpressure, tmp_path):
    """Every beat of every frame, in order, TLAST on each frame's last, and ``feed_busy`` low only once the
    last is taken; without backpressure one beat a clock."""
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 2 ** 32, n).tolist() for n in (1, 8, 3, 5)]
    ready = (lambda c: c % 3 != 1) if backpressure else (lambda c: True)
    out: list[tuple[int, int, bool, int]] = []
    bench(tmp_path / "rows.hex", frames, ready, out).run_sim(quiet=1)
    for k, beats in enumerate(frames):
        got = [o for o in out if o[0] == k]
        assert [v for _, v, _, _ in got] == beats
        assert [last for _, _, last, _ in got] == [False] * (len(beats) - 1) + [True]
        cycles = got[-1][3] - got[0][3] + 1
        assert cycles == len(beats) if not backpressure else cycles >= len(beats)


def test_feedstream_needs_its_rows_file(monkeypatch):
    """Without ``$SPECDEC_ROWS`` the stream refuses at once, naming the variable (the feeder would read no file
    and the verifier would wait for rows forever)."""
    from specdec.sim.device import FeedStream
    from specdec.sim.harness import FEED_ENV
    monkeypatch.delenv(FEED_ENV, raising=False)
    with pytest.raises(SpecdecError, match=FEED_ENV):
        FeedStream(dut=None)


def test_model_without_rows_file_refuses_a_load():
    """The MyHDL model has no plusarg: a load with no ``rows_file`` raises, naming what is missing."""
    with pytest.raises(ValueError, match="no rows file"):
        bench(None, [[1, 2]], lambda c: True, []).run_sim(quiet=1)
