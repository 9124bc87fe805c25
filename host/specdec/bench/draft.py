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

``--draft smollm2-eagle-head`` (:func:`run_eagle`, :func:`measure_eagle`) costs the EAGLE-style head's whole draft
step on the fabric instead: its engine jobs (the shapes from its ``eagle.json``, the planes and K slices of
:mod:`specdec.models.int8eagle`) by ``hls_ref.draftengine.cycles``, one tree-attention job per KV head by
``hls_ref.treeattn.cycles`` against ``hls_ref.treeattn.bound``, each board's step with what stays on chip and what
streams (``int8draft.layout``) and which limit binds (the MACs, the HP port or the attention unit), the sizing of
the engine's weights and the unit's buffers, and merges the int8 head's measured figures
(:func:`specdec.bench.eagle_int8.int8_figures`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time

from fpga import hw, overlay_budget
from hls_ref import draftengine as de
from hls_ref import treeattn
from hls_ref import vecunit
from hwcontract import board
from hwcontract import params as hwparams
from hwcontract.formats import TA_ACC_BITS, VU_OP
from hwcontract.latency import de_wpipe
from hwcontract.regmap import REG_BITS, TA_BEAT_BITS

from ..app import checks, pairs
from ..app.job import TreeSpec
from ..app.runner import run as run_job
from ..decoding import eagle
from ..decoding.drafters import ModelDraft
from ..hw.cores import golden_draftengine
from ..models import corpus, int8draft, int8eagle, loading
from ..models.lm import CausalLM
from .eagle_int8 import GOALS as INT8_GOALS
from .eagle_int8 import int8_figures
from .host import host_info

GOALS = {"agreement": 0.98, "acceptance_gap": 0.02, "kv260_step_s": 1e-3}
#: The demo draft's run: held-out prompts, tokens per prompt, gamma, agreement passages (``specdec bench draft``).
DEMO_DEFAULTS = {"n_prompts": 20, "max_new_tokens": 64, "gamma": 4, "n_agreement": 200}
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


def run(n_prompts: int = DEMO_DEFAULTS["n_prompts"], max_new_tokens: int = DEMO_DEFAULTS["max_new_tokens"],
        gamma: int = DEMO_DEFAULTS["gamma"], draft_vocab: int = 8192, n_agreement: int = DEMO_DEFAULTS["n_agreement"],
        n_calibration: int = 400, progress=print) -> dict:
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


# ------------------------------------------------------------------------------------------------
# The EAGLE-style head on the fabric (``--draft smollm2-eagle-head``): the engine's jobs and the tree-attention
# unit's, costed by their cycle models, and the step each board's build projects
# ------------------------------------------------------------------------------------------------

#: Committed context keys the head's attention jobs read (``--context``): the e2e runs' prompts and their 64 new
#: tokens stay under it.
EAGLE_CONTEXT = 512
#: The 7-node calibrated EAGLE tree of the head's committed tree result (bench/results/README.md,
#: ``e2e_demo_eagle_trees7cal_ref_greedy.json``: ``--tree eagle --tree-budget 7 --tree-depth 5 --tree-topk 3
#: --tree-expand 1 --tree-scores calibrated``).
EAGLE_TREE = TreeSpec("eagle", budget=7, depth=5, topk=3, expand=1, scores="calibrated")
EAGLE_GOALS = {"kv260_step_s": 1e-3, "attention_ratio": 1.1}
#: RAMB36 shapes (depth, width) of the block RAM's simple dual-port configurations (UG473 / UG573): a memory takes
#: the fewest blocks of any one of them.
RAMB36_SHAPES = ((32768, 1), (16384, 2), (8192, 4), (4096, 9), (2048, 18), (1024, 36), (512, 72))


def head_config(draft: str, hot_vocab: int | None = None) -> dict:
    """The layer shape of the EAGLE head ``draft`` (a directory or a shipped head's name), from its ``eagle.json``:
    ``d``, ``intermediate``, ``heads``, ``kv_heads``, ``head_dim``, ``hot_vocab`` (``hot_vocab`` given: the first
    that many of its hot tokens, ``eagle.load_head``). ValueError when ``draft`` is no EAGLE head or ``hot_vocab``
    is not 1 to the head's own."""
    path = checks.eagle_dir(draft)
    if path is None:
        raise ValueError(f"--draft {draft!r}: not an EAGLE head (a directory with {eagle.CONFIG_FILE})")
    meta = json.loads((path / eagle.CONFIG_FILE).read_text(encoding="utf-8"))
    lc = meta["layer_config"]
    if hot_vocab is not None and (isinstance(hot_vocab, bool) or not isinstance(hot_vocab, int)
                                  or not 1 <= hot_vocab <= meta["hot_vocab"]):
        raise ValueError(f"--draft-vocab {hot_vocab!r}: the EAGLE head {draft!r} keeps 1 to {meta['hot_vocab']} "
                         "hot tokens")
    return {"d": lc["hidden_size"], "intermediate": lc["intermediate_size"], "heads": lc["num_attention_heads"],
            "kv_heads": lc["num_key_value_heads"], "head_dim": lc["head_dim"],
            "hot_vocab": meta["hot_vocab"] if hot_vocab is None else hot_vocab}


def head_shapes(cfg: dict, planes: int = int8draft.ACT_PLANES,
                weight_plane2: tuple[str, ...] = int8eagle.WEIGHT_PLANE2) -> list[tuple[str, int, int, int]]:
    """``(name, N, K, M)`` of every engine job of one drafted token of the head (:data:`int8eagle.LINEARS`, in the
    order a token runs them): each layer's main job of ``planes`` rows (the activation planes) and, for a layer in
    ``weight_plane2``, its second weight plane's job of one row (the name ending in ``.w2``)."""
    d, hd, inter = cfg["d"], cfg["head_dim"], cfg["intermediate"]
    nk = {"fc": (d, 2 * d), "q": (cfg["heads"] * hd, d), "k": (cfg["kv_heads"] * hd, d),
          "v": (cfg["kv_heads"] * hd, d), "o": (d, cfg["heads"] * hd), "gate": (inter, d), "up": (inter, d),
          "down": (d, inter), "head": (cfg["hot_vocab"], d)}
    out = []
    for name, _ in int8eagle.LINEARS:
        out.append((name, *nk[name], planes))
        if name in weight_plane2:
            out.append((name + ".w2", *nk[name], 1))
    return out


def k_slices(shapes: list[tuple[str, int, int, int]], k_max: int) -> list[tuple[str, int, int, int]]:
    """The jobs of ``shapes`` on an engine of ``k_max``: a layer wider than K_MAX runs as slices of at most
    ``k_max`` input channels from channel 0 (``int8eagle.matrices``), each its own job."""
    return [(name if len(range(0, k, k_max)) == 1 else f"{name}[{k0}:{min(k, k0 + k_max)}]", n,
             min(k, k0 + k_max) - k0, m) for name, n, k, m in shapes for k0 in range(0, k, k_max)]


def engine_params(board_name: str) -> dict:
    """The draft engine's build in ``board_name``'s overlay (``hwcontract.board``)."""
    return dict(board.design(board_name).cell("draftengine").params)


def treeattn_params(board_name: str) -> tuple[dict, str]:
    """The tree-attention unit's build for ``board_name`` and where it comes from: the overlay's ``treeattn`` cell,
    or, while the block design has none, the contract's defaults (``hwcontract.params``)."""
    try:
        return dict(board.design(board_name).cell("treeattn").params), f"the {board_name} overlay's treeattn cell"
    except KeyError:
        return hwparams.defaults("treeattn"), "hwcontract.params' treeattn defaults (no treeattn cell in the overlay)"


def attention(cfg: dict, ctx: int, visible: list[int], params: dict) -> dict:
    """The tree-attention unit's jobs of one forward: one job per KV head over ``ctx`` committed keys with the
    step's rows seeing ``visible`` step nodes each (``hls_ref.treeattn.cycles`` and ``bound``, the MACs, the
    s_axis bytes). ValueError when the build's HEAD_DIM or GROUP is not the head's."""
    group = cfg["heads"] // cfg["kv_heads"]
    if params["HEAD_DIM"] != cfg["head_dim"] or params["GROUP"] != group:
        raise ValueError(f"the tree-attention build (HEAD_DIM {params['HEAD_DIM']}, GROUP {params['GROUP']}) does not "
                         f"take the head's attention (head_dim {cfg['head_dim']}, {group} query heads a KV head)")
    jobs = cfg["kv_heads"]
    return {"jobs": jobs, "ctx": ctx, "visible": list(visible), "cycles": jobs * treeattn.cycles(ctx, visible, params),
            "bound": jobs * treeattn.bound(ctx, visible, params), "macs": jobs * treeattn.macs(ctx, visible, params),
            "bytes_in": jobs * treeattn.frame_beats(ctx, len(visible), params) * treeattn.BEAT_BYTES}


def vector_jobs(cfg: dict, k_max: int, tokens: int = 1, planes: int = int8draft.ACT_PLANES,
                weight_plane2: tuple[str, ...] = int8eagle.WEIGHT_PLANE2) -> dict:
    """The vector unit's jobs of a forward of ``tokens`` rows of the head (:mod:`specdec.models.int8eagle`'s
    order, the engine's K slices at ``k_max`` each a DEQ part, one row's top token): their count and cycles
    (``hls_ref.vecunit.cycles``) on the contract's default build."""
    d, hd, inter, hot = cfg["d"], cfg["head_dim"], cfg["intermediate"], cfg["hot_vocab"]
    q_n, kv_n = cfg["heads"] * hd, cfg["kv_heads"] * hd
    res = 1 << 1                                                        # FLAGS.RES (hwcontract.regmap)

    def deq(name: str, n: int, k: int, flags: int = 0) -> tuple:
        parts = math.ceil(k / k_max) * (planes + (1 if name in weight_plane2 else 0))
        return ("DEQ", n * tokens, parts, flags)
    jobs = [("QUANT", 2 * d * tokens), deq("fc", d, 2 * d)]
    for name, n in (("q", q_n), ("k", kv_n), ("v", kv_n)):
        jobs += [("NORMQ", d)] * tokens + [deq(name, n, d)]
    jobs += [("ROPE", q_n)] * tokens + [("QUANT", q_n * tokens)] + [("ROPE", kv_n)] * tokens
    jobs += [("QUANT", kv_n * tokens), ("QUANT", kv_n * tokens), ("QUANT", q_n * tokens), deq("o", d, q_n, res)]
    for name in ("gate", "up"):
        jobs += [("NORMQ", d)] * tokens + [deq(name, inter, d)]
    jobs += [("SILU", inter * tokens), ("QUANT", inter * tokens), deq("down", d, inter, res)]
    jobs += [("QUANT", d * tokens), deq("head", hot, d), ("TOPK", hot)]
    cycles = 0
    for op, length, *more in jobs:
        parts, flags = more if more else (1, 0)
        cycles += vecunit.cycles(VU_OP[op], length, parts, flags, hd // 2, 1)
    return {"jobs": len(jobs), "cycles": cycles}


def engine_jobs(shapes: list[tuple[str, int, int, int]], params: dict, tokens: int = 1) -> dict:
    """The engine jobs of a forward of ``tokens`` tokens (each job's rows ``M * tokens``, in pieces of M_MAX) on the
    build ``params``: their cycles (``hls_ref.draftengine.cycles``, the build's weight read), MAC cycles and
    useful MACs, the jobs cut at its K_MAX (:func:`k_slices`)."""
    r, c, wpipe = params["ROWS"], params["COLS"], de_wpipe(params["WDEPTH"], params.get("URAM", 0))
    run = mac_cycles = macs = count = 0
    for _, n, k, m in k_slices(shapes, params["K_MAX"]):
        rows = m * tokens
        for piece in [params["M_MAX"]] * (rows // params["M_MAX"]) + ([rows % params["M_MAX"]] if rows % params[
                "M_MAX"] else []):
            nt, kc, ab = de.tiles(piece, k, n, r, c)
            run += de.cycles("RUN", piece * ab, piece, k, n, r, c, wpipe)
            mac_cycles += piece * nt * kc
            macs += piece * n * k
            count += 1
    return {"jobs": count, "cycles": run, "mac_cycles": mac_cycles, "macs": macs, "array": r * c, "wpipe": wpipe}


def board_loads(shapes: list[tuple[str, int, int, int]], params: dict, port_bytes: int) -> dict:
    """What a forward streams on the build ``params`` (``int8draft.layout`` over the K_MAX slices: the largest
    matrices placed once, the rest loaded before their jobs, one LOAD_W and one LOAD_P a slice) and the cycles
    its weight and parameter beats (ROWS * COLS bytes each) take through a port of ``port_bytes`` a clock."""
    mats = [(n, k) for name, n, k, _ in k_slices(shapes, params["K_MAX"])]
    size = int8draft.layout(mats, golden_draftengine(params))
    placed = size.pop("placed")
    beat = params["ROWS"] * params["COLS"]
    load = (size["loads"] * (de.cycles("LOAD_W", 0) + de.cycles("LOAD_P", 0))
            + (size["streamed_weight_beats"] + size["streamed_param_tiles"]) * math.ceil(beat / port_bytes))
    return {**size, "matrices": len(placed), "placed": sum(placed), "load_cycles": load, "port_bytes": port_bytes,
            "weight_capacity_beats": params["WDEPTH"], "param_capacity_tiles": params["PDEPTH"]}


def board_step(shapes: list[tuple[str, int, int, int]], cfg: dict, board_name: str, ctx: int,
               visible: list[int], tokens: int = 1) -> dict:
    """One forward of the head on ``board_name``'s build at its fabric clock: the engine's jobs, the loads of what
    does not stay on chip (through the HP port, before their jobs), the attention unit's jobs (whose context
    arrives through the same port: its s_axis bytes at the port's width, when that takes longer than its cycles)
    and the vector unit's jobs between them (:func:`vector_jobs`). They run one after the other; ``bound_by`` names
    the largest term: ``MACs`` (the engine's jobs), ``HP port`` (the loads), ``attention unit`` or ``vector
    unit``."""
    design = board.design(board_name)
    params = engine_params(board_name)
    port = design.hp_width // 8
    eng = engine_jobs(shapes, params, tokens)
    loads = board_loads(shapes, params, port)
    ta, source = treeattn_params(board_name)
    att = attention(cfg, ctx, visible, ta)
    att_port = math.ceil(att["bytes_in"] / port)
    vec = vector_jobs(cfg, params["K_MAX"], tokens)
    has_vector = any(c.name == "vecunit" for c in design.cells)
    vec["source"] = (f"the {board_name} overlay's vecunit cell" if has_vector else
                     f"the {board_name} overlay has no vecunit cell: the unit's cycles at the contract's defaults, "
                     "as if it had one (its glue runs in the host otherwise)")
    terms = {"MACs": eng["cycles"], "HP port": loads["load_cycles"], "attention unit": max(att["cycles"], att_port),
             "vector unit": vec["cycles"]}
    total = sum(terms.values())
    wide = max(k for _, _, k, _ in shapes)
    return {"board": board_name, "engine_build": params, "treeattn_build": ta, "treeattn_build_source": source,
            "clock_hz": design.fclk_hz, "clock": design.fclk.label, "clock_note": CLOCK_NOTE,
            "engine": eng, "loads": loads, "attention": {**att, "port_cycles": att_port}, "vector": vec,
            "cycles": terms, "total_cycles": total, "step_s": total / design.fclk_hz,
            "bound_by": max(terms, key=terms.get),
            "k_split": wide > params["K_MAX"],
            "k_split_note": (f"K up to {wide} above the build's K_MAX {params['K_MAX']}: those layers run as K slices "
                             "with 32-bit outputs, each slice a part of the vector unit's DEQ (int8eagle)"
                             if wide > params["K_MAX"] else "every layer within the build's K_MAX")}


def tree_levels(spec: TreeSpec = EAGLE_TREE) -> list[int]:
    """Pending ancestors of the node each forwarded level of an EAGLE tree expands (depths 1..depth-1, one node a
    level: the root's logits come from the round's first forward). ValueError for a spec that expands more than
    one node a level: the unit then would need the level's other pending nodes masked, which only the step block
    can do."""
    if spec.kind != "eagle" or (spec.expand or spec.topk) != 1:
        raise ValueError(f"tree {spec.kind} expanding {spec.expand or spec.topk} nodes a level: the projection takes "
                         "an EAGLE tree expanding one node a level (its pending nodes are then its ancestors)")
    return list(range(spec.depth - 1))


def treeattn_memories(params: dict) -> dict:
    """The tree-attention unit's buffers at build ``params`` as its block organises them (docs/treeattn.md, "The
    block"), in words of a stream beat (two with LANES = 32): the K/V memory (the two context block buffers of BLOCK
    keys, then the step's NODES_MAX nodes, K and V each), Q (every (row, head)), the weighted sums acc (one memory
    per lane, a word per (row, head) and compute cycle of a vector) and the per-(row, head) running max m and sum l
    (in LUT RAM). ``{name: {depth, width, count, bits, ram_style, ramb36}}``, the block RAM's RAMB36 of
    :func:`ramb36` (an estimate: yosys's mapping is ``specdec hw report``'s)."""
    hd, g, nmax, lanes, blk = (params[k] for k in ("HEAD_DIM", "GROUP", "NODES_MAX", "LANES", "BLOCK"))
    d, items, word = hd // lanes, nmax * g, max(TA_BEAT_BITS, lanes * 8)
    vec = hd * 8 // word                                # words a vector
    mems = {"K/V (context blocks x 2, step nodes)": (2 * (2 * blk + nmax) * vec, word, 1),
            "Q": (items * vec, word, 1),
            "acc (row-head state)": (items * d, TA_ACC_BITS, lanes),
            "m, l (row-head state)": (items, 2 * REG_BITS, 1)}
    lutram = ("m, l (row-head state)",)                 # the block keeps them in LUT RAM
    return {name: {"depth": dep, "width": w, "count": n, "bits": dep * w * n,
                   "ram_style": "distributed" if name in lutram else "block",
                   "ramb36": 0 if name in lutram else n * ramb36(dep, w)} for name, (dep, w, n) in mems.items()}


def sizing(cfg: dict, shapes: list[tuple[str, int, int, int]], board_name: str) -> dict:
    """What of the head stays on chip in ``board_name``'s build and what streams (``int8draft.layout``), over how
    many HP ports, and the tree-attention unit's buffers (:func:`treeattn_memories`) at its build and at the
    smallest build that takes :data:`EAGLE_TREE` (NODES_MAX = its budget), in RAMB36 against the part's block RAM
    under the overlay budget (``fpga.overlay_budget``)."""
    params = engine_params(board_name)
    design = board.design(board_name)
    loads = board_loads(shapes, params, design.hp_width // 8)
    ta, source = treeattn_params(board_name)
    small = {**ta, "NODES_MAX": EAGLE_TREE.budget}
    mems, mems_small = treeattn_memories(ta), treeattn_memories(small)
    part = overlay_budget.PARTS[overlay_budget.BOARDS[board_name]]
    pct = overlay_budget.GOALS[board_name]["bram_pct"]
    return {"board": board_name, "weight_bytes": sum(n * k for _, n, k, _ in shapes),
            "engine_weight_capacity_bytes": params["WDEPTH"] * params["ROWS"] * params["COLS"], "engine": loads,
            "hp_ports": 1, "hp_port_note": f"the overlay's one DMA for the engine, on {design.hp} "
                                           f"({design.hp_width} bits)",
            "treeattn_build": ta, "treeattn_build_source": source, "treeattn_memories": mems,
            "treeattn_ramb36": sum(m["ramb36"] for m in mems.values()),
            "treeattn_small_build": small, "treeattn_small_ramb36": sum(m["ramb36"] for m in mems_small.values()),
            "part_ramb36": part.bram36, "budget_ramb36": pct / 100 * part.bram36,
            "budget_note": f"the overlay's block RAM budget ({pct:.0f}% of the part, fpga.overlay_budget.GOALS); "
                           "the other cores' use is specdec hw report --overlay's (yosys)"}


def ramb36(depth: int, width: int) -> int:
    """RAMB36 blocks a ``depth`` x ``width`` memory takes in the best single configuration (:data:`RAMB36_SHAPES`)."""
    return min(-(-depth // d) * -(-width // w) for d, w in RAMB36_SHAPES)


def run_eagle(draft: str = loading.DEMO_EAGLE, ctx: int = EAGLE_CONTEXT, int8: dict | None = None,
              hot_vocab: int | None = None) -> dict:
    """The EAGLE head's figures on the fabric (the module's section above): cycles per drafted token (chain) and per
    tree level (:data:`EAGLE_TREE`) on the KV260's builds, the attention unit against its bound, the MACs' use,
    the step projected on each board with the limit that binds, the sizing; ``int8``: the int8 head's measured
    figures (:func:`specdec.bench.eagle_int8.int8_figures`: agreement, acceptance, tokens per call, host operations
    per step) merged in, their goals judged; ``hot_vocab``: the head with the first that many of its hot tokens.
    ValueError for a ``draft`` that is no EAGLE head, a ``ctx`` outside the unit's CTX_MAX or a bad
    ``hot_vocab``."""
    cfg = head_config(draft, hot_vocab)
    ta, _ = treeattn_params("kv260")
    if not 1 <= ctx <= ta["CTX_MAX"]:
        raise ValueError(f"--context {ctx}: must be in 1..{ta['CTX_MAX']} (the tree-attention unit's CTX_MAX)")
    shapes = head_shapes(cfg)
    chain = {b: board_step(shapes, cfg, b, ctx, [1]) for b in board.BOARDS}
    levels = {b: [board_step(shapes, cfg, b, ctx + a, [1]) for a in tree_levels()] for b in board.BOARDS}
    kv = chain["kv260"]
    eng, att = kv["engine"], kv["attention"]
    vec = kv["vector"]
    cycles = eng["cycles"] + att["cycles"] + vec["cycles"]
    level_cycles = [s["engine"]["cycles"] + s["attention"]["cycles"] + s["vector"]["cycles"] for s in levels["kv260"]]
    ratio = att["cycles"] / att["bound"]
    lanes = kv["treeattn_build"]["LANES"]
    res = {
        "draft": draft, "head": cfg, "context": ctx, "tree": dataclasses.asdict(EAGLE_TREE),
        "layers": [{"name": n, "n": nn, "k": k, "m": m} for n, nn, k, m in shapes],
        "cycles_source": ("the KV260's builds: hls_ref.draftengine.cycles for each engine job (its UltraRAM weight "
                          "read, K_MAX slices), hls_ref.treeattn.cycles for each KV head's attention job, "
                          "hls_ref.vecunit.cycles for each vector job; weights on chip (the loads are in "
                          "projected_step_s)"),
        "cycles_per_token": cycles, "engine_cycles_per_token": eng["cycles"], "engine_jobs_per_token": eng["jobs"],
        "vector_cycles_per_token": vec["cycles"], "vector_jobs_per_token": vec["jobs"],
        "cycles_per_tree_level": sum(level_cycles) / len(level_cycles), "tree_level_cycles": level_cycles,
        "attention_cycles": att["cycles"], "attention_bound": att["bound"], "attention_ratio": ratio,
        "attention_jobs": att["jobs"], "attention_macs": att["macs"],
        "tree_attention": [{"ctx": s["attention"]["ctx"], "cycles": s["attention"]["cycles"],
                            "bound": s["attention"]["bound"]} for s in levels["kv260"]],
        "mac_utilization": (eng["macs"] + att["macs"]) / (eng["cycles"] * eng["array"] + att["cycles"] * lanes),
        "mac_utilization_engine": eng["macs"] / (eng["cycles"] * eng["array"]),
        "mac_utilization_attention": att["macs"] / (att["cycles"] * lanes),
        "projected_step_s": {b: s["step_s"] for b, s in chain.items()},
        "bound_by": {b: s["bound_by"] for b, s in chain.items()},
        "clock_hz": {b: s["clock_hz"] for b, s in chain.items()}, "clock_note": CLOCK_NOTE,
        "projected_tree_level_s": {b: sum(s["step_s"] for s in ls) / len(ls) for b, ls in levels.items()},
        "boards": chain,
        "sizing": {b: sizing(cfg, shapes, b) for b in board.BOARDS},
        "needs_for_goal": needs_for_goal(chain["kv260"], EAGLE_GOALS["kv260_step_s"]),
    }
    res = {**(int8 or {}), **res}
    res["goals"] = eagle_goals(res)
    return res


def measure_eagle(draft: str = loading.DEMO_EAGLE, ctx: int = EAGLE_CONTEXT, progress=print,
                  hot_vocab: int | None = None, **options) -> dict:
    """:func:`run_eagle` with the int8 head's figures measured (:func:`specdec.bench.eagle_int8.int8_figures` with
    ``options``: its prompts, gamma, tokens and passages), the head with ``hot_vocab`` hot tokens when given."""
    t0 = time.perf_counter()
    progress("measuring the int8 head (calibration, agreement, acceptance, host operations)")
    res = run_eagle(draft, ctx, int8_figures(draft=draft, hot_vocab=hot_vocab, **options), hot_vocab)
    res["wall_s"] = time.perf_counter() - t0
    res["host"] = host_info()
    return res


def needs_for_goal(step: dict, goal_s: float) -> dict:
    """What a board's step would need to meet ``goal_s``, each taken alone: MACs a cycle (the engine's and the
    attention's MACs in that many cycles, nothing else), and HP ports of the build's width for the weight bytes the
    engine's memory cannot hold (streamed in that time, however the rest is laid out)."""
    budget = goal_s * step["clock_hz"]
    macs = step["engine"]["macs"] + step["attention"]["macs"]
    loads = step["loads"]
    beat = step["engine"]["array"]
    off_chip = max(0, loads["weight_beats"] - loads["weight_capacity_beats"]) * beat
    return {"cycles_in_goal": budget, "macs_per_cycle": math.ceil(macs / budget),
            "built_macs_per_cycle": step["engine"]["array"] + step["treeattn_build"]["LANES"],
            "weight_bytes_off_chip": off_chip,
            "hp_ports": math.ceil(off_chip / (loads["port_bytes"] * budget))}


def eagle_goals(res: dict) -> dict:
    """The issue's goals in :func:`run_eagle`'s result: each with its figure and ``met`` (None where the figure is
    not in the result: the int8 head's, until measured). The int8 goals are :mod:`specdec.bench.eagle_int8`'s."""
    def goal(value, limit, ok) -> dict:
        return {"goal": limit, "value": value, "met": None if value is None else ok(value)}
    gap = res.get("acceptance_gap")
    return {
        "kv260_step_s": {**goal(res["projected_step_s"]["kv260"], EAGLE_GOALS["kv260_step_s"],
                                lambda v: v <= EAGLE_GOALS["kv260_step_s"]), "bound_by": res["bound_by"]["kv260"]},
        "attention_ratio": goal(res["attention_ratio"], EAGLE_GOALS["attention_ratio"],
                                lambda v: v <= EAGLE_GOALS["attention_ratio"]),
        "host_ops_per_step": goal(res.get("host_ops_per_step"), INT8_GOALS["host_ops_per_step"],
                                  lambda v: v <= INT8_GOALS["host_ops_per_step"]),
        "int8_vs_float_agreement": goal(res.get("int8_vs_float_agreement"), INT8_GOALS["int8_vs_float_agreement"],
                                        lambda v: v >= INT8_GOALS["int8_vs_float_agreement"]),
        "acceptance_gap": goal(None if gap is None else max(abs(g) for g in gap.values()),
                               INT8_GOALS["acceptance_gap"], lambda v: v <= INT8_GOALS["acceptance_gap"]),
        "tokens_per_call": goal(res.get("tokens_per_call"), INT8_GOALS["tokens_per_call"],
                                lambda v: v >= INT8_GOALS["tokens_per_call"]),
    }


def format_eagle(res: dict) -> str:
    """:func:`run_eagle`'s figures in a few lines, goals marked met or MISSED."""
    mark = lambda ok: "not measured" if ok is None else "met" if ok else "MISSED"   # noqa: E731
    g = res["goals"]
    lines = [f"draft: {res['draft']} (d {res['head']['d']}, hot head {res['head']['hot_vocab']}), context "
             f"{res['context']}",
             f"cycles per drafted token: {res['cycles_per_token']:,} ({res['engine_jobs_per_token']} engine jobs "
             f"{res['engine_cycles_per_token']:,}, attention {res['attention_cycles']:,}, "
             f"{res['vector_jobs_per_token']} vector jobs {res['vector_cycles_per_token']:,}); per tree level "
             f"{res['cycles_per_tree_level']:,.0f}; MACs busy {res['mac_utilization']:.1%}",
             f"attention: {res['attention_cycles']:,} cycles against its bound {res['attention_bound']:,} "
             f"({res['attention_ratio']:.3f}x, goal <= {g['attention_ratio']['goal']}: "
             f"{mark(g['attention_ratio']['met'])})"]
    for b, s in res["boards"].items():
        c = s["cycles"]
        lines.append(f"{b}: {s['step_s'] * 1e3:.3f} ms a drafted token at {s['clock']} (the clock ladder's first "
                     f"rung), bound by {s['bound_by']} (MACs {c['MACs']:,}, HP port {c['HP port']:,}, attention "
                     f"{c['attention unit']:,}, vector unit {c['vector unit']:,} cycles); {s['loads']['placed']} of "
                     f"{s['loads']['matrices']} matrices "
                     f"on chip, {s['loads']['streamed_weight_beats']:,} weight beats streamed")
    lines.append(f"goal: a drafted token <= 1 ms on the KV260: {mark(g['kv260_step_s']['met'])}; host operations "
                 f"per step = 0: {mark(g['host_ops_per_step']['met'])}")
    if "int8_vs_float_agreement" in res:
        acc = lambda a: ", ".join(f"{k} {v:.4f}" for k, v in a.items())     # noqa: E731
        lines.append(f"int8 head: agreement {res['int8_vs_float_agreement']:.4f} (goal 0.98: "
                     f"{mark(g['int8_vs_float_agreement']['met'])}); acceptance int8 {acc(res['acceptance_int8'])}, "
                     f"float {acc(res['acceptance_float'])} (gap goal 0.02: {mark(g['acceptance_gap']['met'])}); "
                     f"{res['tokens_per_call']:.2f} tokens a call at gamma {res['gamma']} (goal 2.8: "
                     f"{mark(g['tokens_per_call']['met'])}); {res['host_ops_per_step']} host operations a step")
    return "\n".join(lines)
