"""treemask: golden model of the tree-attention mask generator (bit-exact with docs/treemask.md).

A token tree of N nodes is its parent array: node 0 is the root (the token chosen last round, whose
position follows the committed context), and node i >= 1 has ``parent(i) < i``, so node order is a
topological order and one pass builds every row from an earlier one:

    row(0) = 1 << 0,    row(i) = row(parent(i)) | (1 << i)
    depth(0) = 0,       depth(i) = depth(parent(i)) + 1

Row i has bit j set when node j is node i or one of its ancestors: the nodes token i attends to inside
the tree (it also attends to the whole committed context). ``depth(i)`` is its position id after the
root's. The core streams one row per cycle; this module is what every face is checked against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwcontract import params as hwparams
from hwcontract.formats import pack_mask_word
from hwcontract.regmap import TREE_MAX_NODES, core
from hwcontract.tree import check_field_widths, node_entries

_ERR = core("treemask").reg("ERR")
ERR_BAD_NODES = _ERR.field("BAD_NODES").mask
ERR_BAD_PARENT = _ERR.field("BAD_PARENT").mask


@dataclass(frozen=True)
class Masks:
    """What the core produces for one tree: the mask rows (bit j of ``rows[i]``), the depths, the
    register results and the error bits (0 when the tree is well formed; then ``rows`` is empty)."""

    rows: tuple[int, ...]
    depth: tuple[int, ...]
    max_depth: int
    err: int

    def dense(self) -> np.ndarray:
        """The mask as a bool matrix (N, N): ``m[i, j]`` when node j is node i or one of its ancestors."""
        n = len(self.rows)
        bits = np.array(self.rows, dtype=object)
        return np.array([[(int(r) >> j) & 1 for j in range(n)] for r in bits], dtype=bool).reshape(n, n)


def start_error(parents, nodes_max: int = TREE_MAX_NODES) -> int:
    """CTRL.START's checks in order: BAD_NODES (N = 0 or N > nodes_max), then BAD_PARENT (the first node
    i in 1..N-1 whose parent is not below i). ``parents[0]`` is ignored."""
    n = len(parents)
    if not 1 <= n <= nodes_max:
        return ERR_BAD_NODES
    par = np.asarray(parents[1:], dtype=np.int64)
    if par.size and (par >= np.arange(1, n)).any():
        return ERR_BAD_PARENT
    return 0


def check_nodes_max(nodes_max) -> int:
    """``nodes_max`` as an int that hwcontract.params allows for the core's NODES_MAX, or ValueError naming it
    (a larger one would build mask rows wider than the stream's 64-bit MASK field)."""
    return hwparams.spec("treemask")["NODES_MAX"].check(nodes_max, "treemask")


def tree_mask(parents, nodes_max: int = TREE_MAX_NODES) -> Masks:
    """The ancestor mask and depths of the tree with ``parents`` (one entry per node, ``parents[0]`` the
    root's, ignored).

    Parameters
    ----------
    parents : sequence of int
        Parent index of each node; register fields are 8 bits, so values must lie in 0..255 (a host
        error otherwise, like the verifier's 16-bit draft tokens).
    nodes_max : int
        The core's ``NODES_MAX`` (hwcontract.params: 1..``TREE_MAX_NODES``; ValueError otherwise).

    Returns
    -------
    Masks
        ``err`` non-zero (BAD_NODES or BAD_PARENT) leaves the rows empty: the core sends nothing.
    """
    nodes_max = check_nodes_max(nodes_max)
    parents = node_entries("parents", parents)      # not int(): it takes 0.5 as node 0, True as 1
    check_field_widths(parents, ())                 # each parent fits its TREE_PARENT field
    err = start_error(parents, nodes_max)
    if err:
        return Masks((), (), 0, err)
    rows = [1]
    depth = [0]
    for i in range(1, len(parents)):
        rows.append(rows[parents[i]] | (1 << i))
        depth.append(depth[parents[i]] + 1)
    return Masks(tuple(rows), tuple(depth), max(depth), 0)


def cycles(n: int) -> int:
    """The RTL's BUSY cycles for an N-node tree with TREADY always high (docs/treemask.md): one row per
    cycle plus the cycle that fills the output register with row 0 (``CYCLES_BUSY - CYCLES_STALL`` under
    any backpressure)."""
    return n + 1


# ------------------------------------------------------------------------------------------------
# The m_axis words (the stream format of hwcontract.regmap), for the backends and testbenches
# ------------------------------------------------------------------------------------------------

def stream_words(m: Masks) -> list[int]:
    """The words the core streams for ``m``: one per node in node order (none when ``m.err``)."""
    return [pack_mask_word(i, d, r) for i, (r, d) in enumerate(zip(m.rows, m.depth))]
