"""The core builds the off-board backends use: the golden register models (``ref``) and the RTL toplevel
(``sim``, ``fpga.system``).

Each set is checked against its core's parameter spec (``hwcontract.params``). Jobs are validated against
these builds before anything loads; :func:`specdec.decoding.loop.generate` checks again against the cores it is
handed, since a board's build may be smaller.
"""
from __future__ import annotations

from hwcontract import params as hwparams
from hwcontract.board import KV260_TREEATTN
from hwcontract.regmap import KV_MAX_BLOCKS, KV_MAX_PAGES

#: The verifier: the full OPT vocabulary, gamma up to 16, 4 lanes, trees up to 64 nodes.
CORE_PARAMS = hwparams.check("verifier", {"LANES": 4, "VOCAB_MAX": 50272, "GAMMA_MAX": 16, "TREE_MAX": 64})
#: The treemask core: trees up to 64 nodes (the xc7z020 target).
TREEMASK_PARAMS = hwparams.check("treemask", {"NODES_MAX": 64})
#: The kvpage core at its largest: 1,024 pages, 1,024-row block tables, so that a pair's paged caches hold the
#: target's whole context (SmolLM2's 8,192 tokens at 32 tokens a page: ``specdec.kv.layout``). The tables are
#: block RAM: the Verilator build of ``fpga.system`` takes as long as at 256 x 64 pages and rows, and the
#: host's page pools grow only as pages are used.
KV_PARAMS = hwparams.check("kvpage", {"PAGES": KV_MAX_PAGES, "MAX_BLOCKS": KV_MAX_BLOCKS})
#: The draft engine the off-board backends run (``ref``: the golden model, ``sim``: toplevel ``system``):
#: memories that hold a whole draft with a full-vocabulary head on chip (65,536 weight beats = 4 MiB, 8,192
#: parameter tiles: the demo draft needs 49,152 and 1,888, the OPT test pair's draft 50,904 and 6,366). No
#: Zynq here holds that much (docs/draftengine.md, Sizing): a functional build, not a board's.
DRAFTENGINE_PARAMS = hwparams.check("draftengine", {"ROWS": 8, "COLS": 8, "WDEPTH": 65536, "PDEPTH": 8192,
                                                    "K_MAX": 1024, "M_MAX": 16})
#: The tree-attention unit at the KV260's build (``hwcontract.board.KV260_TREEATTN``): the EAGLE head's shape
#: (SmolLM2: head dimension 64, 9 query heads over 3 KV heads), the whole 8,192-token context, 64-node trees and
#: blocks of 64 keys. Its outputs depend on BLOCK (the online softmax rescales at block boundaries), so the
#: off-board backends run the board's build and agree with it bit for bit.
TREEATTN_PARAMS = hwparams.check("treeattn", KV260_TREEATTN)
#: The vector unit at its defaults: vectors up to 16,384 elements (the EAGLE head's 576-wide rows, its 1,536-wide
#: MLP and its hot head's logits), DEQ of up to 16 parts, ROPE of head dimension up to 128, top-8.
VECUNIT_PARAMS = hwparams.check("vecunit", {"LEN_MAX": 16384, "PARTS_MAX": 16, "HALF_MAX": 64, "K_MAX": 8})
#: The largest token tree both tree cores take (nodes, root included).
TREE_LIMIT = min(CORE_PARAMS["TREE_MAX"], TREEMASK_PARAMS["NODES_MAX"])
