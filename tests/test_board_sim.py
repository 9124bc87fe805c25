"""The emulated board on the RTL (``specdec.sim.cocotb_board``): pynq's own classes driving the cocotb
simulation of the board's whole overlay (toplevel ``overlay`` at each board's parameters).

pynq's ``Overlay`` parses the hardware description rendered from ``hwcontract.board`` and binds the drivers by
VLNV; every register access goes through pynq's ``MMIO`` into an AXI-Lite master on the simulation, every
stream through ``pynq.lib.dma.DMA`` and ``pynq.allocate`` buffers into the AXI DMA model and on into the
cores' AXI-Stream ports. The decode (token tree, paged KV cache, the draft on the draft engine) must give the
golden backend's tokens, which are the target's own greedy tokens.
"""
from __future__ import annotations

import json

import pytest

from specdec.app import runner
from specdec.sim import jobs as sim_jobs
from specdec.sim.jobs import overlay_params
from hwcontract import board as bd
from hwcontract import params

def test_overlay_toplevel_takes_the_board_parameters():
    d = bd.design("kv260")
    p = overlay_params(d)
    assert p["LANES"] == 8 and p["VOCAB_MAX"] == 50272 and p["PAGES"] == 1024
    assert p["WDEPTH"] == bd.KV260_DRAFTENGINE["WDEPTH"] and p["URAM"] == 1
    assert p["TA_LANES"] == bd.KV260_TREEATTN["LANES"] and p["NODES_MAX"] == d.cell("treemask").params["NODES_MAX"]
    assert set(p) == set(params.spec("overlay"))


def test_overlay_parameters_that_clash_are_refused(monkeypatch):
    """Without its TA_ prefix the treeattn core's NODES_MAX (and LANES) would take the treemask core's (and the
    verifier's) place in the overlay toplevel: the spec refuses the clash, naming it."""
    monkeypatch.setattr(params, "SYSTEM_PREFIXES", {})
    with pytest.raises(KeyError, match="parameter NODES_MAX of core 'treeattn' clashes"):
        params.spec("overlay")
    with pytest.raises(KeyError, match="holds no core 'treeattn'"):
        params.system_params("system", {"treeattn": {}})


@pytest.mark.ml
@pytest.mark.long
@pytest.mark.usefixtures("torch_threads")
@pytest.mark.parametrize("board", ["kv260", "pynq-z2"])
def test_decode_through_pynq_on_the_rtl_of_the_overlay(opt_dirs, opt_pair, board):
    """On the KV260 the draft engine holds the draft; on the PYNQ-Z2 its layers stream (each job loads its
    weights again)."""
    pytest.importorskip("torch")
    import model_pairs
    from greedy_identity import Reference, assert_identical, greedy_job
    n_new = 10
    job = {**greedy_job(opt_dirs, model_pairs.prompts(1), 4, n_new), "draft_engine": "fabric",
           "draft_vocab": 4096, "tree": {"kind": "eagle", "budget": 8, "depth": 4, "topk": 2}}
    res = sim_jobs.run_board_sim(job, board)
    ref = runner.run(job, "ref")
    print(json.dumps({"board": res["board"], "summary": res["summary"], "draft_engine": res["draft_engine"]}))
    assert res["backend"].startswith(f"pynq:emulated-{board}:")
    assert res["draft_engine"]["streamed"] == (board == "pynq-z2")
    assert [g["tokens"] for g in res["generations"]] == [g["tokens"] for g in ref["generations"]]
    assert_identical(res, Reference(opt_pair), n_new)
    b = res["board"]
    assert b["drivers"] == {"verifier": "Verifier", "treemask": "TreeMask", "kvpage": "KVPage",
                            "draftengine": "DraftEngine", "rng": "Rng", "verifier_dma": "DMA",
                            "treemask_dma": "DMA", "draftengine_dma": "DMA"}
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    assert all(r["mask_cycles"] > 0 for r in rounds) and res["kv"]["ops"]["FORK"] > 0
    assert b["dmas"]["treemask_dma"]["transfers"]["S2MM"] == len(rounds)
    assert b["dmas"]["draftengine_dma"]["transfers"]["S2MM"] == res["draft_engine"]["jobs"]
    assert b["dmas"]["verifier_dma"]["bytes"]["MM2S"] > 0 and b["sim_ns"] > 0


def test_a_replay_of_a_file_that_is_no_recording_fails_before_the_simulation(tmp_path, monkeypatch):
    """A missing or damaged recording had built the overlay, started the simulation and failed inside it
    ("1 of 1 cocotb tests failed"), naming neither the file nor the fault."""
    from specdec.sim import harness as simulator
    monkeypatch.setattr(simulator, "run", lambda *a, **k: pytest.fail("a simulation ran"))
    with pytest.raises(FileNotFoundError, match="recording .*missing.npz' does not exist"):
        sim_jobs.replay_board_sim(tmp_path / "missing.npz", "pynq-z2")
    (tmp_path / "notes.npz").write_text("not a recording")
    with pytest.raises(ValueError, match="notes.npz: not a specdec recording"):
        sim_jobs.replay_board_sim(tmp_path / "notes.npz", "pynq-z2")


@pytest.mark.ml
@pytest.mark.long
@pytest.mark.usefixtures("torch_threads")
def test_a_recording_replays_on_the_rtl_of_the_pynq_z2(opt_dirs, opt_pair, tmp_path):
    """The PYNQ-Z2's way without the models: a host records a sampled chain job and a greedy tree job on the
    golden backend; the RTL verifier of the Z2's overlay, through pynq's MMIO and DMA, takes every recorded
    decision again."""
    pytest.importorskip("torch")
    import model_pairs
    base = {"target": opt_dirs[0], "draft": opt_dirs[1], "prompts": model_pairs.prompts(1), "max_new_tokens": 8,
            "gamma": 4, "seed": 5}
    for extra in ({"sampling": {"temperature": 0.8, "top_k": 0, "top_p": 1.0}},
                  {"tree": {"kind": "eagle", "budget": 8, "depth": 4, "topk": 2}}):
        rec, _ = runner.record({**base, **extra}, "ref", opt_pair)
        res = sim_jobs.replay_board_sim(rec.save(tmp_path / "rec.npz"), "pynq-z2")
        rep = res["replay"]
        print(json.dumps({"rounds": rep["rounds"], "rows": rep["rows"], "sim_ns": res["board"]["sim_ns"]}))
        assert rep["mismatches"] == [] and rep["matches"] == rec.rounds > 0
        assert res["board"]["dmas"]["verifier_dma"]["transfers"]["MM2S"] == rep["rows"]
