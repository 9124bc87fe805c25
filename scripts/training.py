"""What the training scripts (train_draft.py, train_eagle.py, train_eagle3.py) share: the run's logger, the stage-1
cache, the options of the data stage, the optimizer and the EAGLE scripts' training windows."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable


def start(threads: int, seed: int) -> Callable[[str], None]:
    """A run's start: torch's threads and seed set; returns ``log(text)``, which prints the text with the
    seconds since this call."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t_start = time.time()
    return lambda s: print(f"[{time.time() - t_start:7.1f}s] {s}", flush=True)


def cached_stage(path: str | Path, key: dict, make: Callable[[], dict], log) -> tuple[dict, float, bool]:
    """``make()``'s dict, kept at ``path`` with ``key`` and reused while the key matches (the data stage takes
    20-40 minutes). Returns (the dict, the seconds making it took, whether it was reused)."""
    import torch
    cache = Path(path)
    cached = torch.load(cache, weights_only=False) if cache.is_file() else None
    if cached is not None and cached["key"] == key:
        log(f"data: reused {cache} (made in {cached['seconds']:.0f} s)")
        return cached["value"], cached["seconds"], True
    t = time.time()
    value = make()
    seconds = time.time() - t
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"key": key, "value": value, "seconds": seconds}, cache)
    return value, seconds, False


class Optimizer:
    """AdamW (betas 0.9, 0.95) with a linear warm-up over the first 5% of ``steps`` and a cosine decay to 0,
    each step's gradients clipped to norm 1: what every training script here runs."""

    def __init__(self, params, lr: float, steps: int, weight_decay: float = 0.0) -> None:
        import torch
        self.params = list(params)
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
        warm = max(1, steps // 20)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))

    def step(self, loss) -> None:
        """One step on ``loss``: gradients, clipping, the update, the schedule."""
        import torch
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.sched.step()


def windows(data, batch: int, span: int, rng):
    """Random training windows of ``span`` slots of the EAGLE data stage's ``(ids, features, ...)`` records:
    (features, next tokens, slots with a next token), torch tensors of shapes (batch, span, d), (batch, span) and
    (batch,); slots past a short record's end are zero."""
    import numpy as np
    import torch
    while True:
        f = np.zeros((batch, span, data[0][1].shape[1]), np.float32)
        x = np.zeros((batch, span), np.int64)
        n = np.zeros(batch, np.int64)
        for r, i in enumerate(rng.integers(0, len(data), batch)):
            ids, feats, _ = data[i]
            a = int(rng.integers(0, max(1, len(ids) - span)))
            k = min(span, len(ids) - 1 - a)           # slots a..a+k-1 have a next token
            f[r, :k], x[r, :k], n[r] = feats[a:a + k], ids[a + 1:a + 1 + k], k
        yield torch.from_numpy(f), torch.from_numpy(x), torch.from_numpy(n)


def data_args(ap, out: Path) -> None:
    """The data stage's options, the same in both scripts: where the model goes, the passages the target
    continues and by how many tokens, the generation batch."""
    ap.add_argument("--out", default=str(out))
    ap.add_argument("--prompts", type=int, default=2048, help="training passages the target continues")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gen-batch", type=int, default=32)


def eagle_args(ap, sampled_prompts: int, data_cache: Path) -> None:
    """The EAGLE scripts' options besides :func:`data_args`: the sampled continuations and their settings, the
    held-out passages, seed, threads, the data stage's cache and ``--smoke`` (:func:`smoke`)."""
    ap.add_argument("--sampled-prompts", type=int, default=sampled_prompts,
                    help="further training passages the target continues by sampling (0: greedy data only)")
    ap.add_argument("--temperature", type=float, default=0.8, help="the sampled continuations' temperature")
    ap.add_argument("--top-p", type=float, default=0.95, help="the sampled continuations' top-p")
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-cache", default=str(data_cache),
                    help="stage 1's output is kept here and reused when its arguments match")
    ap.add_argument("--smoke", action="store_true", help="toy sizes: checks the pipeline end to end")


def smoke(a, build: Path, name: str) -> None:
    """``--smoke``: toy sizes for every stage, the model and the data cache under ``build`` as ``name``."""
    if a.smoke:
        a.prompts, a.sampled_prompts, a.new_tokens, a.steps, a.eval_prompts, a.batch = 16, 8, 8, 5, 4, 4
        a.out = str(build / f"{name}-smoke")
        a.data_cache = str(build / f"{name}-smoke-data.pt")
