"""``specdec bench draft``: the demo draft on the int8 draft engine against its float twin (docs/draftengine.md).

Measured in one run, on the demo pair with the hot-vocabulary head:

* ``int8_vs_float_agreement``: teacher-forced greedy agreement of the int8 draft with its float twin at every
  position of held-out passages (goal 0.98);
* ``acceptance_float`` / ``acceptance_int8``: the loop's acceptance (mean and per draft position) at one gamma
  on held-out prompts, both on the golden verifier (goal: int8 within 0.02 of float), and whether the two
  runs gave the same tokens (greedy decoding is lossless, so they must);
* ``host_float_step_s`` / ``golden_int8_step_s``: seconds per drafted token in those runs (the float draft in
  transformers; the int8 draft with every linear layer on the golden engine, numpy on this CPU).

The engine's own figures come from the RTL in the same run:

* ``cycles_per_token``: the engine jobs of one drafted token (per layer one job of ``act_planes`` rows, and one
  of one row for a second weight plane: ``specdec.models.int8draft``), each costed by the cycle model
  (``hls_ref.draftengine.cycles``) of the ``ARRAY`` with its weights in block RAM, which the cocotb tests and the
  agreement flow assert equal to the RTL's ``CYCLES_BUSY - CYCLES_STALL`` on every job they run (the demo
  draft's shapes included);
* ``lut``, ``dsp``, ``bram36``, ``arrival_ns``: yosys synthesis of the ``ARRAY`` build (``fpga.hw.REPORT_ROWS``);
* ``projected_step_s``: per board, at the board's fabric clock (``hwcontract.board.design(board).fclk``, the
  first rung of the flow's clock ladder: unverified until Vivado closes timing there). The KV260 with its
  overlay's engine build (``kv260_fit``): its jobs' cycles with the UltraRAM read's registers
  (``hwcontract.latency.de_wpipe``), the weights on chip when the draft fits the build, else, as
  ``int8draft.bind`` does, the largest matrices on chip and the rest's weights and parameters streamed in before
  their jobs through the 128-bit HP port; the PYNQ-Z2 with each layer's weights and parameters streamed in
  before its job (LOAD_W, LOAD_P) through its 64-bit HP port. Each says which limit binds: the array (the jobs'
  cycles) or the HP port (the loads), which run one after the other.
"""
from __future__ import annotations

import dataclasses
import math
import time

from fpga import hw
from hls_ref import draftengine as de
from hwcontract import board
from hwcontract.latency import de_wpipe

from ..app import checks, pairs
from ..app.runner import run as run_job
from ..decoding.drafters import ModelDraft
from ..hw.cores import golden_draftengine
from ..models import corpus, int8draft, loading
from ..models.lm import CausalLM
from .host import host_info

GOALS = {"agreement": 0.98, "acceptance_gap": 0.02, "kv260_step_s": 1e-3}
ARRAY = (board.KV260_DRAFTENGINE["ROWS"], board.KV260_DRAFTENGINE["COLS"])    # R x C: the KV260's build
CLOCK_NOTE = ("the board's fabric clock: the first rung of its clock ladder (hwcontract.board.design(board).fclk), "
              "the fastest the bitstream flow tries; unverified until Vivado closes timing at it (no Xilinx place "
              "and route here)")


def layer_shapes(model) -> list[tuple[str, int, int, int]]:
    """(name, N, K, M) of every engine job of one drafted token of a :func:`specdec.models.int8draft.quantize` model:
    per layer its main job (M: the activation planes' rows) and, where the layer has one, its second weight
    plane's job (M = 1, the name ending in ``.w2``)."""
    return [(name + ("", ".w2")[i], *w.shape, rows) for name, m in model.named_modules() if hasattr(m, "saturated")
            for i, (w, _, rows) in enumerate(m.q.matrices())]


def run_cycles(n: int, k: int, m: int, wpipe: int = 0) -> int:
    """The cycle model's cycles of one RUN job on ``ARRAY``: ``m`` rows of ``k`` inputs, ``n`` outputs (its
    activation beats in), ``wpipe`` registers after the weight memory's read (``hwcontract.latency.de_wpipe``)."""
    r, c = ARRAY
    return de.cycles("RUN", m * de.tiles(m, k, n, r, c)[2], m, k, n, r, c, wpipe)


def step(run: int, load: int, clock_hz: int) -> dict:
    """A draft step of ``run`` job cycles and ``load`` load cycles (one after the other) at ``clock_hz``: its
    seconds and the limit that binds (``array`` or ``hp port``, whichever takes more cycles)."""
    return {"run_cycles_per_token": run, "load_cycles_per_token": load, "clock_hz": clock_hz,
            "step_s": (run + load) / clock_hz, "bound_by": "hp port" if load > run else "array"}


def projection(shapes: list[tuple[str, int, int, int]]) -> dict:
    """Cycles per drafted token on the engine (``ARRAY``, weights in block RAM), the jobs of :func:`layer_shapes`,
    and the PYNQ-Z2's step: every weight and parameter beat streamed through its HP port before its job, at its
    fabric clock."""
    r, c = ARRAY
    z2 = board.design("pynq-z2")
    clock, port_bytes = z2.fclk_hz, z2.hp_width // 8
    macs = sum(m * n * k for _, n, k, m in shapes)
    run = sum(run_cycles(n, k, m) for _, n, k, m in shapes)
    mac_cycles = sum(m * math.prod(de.tiles(m, k, n, r, c)[:2]) for _, n, k, m in shapes)
    wbeats = sum(math.prod(de.tiles(1, k, n, r, c)[:2]) for _, n, k, _ in shapes)   # one beat per tile chunk
    beat_bytes = r * c
    pbeats = sum(de.tiles(1, k, n, r, c)[0] for _, n, k, _ in shapes)                # one beat per tile
    load = stream_load_cycles(len(shapes), wbeats, port_bytes, pbeats)
    z2_step = step(run, load, clock)
    return {"source": f"the RTL's cycle model, {r}x{c} array, the jobs of one drafted token",
            "macs_per_token": macs, "weight_bytes": sum(n * k for _, n, k, _ in shapes),
            "mac_cycles_per_token": mac_cycles,
            "cycles_per_token": run, "mac_utilisation_steady": macs / (mac_cycles * r * c),
            "mac_utilisation_with_overheads": macs / (run * r * c),
            "clock_hz": clock, "clock": z2.fclk.label, "clock_note": CLOCK_NOTE,
            "stream_bytes_per_s_at_m1": beat_bytes * clock, "hp_port_bytes_per_s": port_bytes * clock,
            "pynq_z2_load_cycles_per_token": load, "pynq-z2": z2_step["step_s"],
            "pynq_z2_bound_by": z2_step["bound_by"]}


def stream_load_cycles(loads: int, weight_beats: int, port_bytes: int, param_beats: int = 0) -> int:
    """Cycles a draft step spends loading what streams: ``loads`` slices, each one LOAD_W and one LOAD_P with
    their fixed costs, and every weight and parameter beat (``ARRAY`` bytes) through a port of ``port_bytes``
    a clock."""
    return (loads * (de.cycles("LOAD_W", 0) + de.cycles("LOAD_P", 0))
            + (weight_beats + param_beats) * math.ceil(ARRAY[0] * ARRAY[1] / port_bytes))


def kv260_fit(shapes: list[tuple[str, int, int, int]]) -> dict:
    """The KV260's draft step with its overlay's engine build, laid out as ``int8draft.bind`` lays it out
    (``int8draft.layout``), at its fabric clock: its jobs' cycles with the build's weight read
    (``hwcontract.latency.de_wpipe``: UltraRAM), plus, when the draft's weights and parameters do not all fit,
    the loads of the matrices that stream (the largest stay on chip), through the HP port before their jobs."""
    design = board.design("kv260")
    params = dict(design.cell("draftengine").params)
    if (params["ROWS"], params["COLS"]) != ARRAY:
        raise ValueError(f"the KV260's engine is {params['ROWS']} x {params['COLS']}, the projection's {ARRAY}")
    wpipe = de_wpipe(params["WDEPTH"], params["URAM"])
    run = sum(run_cycles(n, k, m, wpipe) for _, n, k, m in shapes)
    size = int8draft.layout([(n, k) for _, n, k, _ in shapes], golden_draftengine(params))
    port_bytes = design.hp_width // 8
    load = stream_load_cycles(size["loads"], size["streamed_weight_beats"], port_bytes, size["streamed_param_tiles"])
    placed = size.pop("placed")
    return {"build": params, "wpipe": wpipe, "hp_port_bytes": port_bytes, **size, "placed": sum(placed),
            "matrices": len(placed), "weight_capacity_beats": params["WDEPTH"],
            "param_capacity_tiles": params["PDEPTH"], **step(run, load, design.fclk_hz), "clock": design.fclk.label,
            "clock_note": CLOCK_NOTE}


def rtl_figures() -> dict:
    """Synthesis of the engine's ``ARRAY`` build (xc7z020): resources and the logic-only arrival."""
    spec = [(c, p) for c, p in hw.REPORT_ROWS if c == "draftengine" and (p["ROWS"], p["COLS"]) == ARRAY]
    row = hw.synth_rows(spec, jobs=1)[0]
    return {"params": row["params"], "lut": row.get("lut"), "dsp": row.get("dsp"), "bram36": row.get("bram36"),
            "arrival_ns": row.get("arrival_ns"), "fmax_logic_only_hz": row.get("fmax_logic_only_hz"),
            "error": row.get("error")}


def _draft_step_s(res: dict) -> float | None:
    drafted = sum(r["g"] for g in res["generations"] for r in g["rounds"])
    spent = sum(r["draft_s"] for g in res["generations"] for r in g["rounds"])
    return spent / drafted if drafted else None


def check_options(gamma: int, max_new_tokens: int) -> None:
    """A ValueError unless the bench can measure acceptance at ``gamma`` (>= 1; the job checks the core's
    limit) with ``max_new_tokens`` a prompt: gamma 0 is target-only decoding, which drafts nothing, and so is a
    budget of one token (a round drafts at most the tokens left but one, the target's own next token)."""
    if gamma < 1:
        raise ValueError(f"--gamma must be at least 1 for the draft bench, which measures the draft's acceptance "
                         f"(gamma 0 drafts nothing), got {gamma}")
    if max_new_tokens < 2:
        raise ValueError(f"--max-new-tokens must be at least 2 for the draft bench, which measures the draft's "
                         f"acceptance (a round drafts the tokens left but one), got {max_new_tokens}")


def run(n_prompts: int = 20, max_new_tokens: int = 64, gamma: int = 4, draft_vocab: int = 8192,
        n_agreement: int = 200, n_calibration: int = 400, progress=print) -> dict:
    """Measure everything in the module docstring; the result is the bench's JSON (a ValueError for a
    ``gamma`` or ``max_new_tokens`` of :func:`check_options`, before anything loads)."""
    check_options(gamma, max_new_tokens)
    t0 = time.perf_counter()
    flt = pairs.open_pair(loading.DEMO_TARGET, loading.DEMO_DRAFT, draft_vocab)
    fmodel = flt.draft.lm.model.float()
    qmodel = int8draft.demo_draft(fmodel, flt.tokenizer, n_calibration)
    q8 = dataclasses.replace(flt, draft=ModelDraft(CausalLM(qmodel, "draft")),
                             draft_name=checks.draft_name(flt.draft_name, draft_engine="fabric"))
    progress(f"models ready ({time.perf_counter() - t0:.0f} s)")
    agree = int8draft.agreement(fmodel, qmodel, flt.tokenizer,
                                corpus.sample_passages(n_agreement, held_out=True, seed=2))
    progress(f"agreement {agree['rate']:.4f} on {agree['positions']} positions")
    prompts = corpus.sample_passages(n_prompts, held_out=True, seed=11)
    runs = {}
    for name, pair, engine in (("float", flt, "host"), ("int8", q8, "fabric")):
        job = {"prompts": prompts, "max_new_tokens": max_new_tokens, "gamma": gamma, "seed": 0,
               "draft_vocab": draft_vocab, "draft_engine": engine}
        runs[name] = run_job(job, "ref", pair)
        progress(f"{name}: acceptance {runs[name]['summary']['acceptance']:.4f}")
    tokens = {k: [g["tokens"] for g in r["generations"]] for k, r in runs.items()}
    acc = {k: {"mean": r["summary"]["acceptance"], "per_position": r["summary"]["per_position_acceptance"],
               "tokens_per_call": r["summary"]["tokens_per_call"]} for k, r in runs.items()}
    shapes = layer_shapes(qmodel)
    rtl = rtl_figures()
    progress(f"RTL: {rtl['lut']} LUT, {rtl['dsp']} DSP, {rtl['bram36']} RAMB36, arrival {rtl['arrival_ns']} ns")
    proj = projection(shapes)
    fit = kv260_fit(shapes)
    gap = abs(acc["int8"]["mean"] - acc["float"]["mean"])
    return {
        "draft": q8.draft_name, "draft_vocab": draft_vocab, "gamma": gamma, "prompts": n_prompts,
        "max_new_tokens": max_new_tokens, "agreement_passages": n_agreement, "calibration_passages": n_calibration,
        "cycles_per_token": proj["cycles_per_token"], "lut": rtl["lut"], "dsp": rtl["dsp"], "bram36": rtl["bram36"],
        "rtl": rtl, "clock_hz": {"pynq-z2": proj["clock_hz"], "kv260": fit["clock_hz"]}, "clock_note": CLOCK_NOTE,
        "projected_step_s": {"pynq-z2": proj["pynq-z2"], "kv260": fit["step_s"]},
        "bound_by": {"pynq-z2": proj["pynq_z2_bound_by"], "kv260": fit["bound_by"]}, "projection": proj,
        "kv260_fit": fit,
        "layers": [{"name": n, "n": nn, "k": k, "m": m} for n, nn, k, m in shapes],
        "host_float_step_s": _draft_step_s(runs["float"]), "golden_int8_step_s": _draft_step_s(runs["int8"]),
        "int8_vs_float_agreement": agree["rate"], "agreement_positions": agree["positions"],
        "acceptance_float": acc["float"], "acceptance_int8": acc["int8"],
        "tokens_identical": tokens["float"] == tokens["int8"],
        "saturated_outputs": int8draft.saturations(qmodel),
        "goals": {"agreement": {"goal": GOALS["agreement"], "met": agree["rate"] >= GOALS["agreement"]},
                  "acceptance_gap": {"goal": GOALS["acceptance_gap"], "value": gap,
                                     "met": gap <= GOALS["acceptance_gap"]},
                  "kv260_step_s": {"goal": GOALS["kv260_step_s"], "value": fit["step_s"],
                                   "met": fit["step_s"] <= GOALS["kv260_step_s"],
                                   "note": "the RTL's cycle model at the KV260's fabric clock; weights on chip "
                                           "when they fit the KV260's engine build, else streamed (kv260_fit)"}},
        "wall_s": time.perf_counter() - t0, "host": host_info(),
    }


def format_draft(res: dict) -> str:
    """The bench's figures in a few lines, goals marked met or MISSED."""
    g = res["goals"]
    mark = lambda ok: "met" if ok else "MISSED"        # noqa: E731
    pp = lambda a: " ".join(f"{x:.2f}" if x is not None else "-" for x in a["per_position"])   # noqa: E731
    lines = [
        f"draft: {res['draft']}",
        f"int8 vs float greedy agreement: {res['int8_vs_float_agreement']:.4f} on {res['agreement_positions']} "
        f"positions (goal {g['agreement']['goal']}: {mark(g['agreement']['met'])})",
        f"acceptance at gamma {res['gamma']}: float {res['acceptance_float']['mean']:.4f} "
        f"[{pp(res['acceptance_float'])}], int8 {res['acceptance_int8']['mean']:.4f} [{pp(res['acceptance_int8'])}] "
        f"(gap {g['acceptance_gap']['value']:.4f}, goal <= {g['acceptance_gap']['goal']}: "
        f"{mark(g['acceptance_gap']['met'])}); tokens identical: "
        f"{res['tokens_identical']}",
        f"draft step: host float {res['host_float_step_s'] * 1e3:.2f} ms, golden int8 "
        f"{res['golden_int8_step_s'] * 1e3:.2f} ms per drafted token",
        f"projected ({res['projection']['source']}): KV260 {res['projected_step_s']['kv260'] * 1e3:.3f} ms at "
        f"{res['kv260_fit']['clock']}, bound by the {res['bound_by']['kv260']} "
        f"(goal <= 1 ms: {mark(g['kv260_step_s']['met'])}; {_fit_words(res['kv260_fit'])}), "
        f"PYNQ-Z2 {res['projected_step_s']['pynq-z2'] * 1e3:.2f} ms at {res['projection']['clock']}, bound by the "
        f"{res['bound_by']['pynq-z2']} (clocks unverified without Vivado)",
        f"RTL ({ARRAY[0]}x{ARRAY[1]} build): {res['cycles_per_token']} cycles per token "
        f"({res['kv260_fit']['run_cycles_per_token']} on the KV260's, its UltraRAM read {res['kv260_fit']['wpipe']} "
        f"registers longer), {res['lut']} LUT, {res['dsp']} DSP, {res['bram36']} RAMB36, arrival "
        f"{res['rtl']['arrival_ns']} ns",
    ]
    return "\n".join(lines)


def _fit_words(fit: dict) -> str:
    """Where the KV260's draft weights live, in words."""
    if fit["fits"]:
        where = "on chip"
    else:
        where = (f"{fit['placed']} of {fit['matrices']} matrices on chip, {fit['streamed_weight_beats']:,} beats "
                 f"streamed a step in {fit['loads']} loads, over the build's memories")
    return (f"weights {where}: {fit['weight_beats']:,} of {fit['weight_capacity_beats']:,} beats, "
            f"{fit['param_tiles']:,} of {fit['param_capacity_tiles']:,} parameter tiles")
