#!/usr/bin/env python
"""Write the int8 calibration the shipped EAGLE head carries (``int8_calibration.npz`` beside its weights).

    python scripts/calibrate_eagle.py                      # the demo head, 100 training passages, seed 1

The int8 head (``specdec.models.int8eagle``) needs the maxima of every layer's inputs and outputs on the target's
features of training passages (never the held-out ones). Measuring them runs the target over the passages: tens
of seconds here, minutes on a board's ARM cores. ``quantize_head`` reads this file instead when its key (a digest
of the head's float layer, the target's embeddings and the passages' count and seed) is the head's; any other head,
target or calibration set calibrates as before. ``tests/test_eagle_int8.py`` checks that the file holds what a
calibration measures now (to torch's last bits). Run this script again after ``scripts/train_eagle.py``.
"""
from __future__ import annotations

import argparse
import time

from specdec.decoding.eagle import load_head
from specdec.models import int8eagle, loading
from specdec.paths import model_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head", default=loading.DEMO_EAGLE, help="the shipped head (default %(default)s)")
    ap.add_argument("--n-calibration", type=int, default=100, help="training passages (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="the passages' seed (default %(default)s)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    model, tok = loading.load(loading.DEMO_TARGET, "target")
    head = load_head(model_dir(a.head), model)
    fl = int8eagle.float_layer(head)
    st = int8eagle.calibrate(head, fl, model, tok, a.n_calibration, a.seed)
    path = model_dir(a.head) / int8eagle.STATS_FILE
    int8eagle.save_stats(st, path, int8eagle.calibration_key(fl, head, a.n_calibration, a.seed))
    print(f"wrote {path} ({a.n_calibration} passages, seed {a.seed}, {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
