"""Recorded rounds (``specdec.hw.recording``): a host records every verifier round of a job; a board without the
models (the PYNQ-Z2) replays them through its own verifier and must take the same decisions."""
from __future__ import annotations

import re

import numpy as np
import pytest
from specdec.app import runner
from specdec.hw import cores, overlay, recording


pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

TREE = {"kind": "eagle", "budget": 8, "depth": 4, "topk": 2}


def job(opt_dirs, temperature=0.0, tree=None, n_new=12):
    import model_pairs
    j = {"target": opt_dirs[0], "draft": opt_dirs[1], "prompts": model_pairs.prompts(2), "max_new_tokens": n_new,
         "gamma": 4, "seed": 3, "sampling": {"temperature": temperature, "top_k": 0, "top_p": 1.0}}
    return {**j, "tree": tree} if tree else j


@pytest.fixture(scope="module")
def recorded(opt_dirs, opt_pair, tmp_path_factory):
    """(kind -> (recording read back from its file, the job's result)) for a greedy chain, a sampled chain
    and a greedy tree."""
    pytest.importorskip("torch")
    out = {}
    for kind, j in (("greedy", job(opt_dirs)), ("sampled", job(opt_dirs, 0.8)), ("tree", job(opt_dirs, tree=TREE))):
        rec, res = runner.record(j, "ref", opt_pair)
        path = rec.save(tmp_path_factory.mktemp("rec") / f"{kind}.npz")
        out[kind] = (recording.load(path), res)
    return out


@pytest.mark.parametrize("kind", ["greedy", "sampled", "tree"])
def test_replay_on_a_fresh_verifier_takes_every_recorded_decision(recorded, kind):
    rec, res = recorded[kind]
    rounds = sum(len(g["rounds"]) for g in res["generations"])
    assert rec.rounds == rounds > 0
    assert sum(e["op"] == "seed" for e in rec.events) == 2          # one per prompt
    rep = recording.replay(rec, cores.golden_verifier())
    assert rep["mismatches"] == [] and rep["matches"] == rounds
    per_prompt, it = [], iter(rep["tokens"])                         # the rounds' tokens, prompt by prompt
    for e in rec.events:
        if e["op"] == "seed":
            per_prompt.append([])
        else:
            per_prompt[-1] += next(it)
    for got, g in zip(per_prompt, res["generations"], strict=True):
        assert got[:len(g["tokens"])] == g["tokens"]                    # the text the board would emit
    assert rec.info["texts"] == [g["text"] for g in res["generations"]]
    if kind == "tree":
        assert all(e["nodes"][0] == 0 and len(e["nodes"]) == len(e["result"]["path"]) + 1
                   for e in rec.events if e["op"] == "tree")
    if kind == "sampled":
        assert all("q" in e for e in rec.events if e["op"] == "chain" and e["draft"])


def test_a_tree_round_given_iterators_is_recorded_whole():
    """``verify_tree`` takes parents and tokens as iterators; the recorder read them after the driver had, found
    them spent, and recorded a round with no parents, which its replay refused."""
    rv = recording.RecordingVerifier(cores.golden_verifier())
    rows = np.zeros((3, 16), np.float32)
    rows[0, 5] = rows[1, 9] = 8.0                                   # the walk takes node 1 (token 5), emits 9
    res = rv.verify_tree(iter([-1, 0, 0]), (t for t in [0, 5, 2]), rows, greedy=True)
    assert res.path == (1,) and res.next_token == 9
    (ev,) = rv.recording.events
    assert ev["parents"] == [-1, 0, 0] and ev["tokens"] == [0, 5, 2] and ev["nodes"] == [0, 1]
    rep = recording.replay(rv.recording, cores.golden_verifier())
    assert rep["matches"] == 1 and rep["mismatches"] == [] and rep["tokens"] == [[5, 9]]


def test_a_changed_row_is_a_mismatch(recorded):
    rec, _ = recorded["greedy"]
    ev = next(e for e in rec.events if e["op"] == "chain" and e["result"]["n_accept"] < len(e["draft"]))
    rows = rec.arrays[ev["p"]].copy()
    k = ev["result"]["n_accept"]
    rows[k, ev["draft"][k]] = rows[k].max() + 256                     # the target now agrees with the draft there
    tampered = recording.Recording(rec.events, {**rec.arrays, ev["p"]: rows}, rec.info)
    rep = recording.replay(tampered, cores.golden_verifier())
    assert [m["event"] for m in rep["mismatches"]] == [rec.events.index(ev)]
    assert rep["mismatches"][0]["got"]["n_accept"] > k


def test_the_pynq_z2_replays_a_recording_through_pynqs_classes(recorded):
    """The Z2's path: no models, the recording through pynq's Overlay, MMIO and DMA on the emulated PYNQ-Z2."""
    from specdec.hw.emuboard import EmulatedBoard
    board = EmulatedBoard("pynq-z2")
    ol = overlay.pynq_overlay(device=board)
    v = ol.cores().verifier
    rows = 0
    for kind in ("sampled", "tree"):
        rec, _ = recorded[kind]
        rep = recording.replay(rec, v)
        assert rep["mismatches"] == [] and rep["matches"] == rec.rounds
        rows += rep["rows"]
    assert board.dma("verifier_dma").transfers["MM2S"] == rows > 0        # one DMA transfer per row the core took


def test_load_refuses_what_is_not_a_recording(tmp_path):
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a specdec recording"):
        recording.load(tmp_path / "x.npz")


def test_load_names_the_file_whatever_is_wrong_with_it(tmp_path):
    """numpy's own word for a file that is no archive is "pickled data"; each case names the file and what
    it is instead."""
    text, npy, meta, old = (tmp_path / n for n in ("notes.npz", "one.npy", "meta.npz", "old.npz"))
    text.write_text("not an archive")
    np.save(npy, np.zeros(3))
    np.savez(meta, meta=np.frombuffer(b"{not json", np.uint8))
    np.savez(old, meta=np.frombuffer(b'{"version": 0}', np.uint8))
    for path, what in ((text, "not an .npz archive"), (npy, "one .npy array"), (meta, "'meta' entry is not JSON"),
                       (old, f"recording version 0, this specdec reads {recording.VERSION}")):
        with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(what)):
            recording.load(path)
    with pytest.raises(FileNotFoundError, match=re.escape(f"recording {str(tmp_path / 'none.npz')!r} does not")):
        recording.load(tmp_path / "none.npz")
    with pytest.raises(FileNotFoundError, match="not a file"):
        recording.load(tmp_path)


def test_a_damaged_recording_is_a_value_error_naming_the_file(recorded, tmp_path):
    """A recording cut short or with a byte changed, or whose events lack a field or an array: a ValueError
    naming the file, as the docstring says (zipfile's BadZipFile, a KeyError in replay, or version ``true``
    taken as 1 before)."""
    import json
    import zipfile
    rec = recorded["tree"][0]
    good = rec.save(tmp_path / "good.npz")
    data = good.read_bytes()
    cut, flipped = tmp_path / "cut.npz", tmp_path / "flipped.npz"
    cut.write_bytes(data[:len(data) // 2])
    k = data.index(f"{next(iter(rec.arrays))}.npy".encode()) + 200        # inside the first array's data
    flipped.write_bytes(data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:])

    def with_meta(name: str, meta: dict) -> object:
        path = tmp_path / name
        np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **rec.arrays)
        return path

    ev = dict(rec.events[-1])
    cases = ((cut, "not an .npz archive"), (flipped, "damaged recording"),
             (with_meta("noev.npz", {"version": recording.VERSION}), "its events are not a list"),
             (with_meta("five.npz", {"version": recording.VERSION, "events": 5}), "its events are not a list"),
             (with_meta("bool.npz", {"version": True, "events": []}), "recording version True"),
             (with_meta("field.npz", {"version": recording.VERSION,
                                      "events": [{k: v for k, v in ev.items() if k != "greedy"}]}), "lacks greedy"),
             (with_meta("array.npz", {"version": recording.VERSION, "events": [{**ev, "p": "p999"}]}),
              "lacks array 'p999'"))
    for path, what in cases:
        with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(what)):
            recording.load(path)
    assert not issubclass(zipfile.BadZipFile, ValueError)       # why load turns it into one
    assert recording.load(good).events == rec.events


def test_cli_record_writes_a_file_and_refuses_sim(opt_dirs, tmp_path, capsys):
    import model_pairs
    from specdec import cli
    base = ["generate", "--prompt", model_pairs.prompts(1)[0], "--target", opt_dirs[0], "--draft", opt_dirs[1],
            "--max-new-tokens", "6", "--record", str(tmp_path / "r.npz")]
    assert cli.main([*base, "--backend", "sim"]) == 2
    assert "--record runs on --backend ref or pynq" in capsys.readouterr().err
    assert cli.main(base) == 0
    assert "recorded" in capsys.readouterr().err
    rec = recording.load(tmp_path / "r.npz")
    assert recording.replay(rec, cores.golden_verifier())["mismatches"] == []
