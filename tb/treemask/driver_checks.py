"""The treemask driver's checks, run unchanged on every backend (golden model, Verilator, Icarus, a board).

Plain synchronous code, as a user would write it on a board: in simulation it runs in a thread started
with ``cocotb.task.bridge``. Every tree's mask and depths are compared with ``hls_ref.treemask``.
"""
from __future__ import annotations

import numpy as np

from hls_ref import treemask as golden
from hls_ref.vectors import MEDUSA_PATHS, random_parents
from specdec.errors import CoreError
from specdec.hw.drivers.treemask import TreeMask
from hwcontract.regmap import TREE_MAX_NODES
from specdec.decoding.tree import parents_from_paths

def check_tree(drv: TreeMask, parents, exact_cycles: bool) -> None:
    """One tree through the driver against the golden model, and the result registers."""
    want = golden.tree_mask(parents, drv.nodes_max)
    mask, depth = drv.masks(parents)
    n = len(parents)
    assert mask.shape == (n, n) and mask.dtype == bool and depth.dtype == np.int64
    assert np.array_equal(mask, want.dense()), f"parents {list(parents)}: mask differs"
    assert depth.tolist() == list(want.depth), f"parents {list(parents)}: depth {depth} != {want.depth}"
    assert drv.read_reg("ROWS") == n and drv.read_reg("MAX_DEPTH") == want.max_depth
    stall = drv.read_reg("CYCLES_STALL")
    assert drv.cycles - stall == golden.cycles(n), (drv.cycles, stall, n)
    if exact_cycles:
        assert stall == 0
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 1, "ERROR": 0}


def core_error(drv: TreeMask, parents, bits: list[str]) -> None:
    """Registers written raw (past the host-side checks): START must raise CoreError with ``bits``.
    A tree longer than the PARENT registers hold (N = 65) writes only NODES."""
    if len(parents) <= TREE_MAX_NODES:
        drv.write_tree(parents)
    else:
        drv.write_reg("NODES", len(parents))
    try:
        drv.start()
        drv.check()
    except CoreError as e:
        assert e.bits == bits, f"CoreError bits {e.bits}, expected {bits}"
    else:
        raise AssertionError(f"no CoreError, expected {bits}")
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 1}
    assert all(drv.read_reg(r) == 0 for r in ("ROWS", "MAX_DEPTH", "CYCLES_BUSY"))
    drv.start()                                   # ignored while in error
    assert drv.read_fields("STATUS")["ERROR"] == 1 and drv.read_reg("ROWS") == 0
    nodes = drv.read_reg("NODES")
    drv.soft_reset()
    assert drv.read_reg("ERR") == 0 and drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    assert drv.read_reg("NODES") == nodes         # rw registers survive the soft reset


def check_treemask_driver(drv: TreeMask, seed: int = 3, exact_cycles: bool = False, sizes=None) -> None:
    """Example trees, random trees of the given sizes (default every size), host-side and core errors."""
    nmax = drv.nodes_max
    rnd = np.random.default_rng(seed)
    if nmax >= 7:
        parents = parents_from_paths(MEDUSA_PATHS)
        mask, depth = drv.masks(parents)
        assert mask.astype(int).tolist() == [[1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0, 0],
                                             [1, 1, 0, 1, 0, 0, 0], [1, 1, 0, 0, 1, 0, 0], [1, 0, 1, 0, 0, 1, 0],
                                             [1, 0, 1, 0, 0, 0, 1]]
        assert depth.tolist() == [0, 1, 1, 2, 2, 2, 2] and drv.cycles >= golden.cycles(7)
    for n in sizes or range(1, nmax + 1):
        check_tree(drv, random_parents(rnd, n), exact_cycles)
    check_tree(drv, [-1] + list(range(nmax - 1)), exact_cycles)        # the chain: depth NODES_MAX - 1

    # host-side errors: nothing reaches the core (still DONE, ROWS unchanged)
    rows = drv.read_reg("ROWS")
    cases = [([], "got 0"), ([-1] + [0] * nmax, f"got {nmax + 1}"), ([-1, 0, 2], "node 2 has parent 2"),
             ([-1, 0, 0, 5], "node 3 has parent 5"), ([-1, -1], "node 1 has parent -1")]
    for bad, match in [(b, m) for b, m in cases if len(b) <= nmax or "got" in m]:
        try:
            drv.masks(bad)
        except ValueError as e:
            assert match in str(e), f"{match!r} not in {e}"
        else:
            raise AssertionError(f"no ValueError for {bad}")
        assert drv.read_reg("ROWS") == rows and drv.read_fields("STATUS")["DONE"] == 1

    # core errors (registers written raw), each recovered by soft reset and a good tree
    core_error(drv, [], ["BAD_NODES"])
    check_tree(drv, random_parents(rnd, min(5, nmax)), exact_cycles)
    core_error(drv, [-1] + [0] * nmax, ["BAD_NODES"])
    if nmax >= 2:
        core_error(drv, [-1] + list(range(nmax - 2)) + [nmax - 1], ["BAD_PARENT"])   # last node: parent == i
        core_error(drv, [-1] + list(range(nmax - 2)) + [200], ["BAD_PARENT"])        # ... and parent > i
    check_tree(drv, random_parents(rnd, nmax), exact_cycles)
