"""``specdec bench board``: the board model's arithmetic on hand-computed small cases, bad options named, and the
command writing its keys (the committed runs are bench/results/board_kv260.json and board_pynq-z2.json)."""
from __future__ import annotations

import json

import pytest

from hls_ref import treemask as tm_ref
from hls_ref import verifier as ver_ref
from hwcontract import board, latency as lat
from specdec import cli
from specdec.bench import board as bench_board
from specdec.bench import draft as bench_draft
from specdec.models import loading


@pytest.fixture(scope="module")
def head():
    cfg = bench_draft.head_config(loading.DEMO_EAGLE)
    return cfg, bench_draft.head_shapes(cfg)


def test_interpolate_weights_the_two_neighbours():
    square = lambda x: x * x        # noqa: E731
    assert bench_board.interpolate(square, 3) == 9
    assert bench_board.interpolate(square, 2.5) == pytest.approx((4 + 9) / 2)
    assert bench_board.interpolate(square, 2.25) == pytest.approx(0.75 * 4 + 0.25 * 9)


def test_default_target_step_is_bytes_over_the_board_dram_bandwidth():
    # KV260: 64-bit DDR4 at 2,400 Mb/s = 19.2 GB/s; PYNQ-Z2: 16-bit DDR3 at 1,050 Mb/s = 2.1 GB/s
    assert board.DRAM_BYTES_PER_S["kv260"] == 19.2e9 and board.DRAM_BYTES_PER_S["pynq-z2"] == 2.1e9
    assert bench_board.default_target_step_s(19_200_000, "kv260") == pytest.approx(1e-3)
    assert bench_board.default_target_step_s(2_100_000, "pynq-z2") == pytest.approx(1e-3)


def test_verifier_rounds_follow_the_cycle_model_by_hand():
    """A greedy chain round of 2 rows of 64 codes at 8 lanes: the start check, then each row's 8 beats, the stream
    pipeline and ROWEND; a tree round adds TCHECK and a cycle per node past the root, the node scan and THIT."""
    chain = lat.VER_START + 2 * (64 // 8 + lat.VER_STREAM + 1)
    assert bench_board.verifier_cycles(2, 64, 8) == chain
    nodes = 7
    tree = chain + lat.VER_TCHECK + (nodes - 1) + (nodes - 1) + lat.VER_HIT * 2
    assert bench_board.verifier_cycles(2, 64, 8, nodes) == tree


def test_target_facts_come_from_the_gguf():
    f = bench_board.target_facts()
    assert f["weight_bytes"] == 4 * f["params"] and f["vocab"] == 49_152 and f["d"] == 576
    assert 130e6 < f["params"] < 140e6                    # SmolLM2-135M


def test_a_round_adds_up_its_terms(head):
    """The chain round at gamma 3 keeping 2 tokens on the KV260: its draft is one 2-token forward (the rebuild, two
    causal rows) and 2 one-token forwards, the second seeing the first's key too; the verifier streams 2 rows (the
    longer of its cycles and the rows' bytes through the 16-byte port); the features of 2 tokens come in; tokens/s =
    2 / the round."""
    cfg, shapes = head
    r = bench_board.round_model("kv260", "chain", 2.0, 0.01, 20.0, cfg, shapes, 49_152, 64, 3)
    step = [bench_draft.board_step(shapes, cfg, "kv260", 64 + a, [1])["total_cycles"] for a in (0, 1)]
    rebuild = bench_draft.board_step(shapes, cfg, "kv260", 64, [1, 2], tokens=2)["total_cycles"]
    assert r["draft"]["rebuild_cycles"] == rebuild and r["draft"]["step_cycles"] == step
    lanes = board.design("kv260").cell("verifier").params["LANES"]
    verify = max(bench_board.verifier_cycles(2, 49_152, lanes), 2 * 49_152 * 2 // 16)
    c = r["cycles"]
    assert c == {"draft": rebuild + sum(step), "verifier": verify, "treemask": 0, "kvpage": 20.0,
                 "features in": 2 * 576 * 2 // 16}
    clock = board.design("kv260").fclk_hz
    assert r["fabric_s"] == pytest.approx(sum(c.values()) / clock)
    assert r["tokens_per_s"] == pytest.approx(2 / (0.01 + sum(c.values()) / clock))


def test_a_tree_round_forwards_a_level_below_its_depth_and_masks(head):
    cfg, shapes = head
    r = bench_board.round_model("pynq-z2", "tree", 3.0, 0.1, 0.0, cfg, shapes, 49_152, 64, 5)
    levels = bench_draft.EAGLE_TREE.depth - 1
    assert len(r["draft"]["step_cycles"]) == levels
    assert r["draft"]["step_cycles"] == [bench_draft.board_step(shapes, cfg, "pynq-z2", 64 + a, [1])["total_cycles"]
                                         for a in range(levels)]
    # seven mask words (the stream's width) through the Z2's 8-byte port, after the core's N + 1 cycles
    word = board.stream_width("treemask", "m_axis", {}) // 8
    assert r["cycles"]["treemask"] == tm_ref.cycles(7) + -(-7 * word // 8) == 8 + 7 * 16 // 8
    assert r["cycles"]["verifier"] >= ver_ref.tree_rtl_cycles(
        ver_ref.Decision(2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0), 49_152, 4, True, [-1] + [0] * 6)


def test_e2e_rows_pick_the_chain_and_the_tree(tmp_path):
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps({"draft": "x", "rows": [
        {"gamma": 0, "mode": "chain", "tokens_per_call": 1.0, "kv_cycles_per_round": 1.0},
        {"gamma": 5, "mode": "chain", "tokens_per_call": 2.5, "kv_cycles_per_round": 3.0},
        {"gamma": "eagle-7", "mode": "eagle", "tokens_per_call": 3.5, "kv_cycles_per_round": 4.0}]}))
    rows = bench_board.e2e_rows(path, 5)
    assert rows["chain"]["tokens_per_call"] == 2.5 and rows["tree"]["tokens_per_call"] == 3.5
    with pytest.raises(ValueError, match=r"--gamma 4: .* no chain row at gamma 4 \(its chains: \[0, 5\]\)"):
        bench_board.e2e_rows(path, 4)
    with pytest.raises(ValueError, match="--e2e .*nope.json: not a readable e2e result"):
        bench_board.e2e_rows(tmp_path / "nope.json", 5)


def test_run_with_given_step_and_accept_len(tmp_path):
    """--target-step-ms 20 and --accept-len 2.5 without an e2e result: target-only is 50 tokens/s, each mode keeps
    2.5 tokens a round, the kvpage term is not counted, and the speedup is the ratio of the two rates."""
    res = bench_board.run("kv260", target_step_ms=20.0, accept_len=2.5, e2e=tmp_path / "none.json", measure=False)
    assert res["target_only_tokens_per_s"] == pytest.approx(50.0)
    assert res["target_step"]["source"] == "--target-step-ms" and res["acceptance_source"] == "--accept-len"
    for mode in ("chain", "tree"):
        r = res["rounds"][mode]
        assert r["accept_len"] == 2.5 and r["cycles"]["kvpage"] == 0.0
        assert res["speculative_tokens_per_s"][mode] == pytest.approx(2.5 / (0.02 + r["fabric_s"]))
        assert res["speedup"][mode] == pytest.approx(res["speculative_tokens_per_s"][mode] / 50.0)
    # the head with its first 2,048 hot tokens: a quarter of the hot head streams, a round's fabric time shrinks
    small = bench_board.run("kv260", target_step_ms=20.0, accept_len=2.5, e2e=tmp_path / "none.json", measure=False,
                            hot_vocab=2048)
    assert (small["hot_vocab"], res["hot_vocab"]) == (2048, 8192)
    assert small["rounds"]["chain"]["fabric_s"] < res["rounds"]["chain"]["fabric_s"]
    with pytest.raises(ValueError, match="--draft-vocab 8193: the EAGLE head"):
        bench_board.run("kv260", target_step_ms=20.0, measure=False, hot_vocab=8193)


@pytest.mark.parametrize("args,message", [
    (dict(board_name="zcu104"), "--board 'zcu104': one of"),
    (dict(target_step_ms=0.0), "--target-step-ms 0.0: a time in ms above 0"),
    (dict(target_step_ms=float("nan")), "--target-step-ms nan"),
    (dict(gamma=0), "--gamma 0: in 1..16"),
    (dict(accept_len=7.0), r"--accept-len 7.0: tokens a round keeps, in 1..6 \(gamma \+ 1, and the tree's depth"),
    (dict(accept_len=6.5, gamma=8), r"--accept-len 6.5: tokens a round keeps, in 1..6 "),
    (dict(accept_len=float("nan")), "--accept-len nan"),
    (dict(accept_len=0.5), "--accept-len 0.5"),
    (dict(ctx=9000), r"--context 9000: in 1..8192"),
])
def test_bad_options_are_named(args, message):
    kw = dict(board_name="kv260", target_step_ms=None, accept_len=None, gamma=5, ctx=512) | args
    with pytest.raises(ValueError, match=message):
        bench_board.check_options(**kw)


def test_measuring_refuses_a_given_step():
    with pytest.raises(ValueError, match="on a board the target's step is measured, not given"):
        bench_board.run("kv260", target_step_ms=10.0, measure=True)


def test_cli_writes_the_keys(tmp_path, capsys):
    out = tmp_path / "board.json"
    assert cli.main(["bench", "board", "--board", "pynq-z2", "--target-step-ms", "30", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("board", "clock_hz", "target_step", "target_only_tokens_per_s", "speculative_tokens_per_s",
                "speedup", "rounds", "acceptance_source", "target_facts"):
        assert key in res, key
    assert set(res["speculative_tokens_per_s"]) == {"chain", "tree"}
    assert res["acceptance_source"] == "bench/results/e2e_demo_eagle_trees7cal_ref_greedy.json"
    assert res["rounds"]["chain"]["accept_len"] == bench_board.e2e_rows(bench_board.DEFAULT_E2E, 5)["chain"][
        "tokens_per_call"]
    assert "target-only: 33.33 tokens/s" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--board", "kv260", "--accept-len", "9"], "--accept-len 9.0"),
    (["--board", "kv260", "--gamma", "3", "--e2e", "bench/results/e2e_demo_eagle_ref_greedy.json", "--gamma", "9"],
     "--gamma 9: "),
    (["--board", "kv260", "--target-step-ms", "-1"], "--target-step-ms -1.0"),
])
def test_cli_bad_options_exit_2(extra, message, capsys):
    assert cli.main(["bench", "board", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_unknown_board_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "board", "--board", "zcu104"])
    assert e.value.code == 2 and "zcu104" in capsys.readouterr().err


def test_a_board_is_pynq_finding_one_unless_emulated(monkeypatch):
    from specdec.hw import overlay
    from specdec.paths import EMULATE_ENV
    monkeypatch.setattr(overlay, "pynq_board_here", lambda: True)
    monkeypatch.delenv(EMULATE_ENV, raising=False)
    assert bench_board.on_board()
    monkeypatch.setenv(EMULATE_ENV, "kv260")
    assert not bench_board.on_board()
    monkeypatch.delenv(EMULATE_ENV)
    monkeypatch.setattr(overlay, "pynq_board_here", lambda: False)
    assert not bench_board.on_board()


@pytest.mark.long
@pytest.mark.ml
def test_measuring_times_the_target_here():
    """The board path off a board: the target's forwards timed on this CPU replace the projected step."""
    res = bench_board.run("kv260", measure=True)
    t = res["target_step"]
    assert t["source"] == "measured on this board" and 0 < t["step_s"] and 0 < t["round_s"]
    assert t["positions"] == max(5, bench_draft.EAGLE_TREE.budget) + 1
    assert res["target_only_tokens_per_s"] == pytest.approx(1 / t["step_s"])
    r = res["rounds"]["chain"]
    assert r["tokens_per_s"] == pytest.approx(r["accept_len"] / (t["round_s"] + r["fabric_s"]))
