"""Diagnosis for docs/draftengine.md ("Where the agreement is lost"): the demo draft's int8-vs-float greedy
agreement when weights and/or activations get a second int8 plane.

A second plane holds the rounding residual of the first at 1/254 of its step (``v ~= v1 + v2 / 254``, both
int8), so a layer would cost two engine jobs (two activation planes: the same weights, twice the rows) or four
(both). This script measures what that precision would buy before any RTL or driver work: every engine layer
runs as a float emulation of the engine's arithmetic (int8 codes, int32 sums, the per-channel MULT / SHIFT
requantization to int16, as ``hls_ref.draftengine.run``), on the same calibration and held-out passages as
``specdec bench draft``. Mode ``int8`` is the engine's own scheme and must give the bench's agreement.

    python scripts/diag_int8_planes.py {int8|act2|weight2|both} [N_PASSAGES]
"""
from __future__ import annotations

import sys
import time

import numpy as np

from hwcontract.formats import DE_ACT_MAX
from specdec import corpus, int8draft, models, pairs

PLANE = 2 * DE_ACT_MAX          # the second plane's steps per step of the first


def second_plane(exact: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``first`` plus the int8 code of its residual at 1/PLANE of a step."""
    return first + np.clip(np.rint((exact - first) * PLANE), -DE_ACT_MAX, DE_ACT_MAX) / PLANE


def main(mode: str, n: int) -> None:
    if mode not in ("int8", "act2", "weight2", "both"):
        raise SystemExit(f"mode {mode!r}: one of int8, act2, weight2, both")
    plain_codes = int8draft.weight_codes

    def codes(w):
        s_w, w_q = plain_codes(w)
        return (s_w, second_plane(w / s_w[:, None], w_q)) if mode in ("weight2", "both") else (s_w, w_q)

    def emulate(self, x, runner=None):
        lead, x2 = x.shape[:-1], x.reshape(-1, x.shape[-1])
        x_q = self.quantize_input(x2).astype(np.float64)
        if mode in ("act2", "both"):
            x_q = second_plane(x2 / (self.smooth * self.s_in), x_q)
        acc = x_q @ np.asarray(self.w, dtype=np.float64).T + self.bias
        y = acc
        if self.out_bits != 32:
            top = (1 << (self.out_bits - 1)) - 1
            y = np.clip(np.rint(acc * self.mult / 2.0 ** self.shift), -top - 1, top)
        return (y * self.s_out).reshape(*lead, -1), 0

    int8draft.weight_codes = codes
    int8draft.QLinear.__call__ = emulate
    t0 = time.perf_counter()
    flt = pairs.open_pair(models.DEMO_TARGET, models.DEMO_DRAFT, 8192)
    fmodel = flt.draft.lm.model.float()
    qmodel = int8draft.demo_draft(fmodel, flt.tokenizer, 400)
    res = int8draft.agreement(fmodel, qmodel, flt.tokenizer, corpus.sample_passages(n, held_out=True, seed=2))
    print(f"{mode}: agreement {res['rate']:.4f} ({res['agree']} of {res['positions']} positions, "
          f"{n} held-out passages; {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "int8", int(sys.argv[2]) if len(sys.argv) > 2 else 200)
