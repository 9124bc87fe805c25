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

from hwcontract import formats, params, regmap
from hwcontract.regmap import core
from specdec.hw.drivers import verifier

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
    # numpy floats and bools: int() had taken np.float32(4.5) as LANES 4 and True as 1
    for bad in (np.float32(4.5), np.float16(2.5), True, np.bool_(True)):
        with pytest.raises(ValueError, match=r"LANES=.* not an integer"):
            params.check("verifier", {"LANES": bad})
    assert params.check("verifier", {"LANES": np.float64(4.0)})["LANES"] == 4
    with pytest.raises(KeyError, match=r"no parameter 'LANE'.*'GAMMA_MAX', 'LANES', 'ROW_URAM', 'TREE_MAX', 'VOCAB_MAX'"):
        params.check("verifier", {"LANE": 4})
    with pytest.raises(KeyError, match=r"unknown core 'verifyer'.*'kvpage', 'rng', 'treeattn', 'treemask', 'vecunit', 'verifier'"):
        params.check("verifyer")


def test_register_fields_take_integers_only():
    """A field value is an integer of any kind (bool, numpy); ``int()`` had truncated 1.5 into a valid value."""
    config = core("verifier").reg("CONFIG")
    assert config.encode(GREEDY=True, TREE=np.uint8(1)) == config.encode(GREEDY=1, TREE=1)
    with pytest.raises(ValueError, match=re.escape("CONFIG.GREEDY must be an integer, got 0.5")):
        config.encode(GREEDY=0.5)
    with pytest.raises(ValueError, match=re.escape("RES_SLOT must be an integer, got the bool True")):
        regmap.integer(True, "RES_SLOT")                 # a bool is a field's flag, never a slot, row or count
    # a generator's bools: the check read the iterable a second time, found it spent, and passed True as 1
    for bools in ((v for v in (3, True)), np.array([1, 0], dtype=bool), [np.bool_(False)]):
        with pytest.raises(ValueError, match="tokens must be integers, got bools"):
            regmap.integers(bools, "tokens")
    assert regmap.integers((v for v in np.arange(3)), "tokens") == [0, 1, 2]
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
    # a subnormal T (256/T overflows float) and an int past float's range had raised OverflowError
    for bad, what in ((5e-324, "too small"), (1e-310, "too small"), (10 ** 400, "too large")):
        with pytest.raises(ValueError, match=what):
            formats.inv_temp(bad)


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
    names = tuple(f.name for f in fields(verifier.Result) if f.name != "draft")
    groups = VERIFIER.group("RESULT").fields + VERIFIER.group("COUNTERS").fields
    assert names == groups == tuple(verifier._RESULTS)
    assert all(VERIFIER.reg(r).access == "ro" for r in verifier._RESULTS.values())
    assert verifier._RESULTS["cycles_stall"] == "CYCLES_STALL"


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


# ------------------------------------------------------------------------------------------------
# bad input: the golden models refuse what the C++ references refuse, with the same kind of error
# ------------------------------------------------------------------------------------------------

def _both(golden, cpp_fn):
    """The golden callable, and the C++ one where a compiler is there."""
    return [golden] + ([cpp_fn] if shutil.which("g++") else [])


@pytest.mark.parametrize("kw, message", [
    (dict(lanes=3), r"LANES=3 .*\{1, 2, 4, 8\}"),
    (dict(lanes=4, gamma_max=17), r"GAMMA_MAX=17 .*1\.\.16"),
    (dict(lanes=4, vocab_max=70000), r"VOCAB_MAX=70000 .*1\.\.65536"),
    (dict(lanes=4, words=[2 ** 32, 0]), r"RNG words: value 4294967296 outside 0\.\.4294967295"),
    (dict(lanes=4, words=[-1, 0]), r"RNG words: value -1 outside 0\.\.4294967295"),
    (dict(lanes=4, words=[0.5, 0]), r"RNG words must be integers"),
    (dict(lanes=4, inv_temp=-1), r"inv_temp must be in 0\.\.2\*\*32-1.*got -1"),
    (dict(lanes=4, p=[[40000, 0], [0, 0]]), r"codes: value 40000 outside -32768\.\.32767"),
    (dict(lanes=4, p=[[0.5, 0], [0, 0]]), r"codes must be integers, got dtype float64"),
])
def test_verifier_faces_refuse_the_same_inputs(kw, message):
    """Before, the golden round ran all of these: LANES 3 and GAMMA_MAX 17 as builds no core has, the RNG word
    2**32 as 0 (the draft accepted), -1 as 0xFFFFFFFF, INV_TEMP -1 as BAD_TEMP, the code 40000 as itself."""
    from hls_ref import cpp
    from hls_ref import verifier as ver
    args = dict(p=np.zeros((2, 2), np.int16), q=np.zeros((1, 2), np.int16), draft=[1], greedy=False, inv_temp=256,
                words=[0, 0], lanes=4)
    args.update(kw)
    for fn in _both(ver.verify, cpp.verifier_round):
        with pytest.raises(ValueError, match=message):
            fn(**args)


def test_tree_faces_refuse_the_same_inputs():
    """TREE_MAX 100 had built an 80-node path wider than 64 bits, a missing row 0 was a KeyError or IndexError
    (the docstring promises MissingRow), NODES_MAX 65 a 65-bit mask row."""
    from hls_ref import cpp
    from hls_ref import treemask as tm
    from hls_ref import verifier as ver
    chain = list(range(-1, 79))
    rows = np.zeros((80, 4), np.int16)
    for fn in _both(ver.verify_tree, cpp.verifier_tree_round):
        with pytest.raises(ValueError, match=r"TREE_MAX=100 .*1\.\.64"):
            fn(rows, chain, [0] * 80, greedy=True, inv_temp=256, words=None, lanes=4, tree_max=100)
        with pytest.raises(ValueError, match="holds at most 64 nodes"):
            fn(rows, chain, [0] * 80, greedy=True, inv_temp=256, words=None, lanes=4)
    for missing in ({1: np.zeros(4, np.int16)}, [], np.zeros((0, 4), np.int16)):
        with pytest.raises(ver.MissingRow, match="row p_0"):
            ver.verify_tree(missing, [0, 0], [0, 1], greedy=True, inv_temp=256, words=None, lanes=4)
    for fn in _both(tm.tree_mask, cpp.treemask_words):
        with pytest.raises(ValueError, match=r"NODES_MAX=65 .*1\.\.64"):
            fn([0] + list(range(64)), nodes_max=65)


@needs_gxx
def test_cpp_exp_refuses_a_negative_distance():
    """The C++ EXP returned 0 for -1, where the golden one raises."""
    from hls_ref import cpp
    for fn in (lambda d: formats.exp_q15(np.array([d])), cpp.verifier_exp):
        with pytest.raises(ValueError, match="EXP distance must be >= 0, got -1"):
            fn(-1)
    assert cpp.verifier_exp(1 << 40) == 0 == int(formats.exp_q15(np.array([1 << 40]))[0])


@pytest.mark.parametrize("kw, message", [
    (dict(code="WRITE", slot=0, row=-1), "row must fit 32 bits"),
    (dict(code="TRANSLATE", slot=0, row=-1), "row must fit 32 bits"),
    (dict(code="INFO", slot=2 ** 32), "slot must fit 32 bits"),
    (dict(code="REFS", page=-3), "page must fit 32 bits"),
    (dict(code="ROLLBACK", mask=-1), "mask must fit 64 bits"),
    (dict(code="WRITE", slot=0, row=1.5), "row must be an integer"),
])
def test_kvpage_operands_fit_their_registers(kw, message):
    """An operand no register holds is refused; the golden model had run WRITE row -1 as a branch's copy on
    write on a sequence (corrupting its chain) and TRANSLATE row -1 as the last row."""
    from hls_ref import kvpage as kv
    with pytest.raises(ValueError, match=message):
        kv.Op(**kw)
    st, _ = kv.step(kv.KVState.empty(16, 4, 16), kv.Op("NEW"))
    assert kv.Op("WRITE", slot=np.int64(0), row=np.uint8(0)) == kv.Op("WRITE", slot=0, row=0)


def test_draftengine_values_are_checked_before_the_cast():
    """uint64 2**64-1 had become -1 (and passed), 2**63 had been named as -9223372036854775808."""
    from hls_ref import draftengine as de
    ones = np.ones((1, 4), np.int8)
    for x, shown in ((np.array([[2 ** 64 - 1, 0, 0, 0]], np.uint64), 2 ** 64 - 1),
                     (np.array([[2 ** 63, 0, 0, 0]], np.uint64), 2 ** 63)):
        with pytest.raises(ValueError, match=f"activations: value {shown} outside -128..127"):
            de.run(de.Job(x, ones, np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.int64), 32))
    with pytest.raises(ValueError, match=f"bias: value {2 ** 64 - 1} outside"):
        de.run(de.Job(ones, ones, np.array([2 ** 64 - 1], np.uint64), np.ones(1, np.int64), np.zeros(1, np.int64), 32))


def test_draftengine_packers_refuse_values_their_fields_cannot_hold():
    """MULT 70000 had spilled into SHIFT, SHIFT 100 had become 36, a weight of 200 had become -56."""
    with pytest.raises(ValueError, match="mult: value 70000 outside 0..65535"):
        formats.de_param_beats([0], [70000], [0], 4, 8)
    with pytest.raises(ValueError, match="shift: value 100 outside 0..63"):
        formats.de_param_beats([0], [1], [100], 4, 8)
    with pytest.raises(ValueError, match="weights: value 200 outside -128..127"):
        formats.de_weight_beats(np.array([[200]]), 4, 8)
    with pytest.raises(ValueError, match="activations must be integers"):
        formats.de_act_beats(np.array([[0.5]]), 4, 8)
    with pytest.raises(ValueError, match=r"at or below 2\*\*-49"):
        formats.de_multiplier(2.0 ** -49)


def test_rng_seed_words_are_integers_that_fit():
    """A seed past 64 bits had raised OverflowError, -1 was shown as 0xffffffffffffffff, 1.7 was taken as 1."""
    from hls_ref.rng import check_seed
    with pytest.raises(ValueError, match="seed words: value 18446744073709551616 outside 0..4294967295"):
        check_seed([2 ** 64, 0, 0, 1])
    with pytest.raises(ValueError, match="seed words: value -1 outside 0..4294967295"):
        check_seed([-1, 0, 0, 1])
    with pytest.raises(ValueError, match="must be integers"):
        check_seed([1.7, 0, 0, 1])
    assert check_seed(np.array([1, 2, 3, 4], np.int64)).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("param, message", [
    ("LANES", "expected KEY=VALUE"),
    ("LANES=3", r"LANES=3 of core 'verifier' not in \{1, 2, 4, 8\}"),
    ("FOO=1", "no parameter 'FOO'"),
])
def test_convert_cli_names_a_bad_parameter(param, message, capsys, tmp_path):
    """A usage error (exit 2) naming the parameter; before, ``LANES`` gave "dictionary update sequence element"
    and every bad value a traceback (exit 1)."""
    from fpga import convert
    with pytest.raises(SystemExit) as stop:
        convert.main(["--core", "verifier", "--out-dir", str(tmp_path), param])
    assert stop.value.code == 2
    assert re.search(message, capsys.readouterr().err)
