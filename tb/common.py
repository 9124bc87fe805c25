"""Testbench pieces shared by every core: the AXI-Lite TB, the idle x backpressure cross, the build request.

Every cocotb test that drives AXI-Lite or AXI-Stream is registered with :func:`cross_test`, which runs it
four times, as verilog-axi's TestFactory sweeps its idle inserter and backpressure generator:

=============  ================================================================================
idle           the master's AW, W and AR channels, and every stream source into the core, pause
backpressure   the master's BREADY and RREADY, and every stream sink's TREADY, pause
=============  ================================================================================

Each one off or on; "on" pauses a channel in random runs of cycles (a fraction :data:`PAUSE_P` of the
cycles, runs of :data:`PAUSE_RUN` cycles on average, a fixed seed per channel, so every run is the same).
The test receives a :class:`Stimulus`, hands it to its TB class (:meth:`Stimulus.apply`), and deals long
random runs across the four (:meth:`Stimulus.share`, :meth:`Stimulus.deal`), so the cross costs about as
much as one pass over all rounds.

One :class:`PauseDriver` coroutine per TB sets the ``pause`` of every paused channel, each clock while the
channel has something to move, and sleeps while none has. cocotbext-axi's own pause generators wake one
coroutine per channel every clock, busy or not: +60 % simulation time on the verifier's losslessness run.
"""
from __future__ import annotations

import functools
import itertools
import os
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge, Timer

from specdec.sim.device import AxilTB

#: Fraction of the cycles in which a paused channel holds back ...
PAUSE_P = 0.2
#: ... in runs of this many cycles on average (the gaps between them average PAUSE_RUN / PAUSE_P - PAUSE_RUN):
#: single-cycle pauses and long stalls both occur, and the pattern changes every few cycles, not every one.
PAUSE_RUN = 2
#: Clock cycles a :class:`PauseDriver` sleeps while no paused channel has anything to move (a transfer that
#: starts meanwhile sees the patterns as they were for at most this long).
IDLE_SLEEP = 8
#: The two settings of each axis; cocotb names the tests ``<test>/idle=on/backpressure=off``.
SWITCH = (cocotb.Param(False, "off"), cocotb.Param(True, "on"))
COMBINATIONS = 4


def pauses(seed: int, p: float = PAUSE_P, run: float = PAUSE_RUN) -> Iterator[bool]:
    """An endless pause pattern, reproducible by seed: True (hold) in a fraction ``p`` of the cycles, in
    runs of ``run`` cycles on average (a two-state Markov chain; run lengths are geometric)."""
    gap = run * (1 - p) / p if 0 < p < 1 else 0.0
    if not (0 < p < 1 and run >= 1 and gap >= 1):
        raise ValueError(f"a pause pattern needs 0 < p < 1 and runs and gaps of >= 1 cycle on average; got "
                         f"p={p}, run={run} (gap {gap:.3g})")
    rnd = random.Random(seed)
    leave_on, leave_off = 1 / run, p / (run * (1 - p))
    on = rnd.random() < p
    while True:
        yield on
        on = rnd.random() >= leave_on if on else rnd.random() < leave_off


def lite_channels(tb: AxilTB) -> tuple[tuple, tuple]:
    """The cocotbext-axi channels of ``tb``'s AXI-Lite master that idle cycles pause (AW, W, AR: VALID)
    and that backpressure pauses (B, R: READY), each with a test for "a transfer is under way"."""
    w, r = tb.axil.write_if, tb.axil.read_if

    def writing() -> bool:
        return not w.idle()

    def reading() -> bool:
        return not r.idle()

    return (((w.aw_channel, writing), (w.w_channel, writing), (r.ar_channel, reading)),
            ((w.b_channel, writing), (r.r_channel, reading)))


def _always() -> bool:
    return True


class PauseDriver:
    """Sets the ``pause`` of cocotbext-axi channels (stream sources and sinks, AXI-Lite channels) from
    their patterns at every rising clock edge, all in one coroutine.

    A channel's pattern advances only while its ``busy`` test says a transfer is under way (a stream source
    with a frame queued, an AXI-Lite master with an operation in flight; a stream sink is always busy, as
    the core decides when it streams); while no channel is busy, the driver sleeps :data:`IDLE_SLEEP`
    cycles at a time.

    Parameters
    ----------
    clock : cocotb handle
        The clock the channels run on.
    """

    def __init__(self, clock) -> None:
        self.clock = clock
        self.patterns: dict = {}
        self.held: set = set()
        self._task = None

    def add(self, channel, pattern: Iterator[bool], busy: Callable[[], bool] = _always) -> None:
        """Pause ``channel`` by ``pattern`` from the next clock edge on, while ``busy()``."""
        self.patterns[channel] = (pattern, busy)
        if self._task is None:
            self._task = cocotb.start_soon(self._run())

    def hold(self, channel, hold: bool = True) -> None:
        """Hold ``channel`` paused (``hold``), or hand it back to its pattern (or unpaused, without one)."""
        if hold:
            self.held.add(channel)
            channel.pause = True
        else:
            self.held.discard(channel)
            channel.pause = False

    async def _run(self) -> None:
        edge = RisingEdge(self.clock)
        await edge
        start = get_sim_time("step")
        await edge
        sleep = Timer(IDLE_SLEEP * (get_sim_time("step") - start), "step")
        while True:
            active = False
            for channel, (pattern, busy) in self.patterns.items():
                if channel not in self.held and busy():
                    channel.pause = next(pattern)
                    active = True
            await (edge if active else sleep)


@dataclass(frozen=True)
class Stimulus:
    """One point of the idle x backpressure cross (both off: a quiet bus)."""

    idle: bool = False
    backpressure: bool = False

    @property
    def index(self) -> int:
        """0..3: (off, off), (off, on), (on, off), (on, on)."""
        return 2 * int(self.idle) + int(self.backpressure)

    def share(self, total: int) -> int:
        """This combination's part of ``total`` rounds dealt across the four (the first get one more)."""
        if total < 0:
            raise ValueError(f"total rounds must be >= 0, got {total}")
        return total // COMBINATIONS + int(self.index < total % COMBINATIONS)

    def deal(self, items: Iterable) -> list:
        """This combination's items of ``items`` dealt round-robin across the four."""
        return list(itertools.islice(items, self.index, None, COMBINATIONS))

    def apply(self, tb: AxilTB, sources: Iterable = (), sinks: Iterable = ()) -> PauseDriver:
        """Pause ``tb``'s AXI-Lite master and the cocotbext-axi stream ``sources`` (idle: VALID pauses)
        and ``sinks`` (backpressure: READY pauses) as this combination says; every channel has its own
        seed. Returns the driver (``hold`` stops a channel outright)."""
        driver = PauseDriver(tb.dut.clk)
        idle, backpressure = lite_channels(tb)
        if self.idle:
            for k, (channel, busy) in enumerate((*idle, *((s, _not_idle(s)) for s in sources))):
                driver.add(channel, pauses(100 + k), busy)
        if self.backpressure:
            for k, (channel, busy) in enumerate((*backpressure, *((s, _always) for s in sinks))):
                driver.add(channel, pauses(300 + k), busy)
        return driver

    def __str__(self) -> str:
        return f"idle={'on' if self.idle else 'off'} backpressure={'on' if self.backpressure else 'off'}"


QUIET = Stimulus()


def _not_idle(source) -> Callable[[], bool]:
    """A stream source's busy test: a frame queued or in transfer."""
    return lambda: not source.idle()


def cross_test(func=None, **test_kwargs):
    """``@cocotb.test`` over the idle x backpressure cross: the coroutine ``f(dut, stim)`` becomes four
    tests ``<name>/idle=off|on/backpressure=off|on``, each called with its :class:`Stimulus`.

    ``test_kwargs`` go to ``cocotb.test`` (``timeout_time``, ``skip``, ...).
    """
    def register(f):
        @functools.wraps(f)
        async def run(dut, idle: bool, backpressure: bool):
            return await f(dut, Stimulus(idle, backpressure))
        return cocotb.test(**test_kwargs)(cocotb.parametrize(idle=SWITCH, backpressure=SWITCH)(run))
    return register(func) if func is not None else register


def cross_names(*tests: str) -> str:
    """A runner ``testcase`` filter selecting every combination of the named :func:`cross_test` tests."""
    return ",".join(f"{t}/idle={i.name}/backpressure={b.name}" for t in tests for i in SWITCH for b in SWITCH)


def param(name: str) -> int:
    """A build parameter as the runner requested it (``PARAM_<NAME>``, set by specdec.sim.harness).

    Tests read a core's parameters from the DUT (its PARAMS registers), as a driver does. This is the one
    other source, used only to check that those registers report the build that was asked for.
    """
    raw = os.environ.get(f"PARAM_{name}")
    if raw is None:
        raise KeyError(f"parameter {name} was not passed to the simulation (PARAM_{name} unset)")
    return int(raw)
