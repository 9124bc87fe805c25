"""treemask driver: the tree-attention mask and depths of a token tree, one call per tree.

On a board::

    ol = pynq.Overlay("specdec.bit")
    tm = ol.treemask                               # bound through ``bindto``
    tm.attach(DmaSink(ol.treemask_dma))            # mask words come back through the DMA's S2MM channel
    mask, depth = tm.masks(tree.parents)           # (N, N) bool, (N,) int64
    tm.cycles                                      # CYCLES_BUSY of that call

Off the board the same class takes a golden or simulation device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`) and the matching sink (``GoldenDevice.sink``, :class:`specdec.sim.device.SimSink`).
"""
from __future__ import annotations

import numpy as np

from hwcontract.formats import unpack_mask_word as unpack_word
from hwcontract.tree import check_parents, node_entries

from ...errors import SpecdecError
from ..streams import WordSink
from .base import SpecdecIP, vlnv




class TreeMask(SpecdecIP):
    """Driver of the ``treemask`` core (golden model ``hls_ref.treemask``, RTL ``fpga.treemask``).

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
    sink : WordSink, optional
        The core's word stream; or :meth:`attach` one later (pynq binds the driver without it).
    """

    core_name = "treemask"
    bindto = [vlnv("treemask")]

    def __init__(self, description: dict, sink: WordSink | None = None) -> None:
        super().__init__(description)
        self._nodes_max = self.read_fields("PARAMS")["NODES_MAX"]
        self.sink: WordSink | None = sink
        #: CYCLES_BUSY of the last :meth:`masks` call (N + 1 plus any stall cycles on the RTL).
        self.cycles = 0
        self._parent_reg = self.cmap.reg("PARENT0")

    @property
    def nodes_max(self) -> int:
        """Largest tree the core takes (``PARAMS.NODES_MAX``)."""
        return self._nodes_max

    def attach(self, sink: WordSink) -> None:
        """Receive the mask words through ``sink``."""
        self.sink = sink

    def write_tree(self, parents) -> int:
        """Write NODES and the PARENT registers of ``parents`` (node 0's byte 0); returns N."""
        n = len(parents)
        per = len(self._parent_reg.fields)
        vals = [0] + [int(p) for p in parents[1:]]
        for k in range(-(-n // per)):
            chunk = vals[per * k:per * k + per]
            self.write_fields(f"PARENT{k}", **{f"P{j}": v for j, v in enumerate(chunk)})
        self.write_reg("NODES", n)
        return n

    def masks(self, parents) -> tuple[np.ndarray, np.ndarray]:
        """The ancestor-or-self mask and the depths of the tree with ``parents``.

        Parameters
        ----------
        parents : sequence of int, length N
            ``parents[i] < i`` for i >= 1; ``parents[0]`` (the root's, e.g. -1) is ignored.

        Returns
        -------
        mask : ndarray of bool, shape (N, N)
            ``mask[i, j]`` when node j is node i or one of its ancestors.
        depth : ndarray of int64, shape (N,)
            Depth of each node (root 0).

        Raises
        ------
        ValueError
            N outside 1..NODES_MAX, or a parent not below its child (checked before the core is touched).
        CoreError
            The core reported an error (the decoded ERR bits), or was left in error by an operation this driver
            did not run (:meth:`~specdec.hw.drivers.base.SpecdecIP.check_idle`).
        SpecdecError
            The core is BUSY with a tree this driver did not start (nothing is written).
        """
        if self.sink is None:
            raise SpecdecError("treemask: no word sink attached (call attach(sink) first)")
        parents = check_parents(node_entries("parents", parents), self.nodes_max)    # any flat iterable
        self.check_idle()               # a frame left by a tree this driver did not run is never taken for this one
        self.check_stream(self.sink)
        n = self.write_tree(parents)
        try:
            self.start()
            if self.read_fields("STATUS")["ERROR"]:
                self.check()
            words = self.sink.recv()
            self.wait_done()
        except BaseException:
            self.soft_reset()           # a core error or a failed receive leaves the core idle, no frame behind
            raise
        self.cycles = self.read_reg("CYCLES_BUSY")
        if len(words) != n:
            raise SpecdecError(f"treemask: {len(words)} words for a {n}-node tree")
        fields = [unpack_word(w) for w in words]
        nodes = [f[0] for f in fields]
        if nodes != list(range(n)):
            raise SpecdecError(f"treemask: words carry nodes {nodes}, expected 0..{n - 1} in order")
        bits = np.array([f[2] for f in fields], dtype=np.uint64)
        mask = ((bits[:, None] >> np.arange(n, dtype=np.uint64)) & np.uint64(1)).astype(bool)
        depth = np.array([f[1] for f in fields], dtype=np.int64)
        return mask, depth
