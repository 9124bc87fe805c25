"""pynq drivers, one per core, all derived from ``hwcontract.regmap``.

Importing this package registers the drivers with pynq (``bindto``), so ``pynq.Overlay`` binds them on a board; off
the board the same classes take a simulation or golden-model device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`).
"""
from .base import SpecdecIP, pynq_registers, vlnv
from .draftengine import DraftEngine, Placement, Streamed
from .kvpage import KVPage, KVPageError, SlotInfo
from .rng import Rng
from .treeattn import TreeAttn
from .treemask import TreeMask
from .vecunit import VecUnit
from .verifier import Result, Verifier
from .verifier_errors import VerifierError

__all__ = ["SpecdecIP", "DraftEngine", "Placement", "Streamed", "Rng", "Verifier", "VerifierError", "Result",
           "TreeMask", "TreeAttn", "VecUnit", "KVPage", "KVPageError", "SlotInfo", "pynq_registers", "vlnv"]
