"""``specdec bench draft``: the demo draft on the int8 draft engine against its float twin (docs/draftengine.md).

Measured in one run, on the demo pair with the hot-vocabulary head:

* ``int8_vs_float_agreement``: teacher-forced greedy agreement of the int8 draft with its float twin at every
  position of held-out passages (goal 0.98);
* ``acceptance_float`` / ``acceptance_int8``: the loop's acceptance (mean and per draft position) at one gamma
  on held-out prompts, both on the golden verifier (goal: int8 within 0.02 of float), and whether the two
  runs gave the same tokens (greedy decoding is lossless, so they must);
* ``host_float_step_s`` / ``golden_int8_step_s``: seconds per drafted token in those runs (the float draft in
  transformers; the int8 draft with every linear layer on the golden engine, numpy on this CPU).

The RTL is not built yet, so ``cycles_per_token``, ``clock_hz``, ``lut``, ``dsp`` and ``bram36`` are null and
``projected_step_s`` comes from the dataflow's formula (one MAC per cell per cycle at ``ARRAY`` and 150 MHz on
the KV260 with the weights on chip; the PYNQ-Z2 bound by one 64-bit HP port streaming the weights), labelled
as such.
"""
from __future__ import annotations

import dataclasses
import math
import time

from . import corpus, int8draft, models, pairs, runtime
from .decode import ModelDraft

GOALS = {"agreement": 0.98, "acceptance_gap": 0.02, "kv260_step_s": 1e-3}
ARRAY = (8, 8)                  # R x C of the planned array (docs/draftengine.md)
CLOCK_HZ = 150e6                # the fabric target
HP_PORT_BYTES = 8               # one PYNQ-Z2 HP port: 64 bits per clock


def layer_shapes(model) -> list[tuple[str, int, int]]:
    """(name, N, K) of every engine layer of a :func:`specdec.int8draft.quantize` model."""
    return [(name, *m.q.w.shape) for name, m in model.named_modules() if hasattr(m, "saturated")]


def projection(shapes: list[tuple[str, int, int]]) -> dict:
    """The formula's draft step per board (see the module docstring), with its inputs."""
    r, c = ARRAY
    macs = sum(n * k for _, n, k in shapes)
    cycles = sum(math.ceil(n / r) * math.ceil(k / c) for _, n, k in shapes)
    return {"source": f"dataflow formula, {r}x{c} array at {CLOCK_HZ / 1e6:.0f} MHz (the RTL is not built)",
            "macs_per_token": macs, "weight_bytes": macs, "array_cycles_per_token": cycles,
            "kv260": cycles / CLOCK_HZ,
            "pynq-z2": max(cycles, math.ceil(macs / HP_PORT_BYTES)) / CLOCK_HZ}


def _draft_step_s(res: dict) -> float | None:
    drafted = sum(r["g"] for g in res["generations"] for r in g["rounds"])
    spent = sum(r["draft_s"] for g in res["generations"] for r in g["rounds"])
    return spent / drafted if drafted else None


def run(n_prompts: int = 20, max_new_tokens: int = 64, gamma: int = 4, draft_vocab: int = 8192,
        n_agreement: int = 200, n_calibration: int = 400, progress=print) -> dict:
    """Measure everything in the module docstring; the result is the bench's JSON."""
    t0 = time.perf_counter()
    flt = pairs.open_pair(models.DEMO_TARGET, models.DEMO_DRAFT, draft_vocab)
    fmodel = flt.draft.lm.model.float()
    qmodel = int8draft.demo_draft(fmodel, flt.tokenizer, n_calibration)
    q8 = dataclasses.replace(flt, draft=ModelDraft(models.CausalLM(qmodel, "draft")),
                             draft_name=f"{flt.draft_name} on the int8 draft engine")
    progress(f"models ready ({time.perf_counter() - t0:.0f} s)")
    agree = int8draft.agreement(fmodel, qmodel, flt.tokenizer,
                                corpus.sample_passages(n_agreement, held_out=True, seed=2))
    progress(f"agreement {agree['rate']:.4f} on {agree['positions']} positions")
    prompts = corpus.sample_passages(n_prompts, held_out=True, seed=11)
    runs = {}
    for name, pair, engine in (("float", flt, "host"), ("int8", q8, "fabric")):
        job = {"prompts": prompts, "max_new_tokens": max_new_tokens, "gamma": gamma, "seed": 0,
               "draft_vocab": draft_vocab, "draft_engine": engine}
        runs[name] = runtime.run(job, "ref", pair)
        progress(f"{name}: acceptance {runs[name]['summary']['acceptance']:.4f}")
    tokens = {k: [g["tokens"] for g in r["generations"]] for k, r in runs.items()}
    acc = {k: {"mean": r["summary"]["acceptance"], "per_position": r["summary"]["per_position_acceptance"],
               "tokens_per_call": r["summary"]["tokens_per_call"]} for k, r in runs.items()}
    shapes = layer_shapes(qmodel)
    proj = projection(shapes)
    gap = abs(acc["int8"]["mean"] - acc["float"]["mean"])
    return {
        "draft": q8.draft_name, "draft_vocab": draft_vocab, "gamma": gamma, "prompts": n_prompts,
        "max_new_tokens": max_new_tokens, "agreement_passages": n_agreement, "calibration_passages": n_calibration,
        "cycles_per_token": None, "clock_hz": None, "lut": None, "dsp": None, "bram36": None,
        "rtl": "not built yet (docs/draftengine.md)",
        "projected_step_s": {"pynq-z2": proj["pynq-z2"], "kv260": proj["kv260"]}, "projection": proj,
        "layers": [{"name": n, "n": nn, "k": k} for n, nn, k in shapes],
        "host_float_step_s": _draft_step_s(runs["float"]), "golden_int8_step_s": _draft_step_s(runs["int8"]),
        "int8_vs_float_agreement": agree["rate"], "agreement_positions": agree["positions"],
        "acceptance_float": acc["float"], "acceptance_int8": acc["int8"],
        "tokens_identical": tokens["float"] == tokens["int8"],
        "saturated_outputs": int8draft.saturations(qmodel),
        "goals": {"agreement": {"goal": GOALS["agreement"], "met": agree["rate"] >= GOALS["agreement"]},
                  "acceptance_gap": {"goal": GOALS["acceptance_gap"], "value": gap,
                                     "met": gap <= GOALS["acceptance_gap"]},
                  "kv260_step_s": {"goal": GOALS["kv260_step_s"], "value": proj["kv260"],
                                   "met": proj["kv260"] <= GOALS["kv260_step_s"],
                                   "note": "projected by the formula, not from the RTL"}},
        "wall_s": time.perf_counter() - t0,
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
        f"acceptance at gamma {res['gamma']}: float {res['acceptance_float']['mean']:.4f} [{pp(res['acceptance_float'])}]"
        f", int8 {res['acceptance_int8']['mean']:.4f} [{pp(res['acceptance_int8'])}] (gap {g['acceptance_gap']['value']:.4f},"
        f" goal <= {g['acceptance_gap']['goal']}: {mark(g['acceptance_gap']['met'])}); tokens identical: "
        f"{res['tokens_identical']}",
        f"draft step: host float {res['host_float_step_s'] * 1e3:.2f} ms, golden int8 {res['golden_int8_step_s'] * 1e3:.2f} "
        f"ms per drafted token",
        f"projected ({res['projection']['source']}): KV260 {res['projected_step_s']['kv260'] * 1e3:.3f} ms "
        f"(goal <= 1 ms: {mark(g['kv260_step_s']['met'])}), PYNQ-Z2 {res['projected_step_s']['pynq-z2'] * 1e3:.2f} ms",
        f"RTL: {res['rtl']}",
    ]
    return "\n".join(lines)
