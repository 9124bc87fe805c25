r"""Diagnosis for docs/draftengine.md ("Where the agreement is lost"): the demo draft's int8-vs-float greedy
agreement when weights and/or activations get a second int8 plane.

A second plane holds the rounding residual of the first at 1/PLANE of its step (``int8draft.PLANE``) (``v ~= v1 + v2 / PLANE``, both
int8), so a layer would cost two engine jobs (two activation planes: the same weights, twice the rows) or four
(both). This script measures what that precision would buy before any RTL or driver work: every engine layer
runs as a float emulation of the engine's arithmetic (int8 codes, int32 sums, the per-channel MULT / SHIFT
requantization to int16, as ``hls_ref.draftengine.run``), on the same calibration and held-out passages as
``specdec bench draft``. Mode ``int8`` is the engine's one-plane scheme (96.57%); ``--act . --weight 'layers\.0\.'`` is what
``specdec.models.int8draft`` now runs (98.11% here, the bench's figure comes from the real jobs).
``--act REGEX`` / ``--weight REGEX`` give the second activation / weight plane to the layers whose names match
(the modes: ``act2`` is ``--act .``, ``weight2`` ``--weight .``, ``both`` both), to find the layers that need it.

    python scripts/diag_int8_planes.py [int8|act2|weight2|both] [--act REGEX] [--weight REGEX] [--passages N]
"""
from __future__ import annotations

import argparse
import re
import time

import numpy as np

from hwcontract.formats import DE_ACT_MAX
from specdec.app import pairs
from specdec.models import corpus, int8draft, loading

PLANE = int8draft.PLANE         # the second plane's steps per step of the first
MODES = {"int8": (None, None), "act2": (".", None), "weight2": (None, "."), "both": (".", ".")}


def second_plane(exact: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``first`` plus the int8 code of its residual at 1/PLANE of a step."""
    return first + np.clip(np.rint((exact - first) * PLANE), -DE_ACT_MAX, DE_ACT_MAX) / PLANE


def main(act: str | None, weight: str | None, n: int, alpha: float | None = None, alpha_head: float | None = None) -> None:
    plain_codes, plain_linear = int8draft.weight_codes, int8draft.quantize_linear
    current = [""]

    def has(pattern: str | None, name: str) -> bool:
        return pattern is not None and re.search(pattern, name) is not None

    def quantize_linear(name, *args, **kwargs):
        current[0] = name
        return plain_linear(name, *args, **kwargs)

    def codes(w):
        s_w, w_q = plain_codes(w)
        return (s_w, second_plane(w / s_w[:, None], w_q)) if has(weight, current[0]) else (s_w, w_q)

    def emulate(self, x, runner=None, runner2=None):
        lead, x2 = x.shape[:-1], x.reshape(-1, x.shape[-1])
        x_q = self.quantize_input(x2).astype(np.float64)
        if has(act, self.name):
            x_q = second_plane(x2 / (self.smooth * self.s_in), x_q)
        acc = x_q @ np.asarray(self.w, dtype=np.float64).T + self.bias
        y = acc
        if self.out_bits != 32:
            top = (1 << (self.out_bits - 1)) - 1
            y = np.clip(np.rint(acc * self.mult / 2.0 ** self.shift), -top - 1, top)
        return (y * self.s_out).reshape(*lead, -1), 0

    int8draft.weight_codes, int8draft.quantize_linear = codes, quantize_linear
    int8draft.QLinear.__call__ = emulate
    t0 = time.perf_counter()
    flt = pairs.open_pair(loading.DEMO_TARGET, loading.DEMO_DRAFT, 8192)
    fmodel = flt.draft.lm.model.float()
    alphas = {"alpha": int8draft.ALPHA if alpha is None else alpha,
              "alpha_head": int8draft.ALPHA_HEAD if alpha_head is None else alpha_head}
    # one plane each in the engine's integers; the emulation above adds the second planes it is asked for
    qmodel = int8draft.demo_draft(fmodel, flt.tokenizer, 400, act_planes=1, weight_plane2=None, **alphas)
    res = int8draft.agreement(fmodel, qmodel, flt.tokenizer, corpus.sample_passages(n, held_out=True, seed=2))
    print(f"second activation plane on {act!r}, second weight plane on {weight!r}, SmoothQuant strength "
          f"{alphas}: agreement {res['rate']:.4f} "
          f"({res['agree']} of {res['positions']} positions, {n} held-out passages; {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=sorted(MODES), default="int8")
    ap.add_argument("--act", help="regex: layers with a second activation plane")
    ap.add_argument("--weight", help="regex: layers with a second weight plane")
    ap.add_argument("--passages", type=int, default=200, help="held-out passages (default 200)")
    ap.add_argument("--alpha", type=float, help="SmoothQuant strength of the layers (default int8draft.ALPHA)")
    ap.add_argument("--alpha-head", type=float, help="... of the LM head (default int8draft.ALPHA_HEAD)")
    a = ap.parse_args()
    mode_act, mode_weight = MODES[a.mode]
    main(a.act or mode_act, a.weight or mode_weight, a.passages, a.alpha, a.alpha_head)
