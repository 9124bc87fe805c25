"""treemask driver: the shared checks on the golden backend, a fake DMA sink, and the host-side API."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import treemask as golden
from specdec.errors import CoreTimeout, SpecdecError
from specdec.hw.drivers.base import description
from specdec.hw.drivers.treemask import TreeMask
from specdec.hw.golden import GoldenDevice
from specdec.hw.streams import WORD_BYTES, DmaSink
from tb.treemask.driver_checks import check_treemask_driver, core_error


def golden_treemask(nodes_max: int = 64) -> tuple[TreeMask, GoldenDevice]:
    dev = GoldenDevice({0: "treemask"}, params={0: {"nodes_max": nodes_max}})
    return TreeMask(description("treemask", dev), dev.sink(0)), dev


@pytest.mark.parametrize("nodes_max", [64, 8, 1])
def test_driver_on_golden_model(nodes_max):
    drv, _ = golden_treemask(nodes_max)
    assert drv.nodes_max == nodes_max
    check_treemask_driver(drv, exact_cycles=True)


def test_cycles_and_error_recovery_on_golden():
    drv, dev = golden_treemask(8)
    drv.masks([-1, 0, 1])
    assert drv.cycles == golden.cycles(3)
    core_error(drv, [-1, 0, 2], ["BAD_PARENT"])
    assert not dev.models[0].frames                # nothing was streamed
    mask, depth = drv.masks([-1, 0, 1, 1])
    assert mask.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]] and depth.tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("parents, words", [
    ([[-1, 0, 0]], r"flat sequence, got the nested entry \[-1, 0, 0\] at node 0"),
    (np.array([[-1, 0, 0]]), r"flat sequence, got an array of shape \(1, 3\)"),
    ([-1, [0], 0], r"flat sequence, got the nested entry \[0\] at node 1"),
    (5, r"flat sequence of integers, got 5"),
    ("abc", r"flat sequence of integers, got 'abc'"),
    ({0: -1, 1: 0}, r"flat sequence of integers, got \{0: -1, 1: 0\}"),
], ids=["nested", "2-D array", "nested entry", "a number", "a string", "a dict"])
def test_parents_that_are_no_flat_sequence_are_refused_before_the_core(parents, words):
    """``[[-1, 0, 0]]`` had been taken as a one-node tree (its one entry the root's, ignored) and answered with
    a 1 x 1 mask; a number raised TypeError. Each is refused naming what was given, and nothing reaches the
    core."""
    drv, dev = golden_treemask(8)
    nodes = drv.read_reg("NODES")
    with pytest.raises(ValueError, match=r"tree parents must be a " + words):
        drv.masks(parents)
    assert not dev.models[0].frames and drv.read_reg("NODES") == nodes and not drv.read_fields("STATUS")["BUSY"]
    assert drv.masks(iter([-1, 0, 0]))[1].tolist() == [0, 1, 1]         # any flat iterable
    assert drv.masks(np.array([-1, 0, 1]))[1].tolist() == [0, 1, 2]     # a 1-D array


def test_parents_that_are_no_integers_are_refused_before_the_core():
    """True had been read as node 1 (``operator.index`` takes it): ``masks([-1, 0, True])`` answered a chain.
    A float or a bool among the parents is named, and nothing reaches the core."""
    drv, dev = golden_treemask(8)
    for parents, words in (([-1, 0, True], r"node 2's is True"), ([-1, 0.5], r"node 1's is 0.5"),
                           (np.array([-1, 0, 1], bool), r"got bool")):
        with pytest.raises(ValueError, match=r"tree parents must be integers" + r".*" + words):
            drv.masks(parents)
    assert not dev.models[0].frames and not drv.read_fields("STATUS")["BUSY"]


def test_golden_sink_without_frame_times_out():
    _, dev = golden_treemask()
    with pytest.raises(CoreTimeout):
        dev.sink(0).recv()


def test_no_sink_attached():
    dev = GoldenDevice({0: "treemask"})
    drv = TreeMask(description("treemask", dev))
    with pytest.raises(Exception, match="attach"):
        drv.masks([-1, 0])
    drv.attach(dev.sink(0))
    assert drv.masks([-1, 0])[1].tolist() == [0, 1]


class FakeDma:
    """An AXI DMA whose S2MM channel copies the golden model's next frame into the armed buffer."""

    def __init__(self, sink) -> None:
        self.recvchannel = self
        self.sink, self.idle, self.error, self.transferred, self.armed = sink, True, False, 0, None

    def transfer(self, array, start: int = 0, nbytes: int = 0) -> None:
        self.armed = array

    def wait(self) -> None:
        words = self.sink.recv()
        data = b"".join(w.to_bytes(WORD_BYTES, "little") for w in words)
        self.armed[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.transferred = len(data)


def test_driver_through_fake_dma():
    dev = GoldenDevice({0: "treemask"}, params={0: {"nodes_max": 64}})
    allocated = []

    def allocate(shape, dtype):
        allocated.append(np.zeros(shape, dtype=dtype))
        return allocated[-1]

    sink = DmaSink(FakeDma(dev.sink(0)), allocator=allocate)
    assert allocated[0].nbytes == 64 * WORD_BYTES == 64 * 16
    drv = TreeMask(description("treemask", dev), sink)
    check_treemask_driver(drv, sizes=(1, 2, 17, 64), exact_cycles=True)


class _FailingSink:
    """A word sink whose first receive fails (a DMA timeout, say) and which then passes frames through."""

    def __init__(self, inner) -> None:
        self.inner, self.failed = inner, False

    def recv(self) -> list[int]:
        if not self.failed:
            self.failed = True
            raise CoreTimeout("simulated DMA timeout")
        return self.inner.recv()


def test_failed_call_leaves_the_core_idle_and_the_next_call_clean():
    """An exception after START soft-resets the core: the next call streams its own tree, not a stale one."""
    dev = GoldenDevice({0: "treemask"}, params={0: {"nodes_max": 8}})
    drv = TreeMask(description("treemask", dev), _FailingSink(dev.sink(0)))
    with pytest.raises(CoreTimeout):
        drv.masks([-1, 0, 0, 0, 0])                    # its frame is left behind by the failed receive
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    mask, depth = drv.masks([-1, 0, 1])
    assert mask.astype(int).tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]] and depth.tolist() == [0, 1, 2]


def test_a_tree_started_raw_is_refused_not_returned_for_the_next_one():
    """write_tree + start() by hand leave that tree's frame on the stream (the core BUSY until it is taken, as the
    RTL's output stage holds it): masks() of another tree is refused, nothing written, instead of returning the
    chain's depths for a star; after soft_reset() it gives the star's own."""
    drv, _ = golden_treemask(8)
    drv.write_tree([-1, 0, 1, 2])
    drv.start()
    with pytest.raises(SpecdecError, match="BUSY with an operation this driver did not start"):
        drv.masks([-1, 0, 0, 0])
    drv.soft_reset()
    assert drv.masks([-1, 0, 0, 0])[1].tolist() == [0, 1, 1, 1]


class _EarlySink:
    """A stream that takes every frame as the core sends it (a DMA always armed, as the simulation's sink), holding
    one frame of another tree that an earlier start() left there; it says how many it holds, and drops them."""

    def __init__(self, sink, stale: list[int]) -> None:
        self.sink, self.queue = sink, [stale]

    def recv(self) -> list[int]:
        self.queue.append(self.sink.recv())
        return self.queue.pop(0)

    def pending(self) -> int:
        return len(self.queue)

    def drop(self) -> int:
        n, self.queue = len(self.queue), []
        return n


def test_a_frame_waiting_on_a_stream_that_took_it_early_is_dropped_not_taken():
    """On a stream that takes frames as the core sends them (the simulation's sink), a tree started by hand leaves
    its frame there with the core idle: masks() of the next tree of the same size refuses and drops it, nothing
    written, instead of returning the chain's depths for a star; the calls after are clean (each later call had
    taken the previous call's frame)."""
    dev = GoldenDevice({0: "treemask"}, params={0: {"nodes_max": 8}})
    chain = golden.stream_words(golden.tree_mask([-1, 0, 1, 2], 8))
    drv = TreeMask(description("treemask", dev), _EarlySink(dev.sink(0), chain))
    with pytest.raises(SpecdecError, match=r"1 frame\(s\) from an operation this driver did not run"):
        drv.masks([-1, 0, 0, 0])
    assert drv.read_reg("ROWS") == 0                # nothing reached the core
    assert drv.masks([-1, 0, 0, 0])[1].tolist() == [0, 1, 1, 1]
    assert drv.masks([-1, 0, 1, 2])[1].tolist() == [0, 1, 2, 3]
