"""The hardware contract (``hwcontract``) itself, and that every face of a core follows its register groups.

* ``params``: a bad value or an unknown name raises with the value and what is allowed.
* ``formats``: the inverse temperature and the quantizer round-trip; the exp tables equal the C header's
  and the compiled C++ reference's.
* Register groups: the golden record (``hls_ref.verifier.Decision``), the driver's ``Result``, the C++
  result layouts (``hls_ref.cpp``) and the kvpage golden state registers are the groups of the map.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from hwcontract import formats, params
from hwcontract.regmap import core

HEADER = Path(__file__).resolve().parents[1] / "hls_ref" / "include" / "specdec_regs.h"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


def header_array(name: str) -> list[int]:
    """The values of the ``static const`` array ``name`` in the generated header."""
    m = re.search(rf"^static const \w+ {name}\[\w+\] = \{{([^}}]*)\}};", HEADER.read_text(), flags=re.M)
    assert m, f"{name} not in {HEADER}"
    return [int(v) for v in m.group(1).replace(",", " ").split()]


# ------------------------------------------------------------------------------------------------
# params
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("core_name, name, bad, allowed", [
    ("verifier", "LANES", 3, "{1, 2, 4, 8}"),
    ("verifier", "VOCAB_MAX", 65537, "1..65536"),
    ("verifier", "GAMMA_MAX", 0, "1..16"),
    ("treemask", "NODES_MAX", 65, "1..64"),
    ("kvpage", "PAGES", 100, "{16, 32, 64, 128, 256, 512, 1024}"),
    ("kvpage", "MAX_BLOCKS", 2048, "{4, 8, 16, 32, 64, 128, 256, 512, 1024}"),
    ("draftengine", "WDEPTH", 100, "256..65536 in steps of 256"),       # a step range: not its 256 values
])
def test_check_names_the_bad_value_and_the_allowed_set(core_name, name, bad, allowed):
    with pytest.raises(ValueError) as exc:
        params.check(core_name, {name: bad})
    msg = str(exc.value)
    assert f"{name}={bad}" in msg and allowed in msg and repr(core_name) in msg, msg


def test_check_refuses_non_integers_and_unknown_names():
    with pytest.raises(ValueError, match=r"LANES='four'.* not an integer"):
        params.check("verifier", {"LANES": "four"})
    with pytest.raises(ValueError, match=r"LANES=2\.5.* not an integer"):
        params.check("verifier", {"LANES": 2.5})
    with pytest.raises(KeyError, match=r"no parameter 'LANE'.*'GAMMA_MAX', 'LANES', 'TREE_MAX', 'VOCAB_MAX'"):
        params.check("verifier", {"LANE": 4})
    with pytest.raises(KeyError, match=r"unknown core 'verifyer'.*'kvpage', 'rng', 'treemask', 'verifier'"):
        params.check("verifyer")


def test_register_fields_take_integers_only():
    """A field value is an integer of any kind (bool, numpy); ``int()`` had truncated 1.5 into a valid value."""
    config = core("verifier").reg("CONFIG")
    assert config.encode(GREEDY=True, TREE=np.uint8(1)) == config.encode(GREEDY=1, TREE=1)
    with pytest.raises(ValueError, match=re.escape("CONFIG.GREEDY must be an integer, got 0.5")):
        config.encode(GREEDY=0.5)
    with pytest.raises(ValueError, match="field P0: value 256 outside 0..255"):
        core("verifier").reg("TREE_PARENT0").encode(P0=256)


def test_check_fills_defaults_and_parses_cli_strings():
    got = params.check("kvpage", {"PAGES": "0x400"})
    spec = params.spec("kvpage")
    assert got == {"PAGES": 1024, "MAX_BLOCKS": spec["MAX_BLOCKS"].default, "SLOTS": spec["SLOTS"].default}
    assert params.check("system") == {p: v.default for p, v in params.spec("system").items()}
    assert set(params.spec("system")) == {p.name for c in params.SYSTEMS["system"] for p in params.CORES[c]}


# ------------------------------------------------------------------------------------------------
# formats
# ------------------------------------------------------------------------------------------------

def test_inv_temp_round_trips():
    """Every INV_TEMP value maps to a temperature that maps back to it; 0 and the bounds raise."""
    for v in (1, 2, 3, 100, 255, 256, 257, 1000, 4095, 65534, formats.INV_TEMP_MAX):
        t = (1 << formats.INV_TEMP_FRAC) / v
        assert formats.inv_temp(t) == v
    assert formats.inv_temp(1.0) == 1 << formats.INV_TEMP_FRAC and formats.inv_temp(0) == 0
    with pytest.raises(ValueError, match=r"temperature -1\.0 must be >= 0"):
        formats.inv_temp(-1.0)
    with pytest.raises(ValueError, match=f"> {formats.INV_TEMP_MAX}"):
        formats.inv_temp(1e-6)
    with pytest.raises(ValueError, match="too large"):
        formats.inv_temp(1e6)
    for bad in ("0.8", None, True):             # float('0.8') had taken a string; None and bools named nothing
        with pytest.raises(ValueError, match=f"temperature must be a real number, got {bad!r}"):
            formats.inv_temp(bad)
    assert formats.inv_temp(np.float32(0.5)) == 512 and formats.inv_temp(np.int64(1)) == 256     # numpy numbers


def test_integer_dtypes_are_numpy_integers_and_not_durations():
    """numpy files timedelta64 under ``np.integer``: token ids, codes and int8 values of that kind are refused."""
    assert all(formats.integer_dtype(t) for t in (np.int8, np.uint8, np.int16, np.int64, np.uint64))
    assert not any(formats.integer_dtype(t) for t in ("m8[s]", "M8[s]", bool, np.float32, object, "U3"))
    assert np.issubdtype(np.dtype("m8[s]"), np.integer)        # why the check is not issubdtype


def test_quantize_round_trips_codes():
    """Codes (the row's first max at 0, -inf as -32768) -> logits code / 256 -> the same codes."""
    rng = np.random.default_rng(7)
    codes = rng.integers(-formats.CODE_MAX, 0, size=(6, 50))
    codes[np.arange(6), rng.integers(50, size=6)] = 0
    codes[rng.random(codes.shape) < 0.1] = formats.LOGIT_NEG_INF
    codes[np.arange(6), np.argmax(codes, axis=1)] = 0           # one live maximum per row
    logits = np.where(codes == formats.LOGIT_NEG_INF, -np.inf, codes / (1 << formats.LOGIT_FRAC))
    back = formats.quantize(logits)
    assert back.dtype == np.int16 and (back == codes).all()
    shifted = formats.quantize(logits + 3.25)                   # the row max is subtracted first
    assert (shifted == codes).all()
    bad = logits.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"position \(1, 2\) is .*nan"):
        formats.quantize(bad)


def test_exp_tables_equal_the_header():
    assert header_array("SPECDEC_EH") == list(formats.EH_LIST) == formats.EH.tolist()
    assert header_array("SPECDEC_EL") == list(formats.EL_LIST) == formats.EL.tolist()
    assert len(formats.EH_LIST) == formats.EH_SIZE and len(formats.EL_LIST) == formats.EL_SIZE


@needs_gxx
def test_exp_tables_equal_the_compiled_cpp():
    from hls_ref import cpp
    eh, el = cpp.verifier_tables()
    assert eh.tolist() == list(formats.EH_LIST) and el.tolist() == list(formats.EL_LIST)
    d = np.arange(0, formats.EXP_LIMIT + 2, 37)
    assert [cpp.verifier_exp(int(x)) for x in d] == formats.exp_q15(d).tolist()


# ------------------------------------------------------------------------------------------------
# Register groups
# ------------------------------------------------------------------------------------------------

VERIFIER = core("verifier")


def test_golden_decision_follows_the_result_groups():
    """Decision: the RESULT group's fields in order, then ERR, the sampling beats, and the tree's path and
    node (TREE_RESULT's PATH_HI:PATH_LO and CUR_NODE)."""
    from hls_ref.verifier import Decision
    names = tuple(f.name for f in fields(Decision))
    result = VERIFIER.group("RESULT").fields
    assert names == result + ("err", "sample_beats", "path", "node", "rescales")
    assert VERIFIER.group("TREE_RESULT").registers == ("CUR_NODE", "PATH_LO", "PATH_HI")


def test_driver_result_follows_the_groups():
    from specdec.drivers import verifier as drv
    names = tuple(f.name for f in fields(drv.Result) if f.name != "draft")
    groups = VERIFIER.group("RESULT").fields + VERIFIER.group("COUNTERS").fields
    assert names == groups == tuple(drv._RESULTS)
    assert all(VERIFIER.reg(r).access == "ro" for r in drv._RESULTS.values())
    assert drv._RESULTS["cycles_stall"] == "CYCLES_STALL"


@needs_gxx
def test_cpp_verifier_layout_follows_the_groups():
    """The C++ result words are the groups: a known greedy round lands in the fields the group names."""
    from hls_ref import cpp
    from hls_ref import verifier as golden
    n = len(VERIFIER.group("RESULT").registers)
    assert cpp.VERIFIER_FIELDS[:n] == VERIFIER.group("RESULT").fields
    assert cpp.VERIFIER_TREE_FIELDS[len(cpp.VERIFIER_FIELDS):] == VERIFIER.group("TREE_RESULT").fields
    p = np.full((3, 8), -512, dtype=np.int16)
    p[0, 5], p[1, 2], p[2, 7] = 0, 0, 0                        # argmax 5, then 2 (draft says 3), then 7
    got = cpp.verifier_round(p, None, [5, 3], greedy=True, inv_temp=256, words=None, lanes=4)
    want = golden.verify(p, None, [5, 3], greedy=True, inv_temp=256, words=None, lanes=4)
    assert (got["n_accept"], got["next_token"], got["accept_bits"], got["rows"]) == (1, 2, 0b1, 2)
    assert got == {f: getattr(want, f) for f in cpp.VERIFIER_FIELDS}
    tree = cpp.verifier_tree_round(p, [0, 0, 1], [0, 5, 2], greedy=True, inv_temp=256, words=None, lanes=4)
    assert (tree["cur_node"], tree["path_lo"], tree["path_hi"], tree["n_accept"]) == (2, 0b110, 0, 2)


@needs_gxx
def test_cpp_treemask_and_kvpage_layouts_follow_the_groups():
    from hls_ref import cpp
    from hls_ref import kvpage as kv
    tm = core("treemask").group("RESULT")
    assert cpp.TREEMASK_FIELDS[:len(tm.registers)] == tm.fields == ("rows", "max_depth")
    _, res = cpp.treemask_words([0, 0, 1, 2])
    assert (res["rows"], res["max_depth"], res["err"]) == (4, 3, 0)
    km = core("kvpage")
    assert cpp.KVPAGE_RES_REGS == km.group("RESULT").registers
    assert cpp.KVPAGE_STATUS_REGS == km.group("STATE").registers
    assert tuple(kv.status_regs(kv.KVState.empty())) == km.group("STATE").registers
    with cpp.KvpageCpp(pages=16, max_blocks=4) as c:
        err, _, regs, state = c.op(kv.Op("NEW"))
        assert err == 0 and regs == {"RES_SLOT": 0} and tuple(c.registers) == km.group("RESULT").registers
        assert tuple(state) == km.group("STATE").registers and state["SEQS_LO"] == 1 and state["FREE_PAGES"] == 16


def test_kvpage_golden_results_are_result_registers():
    from hls_ref import kvpage as kv
    st = kv.KVState.empty(16, 4)
    written: set[str] = set()
    for op in (kv.Op("NEW"), kv.Op("WRITE", slot=0, row=0), kv.Op("FORK", slot=0), kv.Op("REFS", page=0),
               kv.Op("INFO", slot=1), kv.Op("TRANSLATE", slot=1, row=0)):
        st, res = kv.step(st, op)
        assert res.err == 0, op
        written |= set(res.regs)
    assert written <= set(core("kvpage").group("RESULT").registers)
    assert {"RES_SLOT", "RES_PAGE", "RES_REFS", "RES_INFO"} <= written


@needs_gxx
def test_cpp_params_use_the_contract():
    """The C++ entries refuse what hwcontract.params refuses, with its message."""
    from hls_ref import cpp
    p = np.zeros((1, 4), dtype=np.int16)
    with pytest.raises(ValueError, match=r"LANES=3 .*\{1, 2, 4, 8\}"):
        cpp.verifier_round(p, None, [], greedy=True, inv_temp=256, words=None, lanes=3)
    with pytest.raises(ValueError, match=r"TREE_MAX=65 .*1\.\.64"):
        cpp.verifier_tree_round(p, [0], [0], greedy=True, inv_temp=256, words=None, lanes=4, tree_max=65)
    with pytest.raises(ValueError, match=r"PAGES=48 .*\{16, 32"):
        cpp.KvpageCpp(pages=48)
