"""The break-even model (specdec.decoding.breakeven) on rows whose costs and acceptance are known exactly."""
from __future__ import annotations

import pytest

from specdec.decoding import breakeven

DRAFT, T0, TN, REST = 0.005, 0.040, 0.004, 0.002      # draft step, T(n) = T0 + TN n, rest of a round
ACC = [0.8, 0.6, 0.5, 0.5]


def tokens(g: int) -> float:
    out, run = 1.0, 1.0
    for j in range(g):
        run *= ACC[j]
        out += run
    return out


def row(g: int) -> dict:
    """A bench row whose parts follow the model exactly."""
    round_s = g * DRAFT + T0 + TN * (g + 1) + REST
    base = T0 + TN + REST
    return {"gamma": g, "mode": "chain", "positions_per_call": g + 1, "target_calls": 10,
            "tokens_per_call": tokens(g), "speedup": tokens(g) / round_s * base,
            "per_position_acceptance": ACC[:g],
            "breakdown": {"draft_s": g * DRAFT, "target_s": T0 + TN * (g + 1), "mask_s": 0.0,
                          "quantize_transfer_s": REST / 2, "verify_s": REST / 2, "host_s": 0.0}}


def test_expected_tokens():
    assert breakeven.expected_tokens([1.0, 1.0], 2) == 3.0
    assert breakeven.expected_tokens([0.5, 0.5], 2) == pytest.approx(1.75)
    assert breakeven.expected_tokens([0.5], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)   # last value carries
    assert breakeven.expected_tokens([], 4) == 1.0


def test_prediction_equals_the_measured_speedup_when_the_model_holds():
    rep = breakeven.report([row(0), row(2), row(4)], gamma_max=8)
    assert rep["draft_step_s"] == pytest.approx(DRAFT)
    assert rep["target_s_per_position"] == pytest.approx(TN) and rep["target_s_fixed"] == pytest.approx(T0)
    for p in rep["rows"]:
        assert p["speedup"] == pytest.approx(p["measured_speedup"])
    # an unmeasured gamma (3) from the fitted target line and the nearest measured rest of round
    p3 = rep["curve"][2]
    assert p3["gamma"] == 3 and p3["speedup"] == pytest.approx(row(3)["speedup"])
    assert rep["best_gamma"] == max(range(1, 9), key=lambda g: rep["curve"][g - 1]["speedup"])


def test_needs_the_target_only_row():
    with pytest.raises(ValueError, match="gamma 0"):
        breakeven.report([row(2)])


def test_a_negative_target_slope_is_taken_as_flat():
    """Two close rows whose target times fall with more positions (noise) had fitted -6.11 ms a position and
    predicted gamma 16 best; the slope is taken as 0 and the report says so."""
    r2 = row(2)
    r2["breakdown"] = {**r2["breakdown"], "target_s": T0}       # 3 positions cost less than 1 (T0 + TN)
    rep = breakeven.report([row(0), r2], gamma_max=8)
    assert rep["target_s_per_position"] == 0.0 and rep["target_slope_clamped"]
    assert not breakeven.report([row(0), row(2)], gamma_max=8)["target_slope_clamped"]


def test_needs_a_chain_that_drafted():
    """Without acceptance measured (gamma 0 only, or chains that never drafted) no prediction is made: it had
    reported a draft step of 0 ms and a best gamma of 1 from nothing."""
    empty = {**row(2), "per_position_acceptance": []}
    assert not breakeven.drafted([row(0), empty]) and breakeven.drafted([row(0), row(2)])
    with pytest.raises(ValueError, match="drafted"):
        breakeven.report([row(0), empty])
