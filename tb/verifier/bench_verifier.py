"""cocotb side of ``specdec bench verifier``: rounds at one (V, gamma) through the RTL, cycles from the core's
own counters, written as JSON to ``$BENCH_OUT``. Every round is also checked against the golden model.

Scenarios: ``all_accept`` (q = p, so every draft passes and the bonus is sampled: gamma + 1 target
positions verified), ``reject_0`` (the first draft token has p = 0: one position and a residual sample),
``typical`` (GPT-2-like logits, drafts drawn from q).
"""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np

from tb.verifier.test_verifier import VerifierTB, full_round


def scenario(name: str, rng: np.random.Generator, vocab: int, g: int):
    p, q, draft = full_round(rng, vocab, g, "sample")
    if name == "all_accept":
        q = p[:g].copy()
        draft = [int(np.argmax(p[i])) for i in range(g)]
    elif name == "reject_0" and g:
        x = int(np.argmin(p[0]))
        p[0, x] = np.iinfo(np.int16).min            # -inf in the target: the draft can never pass
        draft[0] = x
    return p, q, draft


@cocotb.test()
async def bench(dut):
    tb = VerifierTB(dut)
    await tb.reset()
    await tb.seed(tb.state)
    vocab, g = int(os.environ["BENCH_VOCAB"]), int(os.environ["BENCH_GAMMA"])
    rng = np.random.default_rng(int(os.environ.get("BENCH_SEED", "0")))
    out = {}
    for name in ("all_accept", "reject_0", "typical"):
        p, q, draft = scenario(name, rng, vocab, g)
        got = await tb.run_round(p, q, draft, False, 256)       # asserts equality with the golden model
        rows = got["rows"]
        out[name] = {"rows": rows, "target_positions": (rows + 1) // 2, "n_accept": got["n_accept"],
                     "next_token": got["next_token"], **tb.last_cycles}
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump(out, fh, indent=2)
