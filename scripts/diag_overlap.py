r"""Diagnosis for docs/draftengine.md (Sizing): would loads that overlap the jobs bring the 8,192-token draft
to 1 ms a drafted token on the KV260's engine?

The engine built today takes one operation at a time: a streamed matrix's LOAD_W runs before its job, so the
KV260's step is the jobs' cycles plus every streamed beat at the HP port's rate (``specdec bench draft``).
This script models an engine that is **not built**: a second load path that writes the weight
memory while a job computes (the weight memory's write port is idle during a RUN), a ring window that holds
the matrices fetched ahead, and the same jobs, cycle model and port. Before each job it fetches the next
streamed matrices in step order (cyclically: the next step's first ones during this step's head), as many as
the ring holds and, past the first, as long as their load fits within ``slack`` times the job's own cycles; a
job whose matrix is not fetched yet waits for its load; parameter tiles still load before their job. Two
layouts: ``int8draft.layout``'s rule (the largest matrices placed while a window of ``W`` beats stays free),
and every layer placed with the head streamed in slices of ``T`` tiles.

    python scripts/diag_overlap.py [--results bench/results/draft_demo.json]

It prints the best step found for each layout; the jobs come from the bench's JSON (``layers``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwcontract import board
from specdec.bench import draft as bench_draft
from specdec.hw import cores

ROOT = Path(__file__).resolve().parents[1]
#: The KV260's fabric clock the projections use: the first rung of its clock ladder (unverified without Vivado).
CLOCK = board.design("kv260").fclk


def step_cycles(jobs: list[tuple[int, int, int]], window: int, port_bytes: int, slack: float,
                steps: int = 3) -> int | None:
    """The steady-state cycles of one drafted token. ``jobs``: (run cycles, streamed weight beats or 0,
    streamed parameter tiles) in step order; ``window``: the ring's beats; ``port_bytes``: the port's bytes a
    clock. A streamed job pays a LOAD_W's and a LOAD_P's fixed cycles and its parameter beats
    (``bench_draft.stream_load_cycles``), and its weight beats unless they were fetched ahead."""
    if any(b > window for _, b, _ in jobs):
        return None
    port_cycles = bench_draft.stream_load_cycles(0, 1, port_bytes)       # cycles a beat
    order = [(s, j) for s in range(steps + 1) for j, (_, b, _) in enumerate(jobs) if b]
    ring: list[tuple[int, int]] = []
    nxt = t = 0
    per = []
    for s in range(steps):
        t0 = t
        for j, (run, beats, tiles) in enumerate(jobs):
            if beats:
                if (s, j) not in ring:              # not fetched ahead: load it now
                    t += port_cycles * beats
                    ring.append((s, j))
                    nxt += 1
                t += bench_draft.stream_load_cycles(1, 0, port_bytes, tiles)
            held = sum(jobs[jj][1] for _, jj in ring)
            ahead = 0
            while nxt < len(order):
                b = jobs[order[nxt][1]][1]
                if held + b > window or (ahead and port_cycles * (ahead + b) > slack * run):
                    break
                ahead += b
                held += b
                ring.append(order[nxt])
                nxt += 1
            t += max(run, port_cycles * ahead)
            if beats:
                ring.remove((s, j))
        per.append(t - t0)
    return per[-1]


def main(results: Path) -> None:
    res = json.loads(results.read_text())
    params = dict(board.design("kv260").cell("draftengine").params)
    if (params["ROWS"], params["COLS"]) != bench_draft.ARRAY:
        raise SystemExit(f"the KV260's engine is {params['ROWS']} x {params['COLS']}, the bench's cycle model "
                         f"{bench_draft.ARRAY}")
    engine = cores.golden_draftengine(params)       # the build's sizes: footprint (weight beats, tiles)
    port_bytes = board.design("kv260").hp_width // 8
    shapes = [(x["n"], x["k"], x["m"]) for x in res["layers"]]
    run, size = bench_draft.run_cycles, engine.footprint

    slacks = (1.0, 1.5, 2.0, float("inf"))
    best = None
    for window in range(max(size(n, k)[0] for n, k, _ in shapes[:-1]), engine.wdepth // 2, 256):
        placed, used = [False] * len(shapes), 0
        for i in sorted(range(len(shapes)), key=lambda i: -size(*shapes[i][:2])[0]):
            if used + size(*shapes[i][:2])[0] <= engine.wdepth - window:
                placed[i], used = True, used + size(*shapes[i][:2])[0]
        jobs = [(run(n, k, m), *((0, 0) if p else size(n, k))) for (n, k, m), p in zip(shapes, placed)]
        for slack in slacks:
            c = step_cycles(jobs, window, port_bytes, slack)
            if c and (best is None or c < best[0]):
                best = (c, window, slack, sum(placed))
    print(f"largest matrices placed, a ring of {best[1]:,} beats, {best[3]} of {len(shapes)} matrices placed: "
          f"{best[0]:,} cycles, {best[0] / CLOCK.hz * 1e3:.3f} ms at {CLOCK.label}")
    (hn, hk, hm), layers = shapes[-1], shapes[:-1]
    window = engine.wdepth - sum(size(n, k)[0] for n, k, _ in layers)
    head_tiles, tile_beats = size(hn, hk)[1], size(engine.rows, hk)[0]
    best = None
    for tiles in range(8, window // tile_beats + 1, 8):
        head = [(run(t * engine.rows, hk, hm), *size(t * engine.rows, hk))
                for t in (min(tiles, head_tiles - i) for i in range(0, head_tiles, tiles))]
        jobs = [(run(n, k, m), 0, 0) for n, k, m in layers] + head
        for slack in slacks:
            c = step_cycles(jobs, window, port_bytes, slack)
            if c and (best is None or c < best[0]):
                best = (c, tiles)
    print(f"every layer placed, the head streamed in slices of {best[1]} tiles through {window:,} beats: "
          f"{best[0]:,} cycles, {best[0] / CLOCK.hz * 1e3:.3f} ms at {CLOCK.label}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "draft_demo.json")
    main(ap.parse_args().results)
