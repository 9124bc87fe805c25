"""The cores' benchmarks behind ``specdec bench verifier|treemask|kv``: measured figures, written as JSON, goals
reported as met or missed.

The RTL figures come from :mod:`specdec.sim.cocotb_bench` (:func:`specdec.sim.jobs.run_bench`): each core driven
through its driver in the cocotb simulation, every result checked against the golden model, cycles beside the
cycle model of ``hls_ref``.

``verifier``: one round of the verifier at (V, gamma, L) through the RTL under Verilator (cycles from the core's
CYCLES_BUSY - CYCLES_STALL, against ``hls_ref.verifier.chain_rtl_cycles``), the streaming bound, yosys resources for
that parameter set, the projected verified positions per second, and the measured time of a plain numpy float32
round on this machine. The projection (:func:`projections`) is given at the PYNQ-Z2's fabric clock (``CLOCK``: the
first rung of its clock ladder in ``hwcontract.board``, unverified until Vivado closes timing there), at the
logic-only clock (1 / yosys arrival) and at the ECP5 post-route proxy's Fmax (when a route of that build is cached
or ``pnr`` is asked), each with its ratio to numpy and the bound of one 64-bit HP port at that clock.

``treemask``: the treemask core's RTL cycles per tree size N under Verilator against its cycle model
(``hls_ref.treemask.cycles``), and its yosys resources.

``kv``: the kvpage core's RTL cycles per operation (commit and rollback whatever the branches hold, rollback
of 1 and 63 branches), its yosys resources per pool size, and the pages and operations of real decodes
with paged KV caches.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np

from fpga import hw, pnr
from hls_ref.kvpage import check_params
from hls_ref.treemask import cycles as model_cycles
from hwcontract import board
from hwcontract import params as hwparams

from ..app.pairs import open_pair
from ..app.runner import execute
from ..hw.cores import golden_kvpage, golden_masker, golden_verifier
from ..sim.jobs import run_bench
from .e2e import default_prompts
from .host import host_info

#: The projection's clock: the PYNQ-Z2's fabric clock, the first rung of the flow's ladder (PLL / 7).
CLOCK = board.design("pynq-z2").fclk
CLOCK_HZ = CLOCK.hz
CLOCK_NOTE = (f"the PYNQ-Z2's fabric clock, {CLOCK.label}: the first rung of its clock ladder "
              f"(hwcontract.board), unverified until Vivado closes timing at it")
GOALS = {"ratio": 1.05, "lut_pct": 15.0, "bram_pct": 35.0, "speedup_vs_numpy_l8": 8.0, "arrival_ns": 4.0}
HP_PORT_BYTES = board.design("pynq-z2").hp_width // 8    # one PYNQ-Z2 HP port: 64 bits per clock
CODE_BYTES = 2              # a logit code is 16 bits
HP_FORMULA = ("hp_port_bytes_per_s = 8 f; hp_port_rows_per_s = 8 f / (2 V) (a row is V 16-bit codes); "
              "hp_port_positions_per_s = hp_port_rows_per_s * positions_per_round / rows_per_round (a round "
              "streams gamma + 1 target rows and gamma draft rows)")


def projections(positions: int, rows: int, cycles: int, vocab: int, cpu_positions_per_s: float,
                clocks: dict[str, float | None]) -> dict[str, dict | None]:
    """Verified positions per second at each clock, next to numpy and to one 64-bit HP port.

    Parameters
    ----------
    positions, rows, cycles : int
        Target positions, rows streamed and RTL cycles of one round.
    vocab : int
        V (codes per row).
    cpu_positions_per_s : float
        numpy's rate measured in the same run.
    clocks : dict of str to float or None
        Label -> clock in Hz (None: that clock is unknown, the entry is None).

    Returns
    -------
    dict
        Per label: ``clock_hz``, ``positions_per_s`` (positions * f / cycles), ``ratio_to_numpy``,
        ``hp_port_bytes_per_s``, ``hp_port_rows_per_s``, ``hp_port_positions_per_s`` (see ``HP_FORMULA``),
        ``bound_positions_per_s`` (the lower of the core and the port) and ``bound_by``.
    """
    out: dict[str, dict | None] = {}
    for label, f in clocks.items():
        if not f:
            out[label] = None
            continue
        core_rate = positions * f / cycles
        port_rows = HP_PORT_BYTES * f / (CODE_BYTES * vocab)
        port_rate = port_rows * positions / rows
        out[label] = {"clock_hz": f, "positions_per_s": core_rate, "ratio_to_numpy": core_rate / cpu_positions_per_s,
                      "hp_port_bytes_per_s": HP_PORT_BYTES * f, "hp_port_rows_per_s": port_rows,
                      "hp_port_positions_per_s": port_rate, "bound_positions_per_s": min(core_rate, port_rate),
                      "bound_by": "core" if core_rate <= port_rate else "hp port"}
    return out


def numpy_round(p: np.ndarray, q: np.ndarray, draft, rng: np.random.Generator) -> tuple[int, int]:
    """Plain numpy float32 speculative-sampling round (the CPU reference the projection is compared with).

    Softmax of each streamed row, the accept test ``u < p(x) / q(x)``, and a residual or bonus sample by
    inverse CDF, rows consumed in the same order as the core.

    Returns
    -------
    (n_accept, next_token)
    """
    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    g = len(draft)
    for i in range(g):
        pi, qi = softmax(p[i]), softmax(q[i])
        x = draft[i]
        if rng.random() * qi[x] < pi[x]:
            continue
        w = np.maximum(pi - qi, 0)
        cs = np.cumsum(w)
        return i, int(np.searchsorted(cs, rng.random() * cs[-1], side="right"))
    cs = np.cumsum(softmax(p[g]))
    return g, int(np.searchsorted(cs, rng.random() * cs[-1], side="right"))






def time_numpy(vocab: int, gamma: int, reps: int = 30, seed: int = 0) -> dict:
    """Median wall time of :func:`numpy_round` on an all-accept round (gamma + 1 target rows, gamma draft
    rows, one bonus sample: the same work as the RTL's all-accept round)."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((gamma + 1, vocab)).astype(np.float32) * 3
    q = p[:gamma].copy()
    draft = [int(np.argmax(p[i])) for i in range(gamma)]
    times = []
    for _ in range(reps + 2):
        t0 = time.perf_counter()
        n, _ = numpy_round(p, q, draft, rng)
        times.append(time.perf_counter() - t0)
        assert n == gamma
    return {"cpu_numpy_s": statistics.median(times[2:]), "cpu_numpy_reps": reps, "numpy": np.__version__}




def rtl_cycles(vocab: int, gamma: int, lanes: int, vocab_max: int, sim: str = "verilator", seed: int = 0) -> dict:
    """The verifier's scenarios on the RTL (``bench_verifier`` of :mod:`specdec.sim.cocotb_bench`): per scenario its
    result, cycles, the cycle model and the streaming bound."""
    return run_bench("verifier", "bench_verifier", sim, {"LANES": lanes, "VOCAB_MAX": vocab_max, "GAMMA_MAX": 16},
                   vocab=vocab, gamma=gamma, seed=seed)


def bench_verifier(vocab: int, gamma: int, lanes: int, backend: str = "sim", vocab_max: int | None = None,
                   synth: bool = True, sim: str = "verilator", pnr: bool = False, seed: int = 1) -> dict:
    """Measure one parameter set; see the module docstring. Raises ValueError on bad parameters.

    With ``synth``, the projection adds the logic-only clock; the post-route proxy's clock comes from a cached
    ECP5 route of the same build (``fpga.pnr``, seed ``seed``), or from a new route when ``pnr`` is set.
    """
    if backend != "sim":
        raise ValueError(f"backend {backend!r}: the verifier benchmark counts RTL cycles, so only 'sim' "
                         f"(the cocotb simulation) applies")
    hwparams.spec("verifier")["LANES"].check(lanes, "verifier")
    hwparams.spec("verifier")["GAMMA_MAX"].check(gamma, "verifier")   # a round's gamma is at most GAMMA_MAX
    vocab_max = hwparams.spec("verifier")["VOCAB_MAX"].check(vocab if vocab_max is None else vocab_max, "verifier")
    if not 1 <= vocab <= vocab_max:
        raise ValueError(f"need 1 <= vocab ({vocab}) <= vocab_max ({vocab_max})")
    t0 = time.perf_counter()
    scen = rtl_cycles(vocab, gamma, lanes, vocab_max, sim)
    sim_s = time.perf_counter() - t0
    main = scen["all_accept"]
    cyc = main["cycles"]
    positions = main["target_positions"]
    res = {"vocab": vocab, "gamma": gamma, "lanes": lanes, "vocab_max": vocab_max, "backend": f"sim:{sim}",
           "cycles": cyc, "model_cycles": main["model_cycles"], "bound_cycles": main["bound_cycles"],
           "ratio": main["ratio"],
           "positions_per_round": positions, "clock_hz": CLOCK_HZ, "clock_note": CLOCK_NOTE,
           "projected_positions_per_s": positions * CLOCK_HZ / cyc, "scenarios": scen,
           "sim_wall_s": sim_s}
    res.update(time_numpy(vocab, gamma))
    res["cpu_positions_per_s"] = positions / res["cpu_numpy_s"]
    res["speedup_vs_numpy"] = res["projected_positions_per_s"] / res["cpu_positions_per_s"]
    clocks: dict[str, float | None] = {"fabric_clock": CLOCK_HZ}
    if synth:
        row = hw.report(["verifier"], {"verifier": {"VOCAB_MAX": str(vocab_max), "LANES": str(lanes)}}, pnr=pnr,
                        seed=seed)[0]
        if row["error"]:
            raise RuntimeError(f"synthesis of {row['toplevel']} for the bench failed: {row['error']}")
        res.update({k: row[k] for k in ("lut", "lutram", "ff", "dsp", "bram36", "lut_pct", "bram_pct", "dsp_pct",
                                         "arrival_ns", "arrival_note", "tool")})
        if row["arrival_ns"]:       # an upper bound on fmax: logic only, no routing
            res["fmax_logic_only_hz"] = 1e9 / row["arrival_ns"]
            res["projected_positions_per_s_at_fmax_logic_only"] = positions * res["fmax_logic_only_hz"] / cyc
        clocks["logic_only"] = res.get("fmax_logic_only_hz")
        routed = row if pnr else _cached_route(row, seed)
        if routed and routed.get("fmax_pnr_hz"):
            res.update({k: routed[k] for k in ("fmax_pnr_hz", "pnr_device", "pnr_seed", "pnr_tool")})
        clocks["pnr_proxy"] = res.get("fmax_pnr_hz")
    else:
        res.update({"lut": None, "bram36": None})
    res["projection"] = projections(positions, main["rows"], cyc, vocab, res["cpu_positions_per_s"], clocks)
    res["hp_port_formula"] = HP_FORMULA
    goals = {"ratio <= 1.05": res["ratio"] <= GOALS["ratio"],
             "cycles = model": all(s["cycles"] == s["model_cycles"] for s in scen.values())}
    if synth:
        goals["arrival <= 4.0 ns"] = res["arrival_ns"] is not None and res["arrival_ns"] <= GOALS["arrival_ns"]
    if synth and lanes == 4:        # the resource goal is for L = 4
        goals["lut <= 15%"] = res["lut_pct"] <= GOALS["lut_pct"]
        goals["bram36 <= 35%"] = res["bram_pct"] <= GOALS["bram_pct"]
    if lanes == 8:
        goals["projection >= 8x numpy at L=8"] = res["speedup_vs_numpy"] >= GOALS["speedup_vs_numpy_l8"]
    res["goals_met"] = goals
    res["host"] = host_info()
    return res


def _cached_route(row: dict, seed: int) -> dict | None:
    """The cached ECP5 route of a report row's build (``fpga.pnr.cached``), or None."""
    vfile = Path(row["yosys_dir"]) / "core.v"       # the exact Verilog that row synthesised
    try:
        return pnr.cached(vfile, row["toplevel"], seed, Path(row["yosys_dir"]).parents[1])
    except (RuntimeError, ValueError, OSError):     # no nextpnr here: no proxy clock
        return None


def format_verifier(res: dict) -> str:
    """A short human summary of :func:`bench_verifier`'s result."""
    lines = [f"verifier V={res['vocab']} gamma={res['gamma']} L={res['lanes']} (VOCAB_MAX {res['vocab_max']}, "
             f"{res['backend']})"]
    for name, s in res["scenarios"].items():
        lines.append(f"  {name:10s} rows {s['rows']:2d}  cycles {s['cycles']:8d}  model {s['model_cycles']:8d}  "
                     f"bound {s['bound_cycles']:8d}  "
                     f"ratio {s['ratio']:.4f}  stall {s['cycles_stall']}")
    lines.append(f"  projected {res['projected_positions_per_s']:,.0f} positions/s at {res['clock_hz'] / 1e6:.3f} MHz; "
                 f"numpy float32 {res['cpu_numpy_s'] * 1e3:.2f} ms/round = {res['cpu_positions_per_s']:,.0f} "
                 f"positions/s; x{res['speedup_vs_numpy']:.2f}")
    if res.get("lut") is not None:
        lines.append(f"  yosys: {res['lut']} LUT + {res['lutram']} LUTRAM ({res['lut_pct']:.1f}% with LUTRAM), "
                     f"{res['bram36']:g} BRAM36 "
                     f"({res['bram_pct']:.1f}%), {res['dsp']} DSP; arrival {res['arrival_ns']} ns (logic only)")
    for label, pr in res.get("projection", {}).items():
        if pr:
            lines.append(f"  at {label} {pr['clock_hz'] / 1e6:.1f} MHz: {pr['positions_per_s']:,.0f} positions/s "
                         f"(x{pr['ratio_to_numpy']:.2f} numpy); one 64-bit HP port "
                         f"{pr['hp_port_bytes_per_s'] / 1e9:.2f} GB/s = {pr['hp_port_positions_per_s']:,.0f} "
                         f"positions/s; bound by {pr['bound_by']}")
        else:
            lines.append(f"  at {label}: no clock (run with synthesis; --pnr or a cached route for the proxy)")
    lines.append("  goals: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in res["goals_met"].items()))
    return "\n".join(lines)


def treemask(nodes=(1, 8, 16, 32, 64), out: str | Path | None = None,
             nodes_max: int = hwparams.defaults("treemask")["NODES_MAX"],
             sim: str = "verilator", synth: bool = True) -> dict:
    """RTL cycles of the treemask core per tree size against its cycle model, and its yosys resources.

    Runs ``bench_treemask`` of :mod:`specdec.sim.cocotb_bench` (one random tree per N through the driver, checked
    against the golden model, TREADY always high) on the RTL build with ``NODES_MAX = nodes_max``.

    Parameters
    ----------
    nodes : sequence of int
        Tree sizes N, each in 1..nodes_max.
    out : str or Path, optional
        Also write the result there as JSON.
    nodes_max : int
        The build's NODES_MAX (1..64).
    sim : {"verilator", "icarus"}
    synth : bool
        Add the yosys ``synth_xilinx`` resources of that build (``fpga.hw.report``).

    Returns
    -------
    dict
        ``nodes_max, backend, per_n`` ({N: nodes, cycles_busy, cycles_stall, cycles, model_cycles, ratio,
        max_depth}), ``model`` (the formula), ``resources`` (lut, lutram, ff, carry4, dsp, bram36, lut_pct,
        arrival_ns, arrival_note; None without ``synth``), ``sim_wall_s``, ``host``.

    Raises
    ------
    ValueError
        An N outside 1..nodes_max, or nodes_max outside 1..64.
    """
    nodes = [int(n) for n in nodes]
    hwparams.check("treemask", dict(NODES_MAX=nodes_max))
    bad = [n for n in nodes if not 1 <= n <= nodes_max]
    if bad or not nodes:
        raise ValueError(f"tree sizes {bad or nodes} outside 1..{nodes_max} (NODES_MAX)")
    t0 = time.perf_counter()
    per_n = run_bench("treemask", "bench_treemask", sim, {"NODES_MAX": nodes_max}, nodes=",".join(map(str, nodes)))
    res = {"core": "treemask", "nodes_max": nodes_max, "backend": f"sim:{sim}",
           "model": f"cycles(N) = N + {model_cycles(0)} (hls_ref.treemask.cycles)", "per_n": per_n,
           "sim_wall_s": time.perf_counter() - t0, "resources": None}
    if synth:
        row = hw.report(["treemask"], {"treemask": {"NODES_MAX": str(nodes_max)}})[0]
        res["resources"] = {k: row[k] for k in ("toplevel", "lut", "lutram", "ff", "carry4", "dsp", "bram36",
                                                 "lut_pct", "ff_pct", "arrival_ns", "arrival_note")}
    res["host"] = host_info()
    if out:
        Path(out).write_text(json.dumps(res, indent=2))
    return res


def _yosys_line(r: dict, cells: str, note: str | None) -> str:
    """A core's yosys row in a bench summary: LUTs with LUT RAM, flip-flops, ``cells``, the logic's arrival."""
    return (f"  yosys: {r['lut']} LUT + {r['lutram']} LUTRAM ({r['lut_pct']:.2f}% with LUTRAM), {r['ff']} FF, "
            f"{cells}; arrival {r['arrival_ns']} ns ({note or 'logic only'})")


def format_treemask(res: dict) -> str:
    """A short human summary of :func:`treemask`'s result."""
    lines = [f"treemask NODES_MAX={res['nodes_max']} ({res['backend']}); model {res['model']}"]
    for s in res["per_n"].values():
        lines.append(f"  N={s['nodes']:3d}  cycles {s['cycles']:4d}  model {s['model_cycles']:4d}  "
                     f"ratio {s['ratio']:.3f}  stall {s['cycles_stall']}")
    r = res.get("resources")
    if r:
        lines.append(_yosys_line(r, f"{r['carry4']} CARRY4, {r['bram36']:g} BRAM36, {r['dsp']} DSP", None))
    return "\n".join(lines)


def kv(pages=(256, 1024), max_blocks: int = hwparams.defaults("kvpage")["MAX_BLOCKS"],
       out: str | Path | None = None, sim: str = "verilator",
       synth: bool = True, decode: bool = True, decode_prompts: int = 2, decode_tokens: int = 32) -> dict:
    """The kvpage core: RTL cycles of every operation, resources per pool size, pages in real decodes.

    Parameters
    ----------
    pages : sequence of int
        Pool sizes (the PAGES parameter) to build, measure and synthesize.
    max_blocks : int
        The builds' MAX_BLOCKS.
    out : str or Path, optional
        Also write the result there as JSON.
    sim : {"verilator", "icarus"}
    synth : bool
        Add the yosys ``synth_xilinx`` resources of each build.
    decode : bool
        Also decode ``decode_prompts`` held-out passages x ``decode_tokens`` tokens with the demo pair (chain
        gamma 4 and an EAGLE-2 tree of 16 nodes, greedy, golden backend) with both KV caches paged, and
        report pages in use and kvpage operations per round, and whether the output equals dense-cache
        decoding.

    Returns
    -------
    dict
        ``per_pages`` ({P: {"ops": {label: cycles, model_cycles, ...}, "constant": {...}, "resources"}}),
        ``decode`` (per mode: pages per round, ops per round, cycles per round, identical), ``host``.
    """
    res: dict = {"core": "kvpage", "max_blocks": max_blocks, "backend": f"sim:{sim}", "per_pages": {}}
    for p in pages:
        check_params(int(p), max_blocks)
        t0 = time.perf_counter()
        ops = run_bench("kvpage", "bench_kvpage", sim, {"PAGES": p, "MAX_BLOCKS": max_blocks})
        commits = {v["cycles"] for k, v in ops.items() if v["op"] == "COMMIT"}
        rollbacks = {v["cycles"] for k, v in ops.items() if v["op"] in ("ROLLBACK", "FREE")}
        entry = {"ops": ops, "sim_wall_s": time.perf_counter() - t0,
                 "constant": {"commit_cycles": sorted(commits), "rollback_free_cycles": sorted(rollbacks),
                              "commit_constant": len(commits) == 1, "rollback_constant": len(rollbacks) == 1},
                 "all_match_model": all(v["cycles"] == v["model_cycles"] for v in ops.values()),
                 "resources": None}
        if synth:
            row = hw.report(["kvpage"], {"kvpage": {"PAGES": str(p), "MAX_BLOCKS": str(max_blocks)}})[0]
            entry["resources"] = {k: row[k] for k in ("toplevel", "lut", "lutram", "ff", "carry4", "dsp", "bram36",
                                                       "lut_pct", "ff_pct", "arrival_ns", "arrival_note")}
        res["per_pages"][str(p)] = entry
    if decode:
        res["decode"] = kv_decode(decode_prompts, decode_tokens)
    res["host"] = host_info()
    if out:
        Path(out).write_text(json.dumps(res, indent=2))
    return res


def kv_decode(n_prompts: int = 2, tokens: int = 32) -> dict:
    """Greedy decodes of the demo pair with paged KV caches (golden kvpage, verifier and treemask): pages in
    use and kvpage operations per round, chain (gamma 4) and tree (EAGLE-2, 16 nodes), against the same
    decodes with dense caches."""
    pair = open_pair()
    prompts = default_prompts(n_prompts)
    out = {}
    for label, extra in (("chain gamma 4", {"gamma": 4}), ("eagle-16", {"tree": {"kind": "eagle", "budget": 16}})):
        job = {"prompts": prompts, "max_new_tokens": tokens, "sampling": {"temperature": 0.0}, **extra}
        kvd = golden_kvpage()
        t0 = time.perf_counter()
        paged = execute(job, golden_verifier(), pair, masker=golden_masker() if "tree" in extra else None, kv=kvd)
        paged_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        dense = execute({**job, "kv": False}, golden_verifier(), pair,
                        masker=golden_masker() if "tree" in extra else None)
        dense_s = time.perf_counter() - t0
        rounds = [r for g in paged["generations"] for r in g["rounds"]]
        out[label] = {
            "prompts": n_prompts, "new_tokens": paged["summary"]["new_tokens"], "rounds": len(rounds),
            "block_tokens": paged["kv"]["block"], "pool_pages": paged["kv"]["pages"],
            "pages_in_use_per_round": [r["kv_pages"] for r in rounds],
            "pages_in_use_max": max(r["kv_pages"] for r in rounds),
            "kv_ops_per_round": paged["summary"]["kv_ops_per_round"],
            "kv_cycles_per_round": paged["summary"]["kv_cycles_per_round"],
            "ops": paged["kv"]["ops"], "op_cycles": paged["kv"]["op_cycles"],
            "free_pages_after": paged["kv"]["free_pages_after"],
            "identical_to_dense_cache": all(a["tokens"] == b["tokens"] for a, b in
                                            zip(paged["generations"], dense["generations"], strict=True)),
            "wall_s_paged": paged_s, "wall_s_dense": dense_s}
    return out


def format_kv(res: dict) -> str:
    """A short human summary of :func:`kv`'s result."""
    lines = []
    for p, e in res["per_pages"].items():
        lines.append(f"kvpage PAGES={p} MAX_BLOCKS={res['max_blocks']} ({res['backend']}); all cycles = model: "
                     f"{e['all_match_model']}")
        for label, v in e["ops"].items():
            lines.append(f"  {label:52s} {v['cycles']:5d} cycles")
        c = e["constant"]
        lines.append(f"  commit constant: {c['commit_constant']} {c['commit_cycles']}; rollback/free constant: "
                     f"{c['rollback_constant']} {c['rollback_free_cycles']}")
        r = e.get("resources")
        if r:
            lines.append(_yosys_line(r, f"{r['bram36']:g} BRAM36", r["arrival_note"]))
    for label, d in (res.get("decode") or {}).items():
        lines.append(f"decode {label}: {d['rounds']} rounds, pages in use max {d['pages_in_use_max']} of "
                     f"{d['pool_pages']} ({d['block_tokens']} tokens/page), {d['kv_ops_per_round']:.1f} ops and "
                     f"{d['kv_cycles_per_round']:.0f} cycles per round, identical to dense: "
                     f"{d['identical_to_dense_cache']}")
    return "\n".join(lines)
