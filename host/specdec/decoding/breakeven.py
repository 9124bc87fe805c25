"""Break-even model of speculative decoding: predict each gamma's speedup from measured parts.

For a chain of ``g`` draft tokens whose position ``j`` is accepted (given it is reached) with probability
``a_j``, a round emits ``E(g) = 1 + a_0 + a_0 a_1 + ... + a_0...a_{g-1}`` tokens (the accepted prefix plus the
next token) and costs ``R(g) = g * d + T(g + 1) + v(g)``: ``g`` draft steps of ``d`` seconds, one target
forward over ``g + 1`` positions and the rest of the round (quantize, verify, host). Target-only decoding
costs ``T(1) + v(0)`` a token. The predicted speedup is ``E(g) / R(g) * (T(1) + v(0))``.

``T(n)`` and ``v`` are measured per gamma (each bench row's mean round); between measured points ``T`` is a
least-squares line in ``n``. A tree of ``N`` nodes is predicted the same way from its measured tokens per
call: ``N - 1`` draft-side expansions are folded into the row's measured draft time.
"""
from __future__ import annotations

import numpy as np


def expected_tokens(acceptance: list[float | None], g: int) -> float:
    """``E(g)``: tokens a chain of ``g`` emits on average, from per-position acceptance (None: never reached,
    taken as the last known value, or 0 when none is known)."""
    known = [a for a in acceptance if a is not None]
    fill = known[-1] if known else 0.0
    out, run = 1.0, 1.0
    for j in range(g):
        a = acceptance[j] if j < len(acceptance) and acceptance[j] is not None else fill
        run *= a
        out += run
    return out


class CostModel:
    """Per-round costs measured on bench rows: the draft step, ``T(n)`` as a line in n, the rest by gamma."""

    def __init__(self, rows: list[dict]) -> None:
        chains = [r for r in rows if r["mode"] == "chain" and isinstance(r["gamma"], int) and r["target_calls"]]
        if not any(r["gamma"] == 0 for r in chains):
            raise ValueError("the break-even model needs the target-only row (gamma 0)")
        pts = [(r["gamma"] + 1, r["breakdown"]["target_s"]) for r in chains]
        n, t = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
        self.slope_clamped = False
        if len(set(n)) > 1:
            self.t_slope, self.t_base = (float(x) for x in np.polyfit(n, t, 1))
        else:
            self.t_slope, self.t_base = 0.0, float(t.mean())
        if self.t_slope < 0:        # more positions never cost less: noise between close points; taken as flat
            self.t_slope, self.t_base, self.slope_clamped = 0.0, float(t.mean()), True
        spec = [r for r in chains if r["gamma"] > 0]
        steps = [r["breakdown"]["draft_s"] / r["gamma"] for r in spec]
        self.draft_step = float(np.mean(steps)) if steps else 0.0
        self.rest = {r["gamma"]: sum(r["breakdown"][k] for k in ("mask_s", "quantize_transfer_s", "verify_s",
                                                                  "host_s")) for r in chains}
        self.measured_target = {r["gamma"] + 1: r["breakdown"]["target_s"] for r in chains}
        self.baseline_s = self.target(1) + self.rest[0]     # seconds per token, target-only

    def target(self, n: int) -> float:
        """``T(n)``: the measured mean at n positions, else the fitted line."""
        return self.measured_target.get(n, self.t_base + self.t_slope * n)

    def rest_of_round(self, g: int) -> float:
        """``v(g)``: the measured rest of a round at g, else the nearest measured gamma's."""
        if g in self.rest:
            return self.rest[g]
        near = min((k for k in self.rest if k > 0), key=lambda k: abs(k - g), default=0)
        return self.rest[near]

    def round_s(self, g: int) -> float:
        return g * self.draft_step + self.target(g + 1) + self.rest_of_round(g)

    def predict(self, acceptance: list[float | None], g: int) -> dict:
        """Tokens per round, seconds per round and the predicted speedup of gamma ``g``."""
        e, r = expected_tokens(acceptance, g), self.round_s(g)
        return {"gamma": g, "tokens_per_call": e, "round_s": r, "speedup": e / r * self.baseline_s}


def _drafting_chains(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["mode"] == "chain" and isinstance(r["gamma"], int) and r["gamma"] > 0
            and any(a is not None for a in r["per_position_acceptance"] or [])]


def drafted(rows: list[dict]) -> bool:
    """Whether a chain row of gamma > 0 measured any acceptance (a draft token reached the verifier)."""
    return bool(_drafting_chains(rows))


def report(rows: list[dict], gamma_max: int = 16) -> dict:
    """Predicted against measured speedup for every measured row, and the prediction for every gamma up to
    ``gamma_max``; the acceptance per position comes from the row with the deepest measured chain.

    Raises ValueError without the target-only row, or without a chain that measured acceptance
    (:func:`drafted`): a prediction would rest on nothing."""
    model = CostModel(rows)
    chains = _drafting_chains(rows)
    if not chains:
        raise ValueError("the break-even model needs a chain of gamma > 0 that drafted (no acceptance measured)")
    deepest = max(chains, key=lambda r: len(r["per_position_acceptance"] or []))
    acc = list(deepest["per_position_acceptance"])
    out = []
    for r in rows:
        if r["gamma"] == 0 or r["mode"] == "pipelined" or (r["mode"] == "chain" and not isinstance(r["gamma"], int)):
            continue        # the baseline, pipelined drafting, the adaptive schedules (no single gamma)
        if r["mode"] == "chain":
            p = model.predict(acc, r["gamma"])
        else:       # a tree: its measured tokens per call and draft time, T at its node count
            n = r["positions_per_call"]
            b = r["breakdown"]
            rs = b["draft_s"] + model.target(n) + sum(b[k] for k in ("mask_s", "quantize_transfer_s",
                                                                       "verify_s", "host_s"))
            p = {"gamma": r["gamma"], "tokens_per_call": r["tokens_per_call"], "round_s": rs,
                 "speedup": r["tokens_per_call"] / rs * model.baseline_s}
        # the model predicts against our own gamma-0 loop: the measured figure over the same (a bench row keeps it as
        # speedup_vs_loop when its speedup is over a faster baseline)
        out.append({**p, "measured_speedup": r.get("speedup_vs_loop", r["speedup"])})
    curve = [model.predict(acc, g) for g in range(1, gamma_max + 1)]
    best = max(curve, key=lambda p: p["speedup"]) if curve else None
    return {"draft_step_s": model.draft_step, "target_s_per_position": model.t_slope,
            "target_s_fixed": model.t_base, "target_slope_clamped": model.slope_clamped,
            "baseline_s_per_token": model.baseline_s,
            "acceptance_per_position": acc, "rows": out, "curve": curve,
            "best_gamma": best["gamma"] if best else None}
