"""The C++ reference of the rng core (hls_ref/cpp/rng.cpp): the published algorithm, state chaining, the
zero seed, argument checks and the build (random seeds against the golden model: tests/test_agreement.py)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from hwcontract.regmap import core

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

from hls_ref import cpp  # noqa: E402
from hls_ref.rng import xoshiro128pp  # noqa: E402

SEED_ZERO = core("rng").reg("ERR").field("SEED_ZERO").mask


def test_runs_chain():
    """Two runs of n and m steps equal one run of n + m: the state written back is complete."""
    seed = (0x9E3779B9, 0x7F4A7C15, 0xF39CC060, 0x5CEDC834)
    a, s, _ = cpp.rng_run(seed, 37)
    b, s2, _ = cpp.rng_run(s, 63)
    whole, s_whole, _ = cpp.rng_run(seed, 100)
    np.testing.assert_array_equal(np.concatenate([a, b]), whole)
    np.testing.assert_array_equal(s2, s_whole)


def test_zero_steps_keeps_state():
    out, state, err = cpp.rng_run((5, 6, 7, 8), 0)
    assert err == 0 and out.shape == (0,)
    assert state.tolist() == [5, 6, 7, 8]


def test_all_zero_seed_raises_seed_zero():
    out, state, err = cpp.rng_run((0, 0, 0, 0), 16)
    assert err == SEED_ZERO
    assert core("rng").decode_err(err) == ["SEED_ZERO"]
    assert not out.any() and not state.any()


def test_seed_1234_matches_published_algorithm():
    """The C++ reference, the golden model on one seed (Python integers) and on a batch of seeds (numpy
    arrays, a separate implementation) give the same words and state, starting with the published
    generator's first outputs."""
    out, state, err = cpp.rng_run((1, 2, 3, 4), 64)
    assert err == 0
    assert out.tolist()[:3] == [641, 1573767, 3222811527]
    golden, golden_state = xoshiro128pp((1, 2, 3, 4), 64)
    batch, batch_state = xoshiro128pp(np.array([[1, 2, 3, 4]], dtype=np.uint32), 64)
    for words, end in ((golden, golden_state), (batch[0], batch_state[0])):
        assert words.tolist() == out.tolist() and end.tolist() == state.tolist()


def test_xor_register_value():
    seed = (11, 22, 33, 44)
    out, state, acc, err = cpp.rng_run_xor(seed, 500)
    assert err == 0
    assert acc == int(np.bitwise_xor.reduce(out))
    np.testing.assert_array_equal(out, cpp.rng_run(seed, 500)[0])


def test_library_compiled_against_current_map():
    assert cpp.rng_id_hash() == core("rng").map_hash()


@pytest.mark.parametrize("state", [(1, 2, 3), (1, 2, 3, 1 << 32), (-1, 0, 0, 0)])
def test_bad_state_rejected(state):
    with pytest.raises(ValueError):
        cpp.rng_run(state, 1)


def test_a_step_count_that_is_no_integer_is_named():
    """int() had run 2.5 steps as 2 and True as 1: the C++ reference takes counts as the golden model does."""
    for n, what in ((2.5, "n must be an integer, got 2.5"), (True, "n must be an integer, got the bool True")):
        with pytest.raises(ValueError, match=what):
            cpp.rng_run((1, 2, 3, 4), n)
        with pytest.raises(ValueError, match=what):
            cpp.rng_run_xor((1, 2, 3, 4), n)
    with pytest.raises(ValueError, match="EXP distance must be an integer, got 1.5"):
        cpp.verifier_exp(1.5)


def test_build_is_cached_and_keyed_on_sources(tmp_path, monkeypatch):
    lib = cpp.build("rng", tmp_path)
    assert lib.name == f"librng-{cpp.digest('rng')}.so" and len(cpp.digest("rng")) == 12
    mtime = lib.stat().st_mtime_ns
    assert cpp.build("rng", tmp_path) == lib and lib.stat().st_mtime_ns == mtime
    monkeypatch.setattr(cpp, "CXXFLAGS", cpp.CXXFLAGS + ("-DSPECDEC_TEST_FLAG=1",))
    assert cpp.library_path("rng", tmp_path) != lib


def test_compile_error_carries_compiler_output(tmp_path, monkeypatch):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "broken.cpp").write_text("int broken( { return 0; }\n")
    monkeypatch.setattr(cpp, "SRC_DIR", src_dir)
    with pytest.raises(cpp.CompileError, match=r"broken\.cpp") as exc:
        cpp.load("broken", tmp_path / "build")
    assert "error" in str(exc.value) and "g++" in str(exc.value)
    assert not list((tmp_path / "build").glob("*.so"))


def test_unknown_core_lists_available():
    with pytest.raises(FileNotFoundError, match="rng"):
        cpp.load("no_such_core")


def test_source_warning_free(tmp_path):
    """The reference builds cleanly under stricter warnings than the loader uses."""
    cmd = cpp.compile_command(cpp.source("rng"), tmp_path / "x.so") + ["-Wextra", "-pedantic", "-Werror"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
