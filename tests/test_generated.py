"""The generated header and register reference: current, compilable, and faithful to ``hwcontract`` (the register
maps and their groups, the number formats, the build parameters, the exp tables)."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hwcontract import formats, params, regmap
from hwcontract.regmap import CoreMap, RegisterGroup, StreamField, StreamFormat

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen.py"
HEADER = ROOT / "hls_ref" / "include" / "specdec_regs.h"
MARKDOWN = ROOT / "docs" / "registers.md"
VENV_PY = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PY) if VENV_PY.exists() else sys.executable


def _load_gen():
    spec = importlib.util.spec_from_file_location("specdec_gen", GEN)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _load_gen()
#: scripts/gen_figures.py, as gen.py imported it (the README's figures table)
gen_figures = sys.modules["gen_figures"]


def run_gen(*args: str) -> subprocess.CompletedProcess:
    """``scripts/gen.py`` as a subprocess with the project's Python."""
    return subprocess.run([PYTHON, str(GEN), *args], capture_output=True, text=True, cwd=ROOT)


def parse_defines(text: str) -> dict[str, int]:
    """Integer ``#define``s of a header (``0x..u``, ``..u``, ``..``, ``(-..)``); symbolic ones are left out."""
    out = {}
    for name, value in re.findall(r"^#define\s+(\w+)\s+(\S+)", text, flags=re.M):
        m = re.fullmatch(r"\(?(-?(?:0[xX][0-9a-fA-F]+|\d+))[uU]?\)?", value)
        if m:
            out[name] = int(m.group(1), 0)
    return out


def parse_arrays(text: str) -> dict[str, list[int]]:
    """The ``static const`` integer arrays of a header, by name."""
    found = re.findall(r"^static const \w+ (\w+)\[\w+\] = \{([^}]*)\};", text, flags=re.M)
    return {name: [int(v) for v in body.replace(",", " ").split()] for name, body in found}


def stream_core() -> CoreMap:
    """A copy of the rng map with a stream format, to exercise the stream parts of the generators."""
    fmt = StreamFormat("tokens", "in", 64, "Draft tokens | probabilities.", (
        StreamField("TOKEN", 0, 16, "Token id.", count=2),
        StreamField("LOGP", 32, 16, "Log-probability.", count=2, signed=True),
    ))
    return dataclasses.replace(regmap.core("rng"), name="demo", streams=(fmt,))


# -- up to date ------------------------------------------------------------------------------------

def test_check_passes_on_committed_files():
    proc = run_gen("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("ok"), proc.stdout
    assert len(proc.stdout.strip().splitlines()) == 1 and not proc.stderr


def test_check_reports_missing_and_stale(tmp_path):
    proc = run_gen("--check", "--root", str(tmp_path))
    assert proc.returncode == 1
    for rel in gen.outputs():
        assert f"missing: {rel.as_posix()}" in proc.stderr
    assert run_gen("--root", str(tmp_path)).returncode == 0
    assert run_gen("--check", "--root", str(tmp_path)).returncode == 0
    (tmp_path / gen.MARKDOWN_PATH).write_text("edited by hand\n")
    proc = run_gen("--check", "--root", str(tmp_path))
    assert proc.returncode == 1
    assert f"stale: {gen.MARKDOWN_PATH.as_posix()}" in proc.stderr
    assert gen.HEADER_PATH.as_posix() not in proc.stderr


def test_render_is_deterministic():
    assert gen.outputs() == gen.outputs()
    assert set(gen.outputs()) == ({gen.HEADER_PATH, gen.MARKDOWN_PATH, gen.README}
                                  | {gen.design_path(b) for b in gen.BOARDS})
    assert HEADER.read_text() == gen.render_header()
    assert MARKDOWN.read_text() == gen.render_markdown()


def test_header_says_generated():
    head = HEADER.read_text().splitlines()[:3]
    assert any("scripts/gen.py" in ln and "hwcontract/regmap.py" in ln and "do not edit" in ln for ln in head)


# -- compiles --------------------------------------------------------------------------------------

def _compile(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} not installed")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"


def test_header_compiles_as_cpp():
    _compile(["g++", "-std=c++17", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
              "-x", "c++", str(HEADER)])


def test_header_compiles_as_c(tmp_path):
    use = tmp_path / "use.c"
    use.write_text('#include "specdec_regs.h"\n#include "specdec_regs.h"\n'  # guard: twice is fine
                   "unsigned id(void) { return SPECDEC_RNG_ID_HASH; }\n")
    _compile(["gcc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
              "-I", str(HEADER.parent), str(use)])
    _compile(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c", str(HEADER)])


def test_every_value_checked_by_the_compiler(tmp_path):
    """The compiler itself agrees with regmap for every offset, reset, field and error mask."""
    lines = ['#include "specdec_regs.h"']
    for m in regmap.CORES.values():
        pre = f"SPECDEC_{m.name.upper()}"
        lines.append(f"static_assert({pre}_ID_HASH == {m.map_hash()}u, \"{m.name} id\");")
        for r in m.registers:
            rp = f"{pre}_{r.name}"
            lines.append(f"static_assert({rp}_OFFSET == {r.offset}u && {rp}_RESET == {r.reset}u, \"{r.name}\");")
            lines.append(f"static_assert({rp}_ACCESS == SPECDEC_ACCESS_{r.access.upper()}, \"{r.name}\");")
            for f in r.fields:
                lines.append(f"static_assert({rp}_{f.name}_MASK == {f.mask}u, \"{r.name}.{f.name}\");")
    src = tmp_path / "check.cpp"
    src.write_text("\n".join(lines) + "\n")
    _compile(["g++", "-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I", str(HEADER.parent), str(src)])


# -- faithful to regmap ----------------------------------------------------------------------------

def test_header_values_equal_regmap():
    d = parse_defines(HEADER.read_text())
    for m in regmap.CORES.values():
        pre = f"SPECDEC_{m.name.upper()}"
        assert d[f"{pre}_ID_HASH"] == m.map_hash()
        assert d[f"{pre}_NUM_REGS"] == len(m.registers)
        assert d[f"{pre}_SPAN"] == m.span
        offsets = {k[len(pre) + 1:-len("_OFFSET")]: v for k, v in d.items()
                   if k.startswith(pre + "_") and k.endswith("_OFFSET")}
        assert offsets == {r.name: r.offset for r in m.registers}
        for r in m.registers:
            assert d[f"{pre}_{r.name}_RESET"] == r.reset
            for f in r.fields:
                fp = f"{pre}_{r.name}_{f.name}"
                assert (d[f"{fp}_LSB"], d[f"{fp}_WIDTH"], d[f"{fp}_MASK"]) == (f.lsb, f.width, f.mask)
        for f in m.error_bits:
            assert d[f"{pre}_ERR_{f.name}"] == f.mask


def test_rng_seed_zero_mask():
    d = parse_defines(HEADER.read_text())
    assert d["SPECDEC_RNG_ERR_SEED_ZERO"] == regmap.core("rng").reg("ERR").field("SEED_ZERO").mask


def test_streams_rendered():
    m = stream_core()
    d = parse_defines(gen.render_header({m.name: m}))
    assert d["SPECDEC_DEMO_STREAM_TOKENS_WIDTH"] == 64
    assert [d[f"SPECDEC_DEMO_STREAM_TOKENS_LOGP_{k}"] for k in ("LSB", "WIDTH", "COUNT", "SIGNED")] == [32, 16, 2, 1]
    assert [d[f"SPECDEC_DEMO_STREAM_TOKENS_TOKEN_{k}"] for k in ("LSB", "WIDTH", "COUNT", "SIGNED")] == [0, 16, 2, 0]
    assert "#define SPECDEC_DEMO_STREAM_TOKENS_DIR" in gen.render_header({m.name: m})
    md = gen.render_markdown({m.name: m})
    assert "`tokens` (in, 64-bit words)" in md and "| `LOGP` | 32 | 16 | 2 | yes |" in md
    assert "Draft tokens \\| probabilities." in md


def test_changed_register_changes_hash_and_outputs():
    rng = regmap.core("rng")
    i = [r.name for r in rng.registers].index("COUNT")
    count = rng.registers[i]
    for changed in (dataclasses.replace(count, reset=count.reset + 1),
                    dataclasses.replace(count, access="ro"),
                    dataclasses.replace(count, name="COUNT2")):
        regs = rng.registers[:i] + (changed,) + rng.registers[i + 1:]
        other = dataclasses.replace(rng, registers=regs)
        assert other.map_hash() != rng.map_hash()
        header = gen.render_header({"rng": other})
        assert f"0x{other.map_hash():08X}u" in header and f"0x{rng.map_hash():08X}u" not in header
        assert gen.render_markdown({"rng": other}) != gen.render_markdown()


def test_changed_map_makes_check_fail(tmp_path):
    gen.write(tmp_path)
    assert gen.stale(tmp_path) == []
    rng = regmap.core("rng")
    other = dataclasses.replace(rng, error_bits=rng.error_bits + (regmap.Field("NEW", 1, 1, "new"),))
    assert {why for _, why in gen.stale(tmp_path, {"rng": other})} == {"stale"}


def test_macro_name_collision_is_refused():
    with pytest.raises(ValueError, match="collide"):
        gen.render_header({"a": regmap.core("rng"), "b": regmap.core("rng")})


def test_markdown_mentions_every_register():
    md = MARKDOWN.read_text()
    for access in regmap.ACCESS_KINDS:
        assert f"| `{access}` |" in md
    for word in ("SLVERR", "DECERR", "byte strobe", "soft reset", "one cycle"):
        assert word.lower() in md.lower()
    for m in regmap.CORES.values():
        assert f"\n## {m.name}\n" in md
        assert f"0x{m.map_hash():08X}" in md
        for r in m.registers:
            assert re.search(rf"^\| 0x{r.offset:02X} \| `{r.name}` \| {r.access} \| 0x{r.reset:08X} \|", md, re.M), r.name
            for f in r.fields:
                assert f"`{f.name}`" in md
        for f in m.error_bits:
            assert f"`{f.name}` | 0x{f.mask:08X}" in md


# -- formats, parameters, tables, groups -----------------------------------------------------------

def test_header_constants_equal_hwcontract():
    """Every format and size constant the C++ uses, with its hwcontract value (signed: -inf is negative)."""
    d = parse_defines(HEADER.read_text())
    for name in ("LOGIT_FRAC", "LOGIT_NEG_INF", "CODE_MAX", "INV_TEMP_FRAC", "INV_TEMP_MAX", "EXP_FRAC", "EH_SIZE",
                 "EL_SIZE", "EXP_LIMIT", "U_BITS", "RNG_WORD_BITS"):
        assert d[f"SPECDEC_{name}"] == getattr(formats, name), name
    for name in ("LOGIT_BITS", "TREE_MAX_NODES", "TREE_PARENT_BITS", "TREE_TOKEN_BITS", "KV_SLOTS", "KV_MAX_PAGES",
                 "KV_MAX_BLOCKS", "VERIFIER_MAX_GAMMA", "VOCAB_LIMIT"):
        assert d[f"SPECDEC_{name}"] == getattr(regmap, name), name
    assert d["SPECDEC_LOGIT_NEG_INF"] == -32768 and "#define SPECDEC_LOGIT_NEG_INF" in HEADER.read_text()


def test_header_parameters_equal_params():
    """Default, least and largest value of every parameter; a set also its count and its values array."""
    text = HEADER.read_text()
    d, arrays = parse_defines(text), parse_arrays(text)
    for core, ps in params.CORES.items():
        for p in ps:
            pp = f"SPECDEC_{core.upper()}_PARAM_{p.name}"
            values = sorted(p.allowed)
            assert (d[f"{pp}_DEFAULT"], d[f"{pp}_MIN"], d[f"{pp}_MAX"]) == (p.default, values[0], values[-1]), pp
            interval = values == list(range(values[0], values[-1] + 1))
            assert (f"{pp}_VALUES" in arrays) == (not interval), pp
            if not interval:
                assert d[f"{pp}_COUNT"] == len(values) and arrays[f"{pp}_VALUES"] == values, pp
    assert parse_arrays(text)["SPECDEC_VERIFIER_PARAM_LANES_VALUES"] == [1, 2, 4, 8]


def test_header_exp_tables_equal_formats():
    arrays = parse_arrays(HEADER.read_text())
    assert arrays["SPECDEC_EH"] == list(formats.EH_LIST) and arrays["SPECDEC_EL"] == list(formats.EL_LIST)


def test_every_group_index_checked_by_the_compiler(tmp_path):
    """Each group's size and each register's index in it, as the C++ result layouts use them."""
    lines = ['#include "specdec_regs.h"']
    for m in regmap.CORES.values():
        for g in m.groups:
            gp = f"SPECDEC_{m.name.upper()}_{g.name}"
            lines.append(f"static_assert({gp}_COUNT == {len(g.registers)}u, \"{g.name}\");")
            lines += [f"static_assert({gp}_{r}_INDEX == {i}u, \"{g.name}.{r}\");" for i, r in enumerate(g.registers)]
    src = tmp_path / "groups.cpp"
    src.write_text("\n".join(lines) + "\n")
    _compile(["g++", "-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I", str(HEADER.parent), str(src)])


def test_groups_leave_the_ids_unchanged():
    """A group only names registers: the hash (the ID register, the header's *_ID_HASH) ignores it."""
    d = parse_defines(HEADER.read_text())
    for m in regmap.CORES.values():
        assert m.groups, m.name
        bare = dataclasses.replace(m, groups=())
        assert bare.map_hash() == m.map_hash() == d[f"SPECDEC_{m.name.upper()}_ID_HASH"]
    # the values every driver and bitstream built so far carry
    assert {n: m.map_hash() for n, m in regmap.CORES.items()} == {
        "rng": 0xEE8698FE, "verifier": 0x2E661311, "treemask": 0x1F2FD1FE, "kvpage": 0xA96723DD,
        "draftengine": 0xE1BA4790, "treeattn": 0x6C490183, "vecunit": 0x9CFBD82E}


def test_group_of_unknown_register_is_refused():
    rng = regmap.core("rng")
    with pytest.raises(ValueError, match=r"group BAD names registers \['NOPE'\]"):
        dataclasses.replace(rng, groups=(RegisterGroup("BAD", ("OUT", "NOPE"), "."),))
    with pytest.raises(ValueError, match="duplicate group names"):
        dataclasses.replace(rng, groups=(RegisterGroup("G", ("OUT",), "."), RegisterGroup("G", ("XOR",), ".")))
    with pytest.raises(ValueError, match="distinct registers"):
        dataclasses.replace(rng, groups=(RegisterGroup("G", ("OUT", "OUT"), "."),))
    with pytest.raises(KeyError, match="groups: \\['RESULT'\\]"):
        rng.group("MISSING")


def test_markdown_lists_groups_formats_and_parameters():
    md = MARKDOWN.read_text()
    for m in regmap.CORES.values():
        for g in m.groups:
            assert f"| `{g.name}` | " + ", ".join(f"`{r}`" for r in g.registers) + " |" in md, (m.name, g.name)
    assert "## Number formats and sizes" in md and "## Build parameters" in md
    assert "| `LOGIT_NEG_INF` | -32768 |" in md and "| `U_BITS` | 24 |" in md
    for core, ps in params.CORES.items():
        for p in ps:
            assert f"| {core} | `{p.name}` | {p.default} | {p.describe()} |" in md, (core, p.name)


def test_figures_follow_the_results(tmp_path):
    """The README's figures table reads bench/results: a changed result changes the table, and the committed README
    holds the table the committed results give."""
    assert gen_figures.render_table(ROOT) in (ROOT / "README.md").read_text(encoding="utf-8")
    shutil.copytree(ROOT / "bench" / "results", tmp_path / "bench" / "results")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    path = tmp_path / "bench" / "results" / "verifier_v50257_g4_l4.json"
    data = json.loads(path.read_text())
    data["ratio"] = 1.0777
    path.write_text(json.dumps(data))
    table = gen_figures.render_table(tmp_path)
    assert "| 1.0777 |" in table and table != gen_figures.render_table(ROOT)
    assert gen_figures.render_table(tmp_path) in gen_figures.render_readme(tmp_path)
