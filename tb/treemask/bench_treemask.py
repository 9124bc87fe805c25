"""cocotb side of ``specdec bench treemask``: one random tree per N through the RTL, cycles from the core's
own counters (TREADY always high), written as JSON to ``$BENCH_OUT``. Every tree is also checked against
the golden model (``TreemaskTB.run_tree``)."""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np

from hls_ref import treemask as golden
from tb.treemask.driver_checks import random_parents
from tb.treemask.test_treemask import TreemaskTB


@cocotb.test()
async def bench(dut):
    tb = TreemaskTB(dut)
    await tb.reset()
    rnd = np.random.default_rng(int(os.environ.get("BENCH_SEED", "0")))
    out = {}
    for n in (int(x) for x in os.environ["BENCH_NODES"].split(",")):
        want = await tb.run_tree(random_parents(rnd, n))     # asserts equality with the golden model
        busy, stall = tb.last
        out[str(n)] = {"nodes": n, "cycles_busy": busy, "cycles_stall": stall, "cycles": busy - stall,
                       "model_cycles": golden.cycles(n), "ratio": (busy - stall) / golden.cycles(n),
                       "max_depth": want.max_depth}
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump(out, fh, indent=2)
