"""The specdec overlay: ``pynq.Overlay`` with specdec's drivers bound and each core wired to its DMA.

::

    ol = SpecdecOverlay("bitstreams/kv260/specdec.bit")     # on a board
    ol.verifier, ol.treemask, ol.kvpage, ol.draftengine, ol.rng, ol.treeattn, ol.vecunit   # bound by VLNV
    ol.verifier_dma                                        # every DMA by its cell name (pynq.lib.dma.DMA)
    c = ol.cores()                                         # specdec.hw.cores.Cores, the DMA channels attached
    de = ol.draft_engine()                                 # the DraftEngine with its MM2S stream and S2MM sink
    f = ol.fabric()                                        # the engine, the vector and tree-attention units
    ta = ol.tree_attention()                               # the TreeAttn with its scatter-gather DMA's channels
    vu = ol.vector_unit()                                  # the VecUnit (KV260) with its MM2S stream and S2MM sink
    ol.fclk_mhz, ol.seconds(cycles)                        # PL clock 0 as pynq reports it; cycles as seconds

Importing this module imports :mod:`specdec.hw.drivers`, which registers the drivers with pynq: no import
order to follow. Off the board, the same class runs on the emulated board::

    board = EmulatedBoard("kv260")                         # specdec.hw.emuboard
    ol = SpecdecOverlay(board.bitfile, device=board)

The cell names (``<core>``, ``<core>_dma``) and the channel widths come from :mod:`hwcontract.board`. The
board is the one whose board files the ``.hwh`` names, any revision (:func:`hwcontract.board.board_of_part`).

Cycles become time at the fabric clock pynq reports for PL clock 0 once the overlay is loaded
(``pynq.Clocks.fclk0_mhz``), on a board and on the emulated board alike (its PS answers pynq's clock
registers): the rate the PS really makes from the PLL its boot firmware set, which a Vivado build's ``.hwh``
asks for at the rung of the clock ladder the flow chose (:attr:`hwcontract.board.Board.clocks`).

:func:`pynq_overlay` loads the overlay as backend ``pynq`` does: on the board this runs on, or on the emulated board
``SPECDEC_EMULATE`` names (``SPECDEC_EMULATE=kv260``), from :func:`specdec.paths.bitstream`'s bitstream.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pynq
from pynq.bitstream import Bitstream
from pynq.ps import Clocks

from hwcontract import board as bd

from .. import paths
from ..paths import EMULATE_ENV
from . import drivers  # noqa: F401  (registers every specdec driver with pynq by its VLNV)
from . import hwh
from .cores import Cores, Fabric
from .drivers import DraftEngine, SpecdecIP, TreeAttn, VecUnit
from .emuboard import EmulatedBoard
from .streams import DmaGatherSink, DmaGatherStream, DmaSink, DmaStream


def board_part(bitfile_name: str | Path) -> str:
    """The Vivado board preset the ``.hwh`` beside ``bitfile_name`` was built for (SYSTEMINFO's BOARD,
    ``vendor:board:component:revision``)."""
    return hwh.read_board_part(Path(bitfile_name).with_suffix(".hwh"))


class SpecdecOverlay(pynq.Overlay):
    """The specdec overlay of one board (``pynq.Overlay``'s arguments).

    Attributes
    ----------
    board : str
        The board the hardware description names (one of :data:`hwcontract.board.BOARDS`).
    design : hwcontract.board.Board
        Its block design: cells, parameters, DMAs.
    """

    def __init__(self, bitfile_name: str | Path, download: bool = True, ignore_version: bool = False,
                 device=None, **kwargs) -> None:
        super().__init__(str(bitfile_name), download=download, ignore_version=ignore_version, device=device,
                         **kwargs)
        self.board = hwh.board_of(board_part(self.bitfile_name))
        self.design = bd.design(self.board)

    def download(self, dtbo=None) -> None:
        """``pynq.Overlay.download``; a Zynq-7000 description's PL clocks are set by their divisors.

        pynq 4.0 reads a PL clock's achieved rate only from Zynq UltraScale+ parameters and would pass None
        for a Zynq-7000's (PYNQ 4.0 dropped those boards); PYNQ 3 set every clock from its divisors, as here.
        The drivers bound before are dropped (:meth:`_fresh_drivers`).
        """
        clocks = self.clock_dict
        if all(c.get("frequency") is not None for c in clocks.values() if c.get("enable")):
            super().download(dtbo)
        else:
            for i, c in clocks.items():
                if c.get("enable"):
                    Clocks.set_pl_clk(i, c["divisor0"], c["divisor1"])
                else:
                    Clocks.set_pl_clk(i)
            Bitstream.download(self, self.parser)
            if dtbo:
                self.insert_dtbo(dtbo)
            elif self.dtbo:
                self.insert_dtbo()
        self._fresh_drivers()

    def _fresh_drivers(self) -> None:
        """Forget the drivers bound before a download (pynq keeps each one it made): the new bitstream starts
        every core from reset, its RNG state zero and its memories empty, and every DMA channel stopped. The
        next ``ol.<cell>`` makes a fresh driver (a DMA's starts its channels; a core's knows it is not seeded
        and holds no placements). A driver taken before the download is the old bitstream's: take it again."""
        ip_map = self.__dict__.get("_ip_map")
        if ip_map is not None:
            self._ip_map = type(ip_map)(ip_map._description)

    def allocate(self, shape, dtype):
        """A buffer the overlay's DMAs reach (``pynq.allocate`` on this overlay's device)."""
        return pynq.allocate(shape=shape, dtype=dtype, target=self.device)

    def dma(self, core: str):
        """The AXI DMA serving core ``core``'s streams (cell ``<core>_dma``), as pynq binds it."""
        self.design.dma(core)                          # KeyError naming the DMAs when there is none
        return getattr(self, bd.dma_cell(core))

    def has(self, core: str) -> bool:
        """Whether the overlay holds core ``core``."""
        return any(c.name == core for c in self.design.cells)

    def _word_bytes(self, core: str) -> int:
        return self.design.dma(core).s2mm_width // 8

    def driver(self, core: str) -> SpecdecIP:
        """Core ``core``'s driver as pynq binds it, with its DMA channels attached: the verifier's rows out
        through MM2S, the treemask core's mask words in through S2MM, the draft engine's beats out through MM2S
        and its results in through S2MM into a buffer for its longest output frame (M_MAX rows of PDEPTH tiles,
        the most N = ROWS * PDEPTH gives), the treeattn core's frames gathered through its scatter-gather MM2S (a
        descriptor per KV page) and its outputs in through its S2MM, one descriptor over a buffer for its largest
        job (NODES_MAX rows), the vecunit core's beats out through MM2S and its words in through S2MM into a
        buffer for its largest job. KeyError naming the cores when the overlay lacks it."""
        if not self.has(core):
            raise KeyError(f"the {self.board} overlay has no core {core!r}; cores: "
                           f"{[c.name for c in self.design.cells]}")
        drv = getattr(self, core)
        if core == "verifier":
            drv.attach(DmaStream(self.dma(core), self.allocate))
        elif core == "treemask":
            drv.attach(DmaSink(self.dma(core), self.allocate, max_words=drv.nodes_max,
                               word_bytes=self._word_bytes(core)))
        elif core == "draftengine":
            dma = self.dma(core)
            drv.attach(DmaStream(dma, self.allocate),
                       DmaSink(dma, self.allocate, max_words=drv.m_max * drv.pdepth, word_bytes=self._word_bytes(core)))
        elif core == "treeattn":
            dma, width = self.dma(core), self.design.dma(core).length_width
            drv.attach(DmaGatherStream(dma, self.allocate, length_width=width),
                       DmaGatherSink(dma, self.allocate, max_words=drv.max_out_beats,
                                     word_bytes=self._word_bytes(core), length_width=width))
        elif core == "vecunit":
            dma = self.dma(core)
            drv.attach(DmaStream(dma, self.allocate),
                       DmaSink(dma, self.allocate, max_words=drv.max_out_beats, word_bytes=self._word_bytes(core)))
        return drv

    def cores(self) -> Cores:
        """The verifier, the treemask core and the kvpage core (:meth:`driver`: their DMA channels attached);
        None for a core the overlay lacks."""
        return Cores(*(self.driver(c) if self.has(c) else None for c in ("verifier", "treemask", "kvpage")))

    def draft_engine(self) -> DraftEngine:
        """The draft engine's driver with its DMA attached (:meth:`driver`; ``ol.draftengine`` is the bound
        driver as pynq made it, nothing attached). KeyError when the overlay has none."""
        return self.driver("draftengine")

    def tree_attention(self) -> TreeAttn:
        """The treeattn core's driver with its DMA attached (:meth:`driver`). KeyError when the overlay has none."""
        return self.driver("treeattn")

    def fabric(self, engine: DraftEngine | None = None) -> Fabric:
        """The draft engine (``engine``, one of this overlay's drivers, or :meth:`draft_engine`) with the vector
        and tree-attention units where the overlay holds them, their DMAs attached: what a fabric draft runs on."""
        return Fabric(engine if engine is not None else self.draft_engine(),
                      self.vector_unit() if self.has("vecunit") else None,
                      self.tree_attention() if self.has("treeattn") else None, self.allocate)

    def vector_unit(self) -> VecUnit:
        """The vecunit core's driver with its DMA attached (:meth:`driver`). KeyError when the overlay has none."""
        return self.driver("vecunit")

    @property
    def fclk_mhz(self) -> float:
        """The fabric clock in MHz: PL clock 0 as pynq reports it for this overlay's device
        (``pynq.Clocks.fclk0_mhz``, read from the PS's clock registers), the rate cycles are converted with."""
        if hasattr(Clocks, "set_device") and Clocks.device is not self.device:
            Clocks.set_device(self.device)              # pynq >= 3.1 keeps the PS of the device it met first
            if "_real_instance" in vars(Clocks):
                del Clocks._real_instance
        return float(Clocks.fclk0_mhz)

    def seconds(self, cycles: int | float) -> float:
        """``cycles`` of the fabric clock in seconds, at the rate pynq reports (:attr:`fclk_mhz`)."""
        return cycles / (self.fclk_mhz * 1e6)


def pynq_board_here() -> bool:
    """Whether pynq finds a device on this machine (a PYNQ board's PL); off a board pynq's warning is muted."""
    with warnings.catch_warnings():          # off a board pynq warns that it found no device
        warnings.simplefilter("ignore")
        try:
            return bool(pynq.Device.devices)
        except Exception:                    # noqa: BLE001  (a broken XRT install is no board either)
            return False


def pynq_overlay(bitstream: str | os.PathLike | None = None, device=None) -> SpecdecOverlay:
    """The specdec overlay on a board (backend ``pynq``), loaded.

    ``device``: the pynq device to load it on (an :class:`~specdec.hw.emuboard.EmulatedBoard`, or None: the board
    ``SPECDEC_EMULATE`` names, emulated, when it is set; else pynq's device, the board this runs on).
    ``bitstream``: default the emulated board's own, else :func:`specdec.paths.bitstream`'s (``SPECDEC_BITSTREAM``,
    or the overlay shipped with the package for the board this machine reports).
    """
    if device is None and os.environ.get(EMULATE_ENV):
        name = os.environ[EMULATE_ENV]
        if name not in bd.BOARDS:
            raise ValueError(f"{EMULATE_ENV}={name!r} is not a board; boards: {', '.join(bd.BOARDS)}")
        device = EmulatedBoard(name)
    given = bitstream or getattr(device, "bitfile", None)
    try:
        path = Path(given) if given else paths.bitstream()
    except paths.OverlayNotFound as err:
        raise paths.OverlayNotFound(f"backend pynq: {err}; or use --backend ref or --backend sim") from None
    if not path.is_file():
        raise paths.OverlayNotFound(f"backend pynq: no bitstream at {path}; off a board use --backend ref or "
                                    f"--backend sim, or the emulated board: {EMULATE_ENV}=kv260")
    if device is None and not pynq_board_here():
        raise RuntimeError(f"backend pynq: pynq finds no board on this machine to load {path} on (pynq: \"No "
                           f"Devices Found\"); off a board use --backend ref or --backend sim, or the emulated "
                           f"board: {EMULATE_ENV}=kv260")
    return SpecdecOverlay(path, device=device)


def pynq_cores(bitstream: str | os.PathLike | None = None, device=None) -> Cores:
    """The verifier, the treemask core and the kvpage core on a board (backend ``pynq``, see
    :func:`pynq_overlay`), the first two with their DMA channels; None for a core the overlay lacks."""
    return pynq_overlay(bitstream, device).cores()


def pynq_draftengine(bitstream: str | os.PathLike | None = None, device=None) -> DraftEngine:
    """The draft engine on a board (backend ``pynq``, see :func:`pynq_overlay`) with its DMA stream and sink."""
    return pynq_overlay(bitstream, device).draft_engine()
