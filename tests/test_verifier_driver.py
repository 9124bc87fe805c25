"""verifier driver: the shared checks on the golden model, through a fake DMA, and on the RTL simulation."""
from __future__ import annotations

import numpy as np
import pytest

from hwcontract import formats as fmt
from specdec import errors
from specdec.errors import BusError, CoreTimeout
from specdec.hw.drivers.base import description
from specdec.hw.drivers.verifier import Verifier
from specdec.hw.golden import GoldenDevice
from specdec.hw.streams import DmaStream
from hwcontract.formats import LOGIT_NEG_INF
from specdec.sim import harness
from tb.verifier.driver_checks import Checker, check_verifier_driver


def golden_verifier(lanes: int = 4, vocab_max: int = 64, gamma_max: int = 16) -> tuple[Verifier, GoldenDevice]:
    dev = GoldenDevice({0: "verifier"}, params={0: {"lanes": lanes, "vocab_max": vocab_max, "gamma_max": gamma_max}})
    return Verifier(description("verifier", dev), dev.stream(0)), dev


@pytest.mark.parametrize("lanes, vocab_max, gamma_max", [(4, 64, 16), (1, 37, 5), (8, 45, 3)])
def test_driver_on_golden_model(lanes, vocab_max, gamma_max):
    drv, _ = golden_verifier(lanes, vocab_max, gamma_max)
    assert (drv.lanes, drv.vocab_max, drv.gamma_max) == (lanes, vocab_max, gamma_max)
    kinds = check_verifier_driver(drv, exact_cycles=True)
    assert sum(kinds.values()) >= 30


class FakeDma:
    """An AXI DMA whose MM2S channel forwards each transfer to a golden model's stream."""

    def __init__(self, stream) -> None:
        self.sendchannel = self
        self.stream, self.sent, self.idle, self.error = stream, [], True, False

    def transfer(self, array, start: int = 0, nbytes: int = 0) -> None:
        self.sent.append(array)
        self.stream.send(array)

    def wait(self) -> None:
        pass


def test_driver_through_fake_dma():
    dev = GoldenDevice({0: "verifier"}, params={0: {"lanes": 4, "vocab_max": 64}})
    dma = FakeDma(dev.stream(0))
    allocated = []

    def allocate(shape, dtype):
        allocated.append(np.zeros(shape, dtype=dtype))
        return allocated[-1]

    stream = DmaStream(dma, allocator=allocate)
    drv = Verifier(description("verifier", dev), stream)
    buf = allocated[0]
    assert buf.shape[0] == 2 * drv.gamma_max + 1 and buf.shape[1] >= 64 and buf.strides[0] % 64 == 0
    check_verifier_driver(drv, rounds=20, exact_cycles=True)
    # every row of a round went out of the allocated buffer as a view (no copy); raw rows via a scratch
    rows = [a for a in dma.sent if np.shares_memory(a, buf)]
    assert len(rows) > 100 and all(a.flags.c_contiguous and a.base is not None for a in rows)
    assert all(a.ndim == 1 for a in allocated[1:])  # after the row buffer: scratch rows for the raw sends
    # the round's rows sit in the buffer: p_i in row 2i, padded with -inf past V
    p = np.random.default_rng(3).normal(size=(2, 10))
    drv.verify([int(p[0].argmax())], p, p[:1].copy())
    assert np.array_equal(buf[0, :10], fmt.quantize(p[0])) and (buf[0, 10:12] == LOGIT_NEG_INF).all()
    assert np.array_equal(dma.sent[-1], buf[2, :12])


class HangingDma(FakeDma):
    """A DMA whose MM2S channel never goes idle again from its transfer number ``hang_at`` (from 0) on."""

    def __init__(self, stream, hang_at: int) -> None:
        super().__init__(stream)
        self.hang_at = hang_at

    def transfer(self, array, start: int = 0, nbytes: int = 0) -> None:
        if len(self.sent) >= self.hang_at:
            self.sent.append(array)
            self.idle = False
            return
        super().transfer(array)


def test_timeouts_inside_a_round_leave_the_core_idle():
    """A DMA that hangs on a round's second row, and a core that does not answer within the poll budget: each
    raises CoreTimeout, leaves the core idle (soft-reset), and the next round is decided from its own rows."""
    dev = GoldenDevice({0: "verifier"}, params={0: {"lanes": 4, "vocab_max": 64}})
    dma = HangingDma(dev.stream(0), hang_at=1)
    drv = Verifier(description("verifier", dev), DmaStream(dma, allocator=np.zeros, poll_limit=5))
    c = Checker(drv, exact_cycles=True)
    p = np.random.default_rng(4).normal(size=(3, 20))
    draft = [int(p[0].argmax()), int(p[1].argmax())]      # greedy: p_0 accepted, so p_1 is sent
    with pytest.raises(CoreTimeout, match="DMA send"):
        drv.verify(draft, p, greedy=True)
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0} and drv.read_reg("ERR") == 0
    dma.hang_at, dma.idle = 1 << 30, True
    c.round(draft, p, greedy=True)
    drv.poll_limit = 0                                    # position 0 is never seen decided
    with pytest.raises(CoreTimeout, match="position 0"):
        drv.verify(draft, p, greedy=True)
    assert drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0} and drv.read_reg("ERR") == 0
    drv.poll_limit = Verifier.poll_limit
    c.round(draft, p, greedy=True)
    c.round(draft, p, p[:2].copy(), temperature=0.7)


@pytest.mark.parametrize("notes", [True, False], ids=["python3.11", "python3.10"])
def test_a_failed_soft_reset_after_a_round_error_is_noted_on_that_error(monkeypatch, notes):
    """The round's own error reaches the caller, with a note that its soft reset failed too and what to call
    (on Python 3.10, the PYNQ-Z2 image's, in its message: ``error.add_note`` had raised AttributeError there)."""
    monkeypatch.setattr(errors, "NOTES", notes)
    dev = GoldenDevice({0: "verifier"}, params={0: {"lanes": 4, "vocab_max": 64}})
    drv = Verifier(description("verifier", dev),
                   DmaStream(HangingDma(dev.stream(0), hang_at=1), allocator=np.zeros, poll_limit=5))

    def bus_gone():
        raise BusError("write", 0, 2)
    monkeypatch.setattr(drv, "soft_reset", bus_gone)
    p = np.random.default_rng(4).normal(size=(3, 20))
    with pytest.raises(CoreTimeout, match="DMA send") as exc:
        drv.verify([int(p[0].argmax()), int(p[1].argmax())], p, greedy=True)
    (note,) = exc.value.__notes__
    assert "soft reset after this error failed too" in note and "SLVERR" in note and "soft_reset()" in note
    assert (note in str(exc.value)) == (not notes)


def test_full_vocabulary_round_on_golden():
    """One GPT-2-sized round (V = 50257, 4 lanes, the board's VOCAB_MAX 50272)."""
    drv, _ = golden_verifier(4, 50272, 16)
    c = Checker(drv, exact_cycles=True)
    rnd = np.random.default_rng(11)
    v, g = 50257, 4
    p = rnd.normal(0, 3.0, (g + 1, v))
    p[:, rnd.random(v) < 0.9] = -np.inf         # top-p style masking
    q = p[:g] + rnd.normal(0, 0.3, (g, v))
    draft = [int(q[i].argmax()) for i in range(g)]
    res = c.round(draft, p, q, temperature=0.8)
    assert res.rows >= 3


def test_sampling_before_seed_is_refused_before_the_core():
    """An unseeded RNG is all zero (u = 0: every draft token accepted, every resample token 0): the driver
    refuses a sampling round until seed(), chain and tree alike; greedy rounds need no seed."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.random.default_rng(3).normal(0, 1, (3, 40))
    with pytest.raises(ValueError, match="seed"):
        drv.verify([1, 2], p, p[:2], temperature=1.0)
    with pytest.raises(ValueError, match="seed"):
        drv.verify_tree([0, 0], [1, 2], p, temperature=1.0)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]    # nothing reached the core
    assert len(drv.verify([1, 2], p, greedy=True).tokens) >= 1
    drv.seed([1, 2, 3, 4])
    assert len(drv.verify([1, 2], p, p[:2], temperature=1.0).tokens) >= 1


def test_greedy_takes_a_bool_only():
    """``greedy="0"`` had been greedy on the host (a non-empty string), sampling in CONFIG: an unseeded tree round
    accepted a draft token the target does not want, a chain round waited for q rows until it timed out."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.zeros((2, 8))
    p[0, 5] = p[1, 7] = 6.0
    for bad in ("0", "yes", 2, None):
        with pytest.raises(ValueError, match=f"greedy must be a bool, got {bad!r}"):
            drv.verify_tree([-1, 0], [0, 3], p, greedy=bad)
        with pytest.raises(ValueError, match=f"greedy must be a bool, got {bad!r}"):
            drv.verify([3], p, greedy=bad)
    assert drv.read_reg("ROWS") == 0
    assert list(drv.verify_tree([-1, 0], [0, 3], p, greedy=np.bool_(True)).tokens) == [5]
    assert list(drv.verify([3], p, greedy=1).tokens) == [5]
    with pytest.raises(ValueError, match=r"draft tokens must be a flat sequence, got the nested entry \[3\] at "
                                         r"position 0"):
        drv.verify([[3]], p, greedy=True)
    # the root's parent and token are ignored, None included (as the treemask driver's masks() takes it)
    assert list(drv.verify_tree([None, 0], [None, 3], p, greedy=True).tokens) == [5]


def test_non_integer_tree_parents_or_tokens_are_refused_before_the_core():
    """0.5 names no node and 2.0 is no token id: refused, not truncated (as a chain's draft tokens are). A bool
    is neither: True had been read as node 1 and as token 1 (numpy makes [0, 0, True] an int64 array)."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.random.default_rng(4).normal(0, 1, (3, 40))
    with pytest.raises(ValueError, match=r"tree parents must be integers: node 1's is 0.5, in \[-1, 0.5, 0\]"):
        drv.verify_tree([-1, 0.5, 0], [1, 2, 3], p, greedy=True)
    with pytest.raises(ValueError, match=r"tree tokens must be integers: node 1's is 2.0"):
        drv.verify_tree([-1, 0, 0], [1, 2.0, 3], p, greedy=True)
    with pytest.raises(ValueError, match=r"tree parents must be integers, got float64: \[-1.0, 0.5, 0.0\]"):
        drv.verify_tree(np.array([-1, 0.5, 0]), [1, 2, 3], p, greedy=True)
    with pytest.raises(ValueError, match=r"tree parents must be integers: node 2's is True"):
        drv.verify_tree([-1, 0, True], [1, 2, 3], p, greedy=True)
    with pytest.raises(ValueError, match=r"tree tokens must be integers, got bool"):
        drv.verify_tree([-1, 0, 0], np.array([1, 0, 1], bool), p, greedy=True)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]    # nothing reached the core
    assert drv.verify_tree(np.array([-1, 0, 0]), np.array([1, 2, 3], np.uint16), p, greedy=True).tokens


@pytest.mark.parametrize("parents, tokens, rows, words", [
    ([[-1, 0, 0]], [1, 2, 3], 3, r"tree parents must be a flat sequence, got the nested entry \[-1, 0, 0\] at node 0"),
    ([-1, 0, 0], [1, [2], 3], 3, r"tree tokens must be a flat sequence, got the nested entry \[2\] at node 1"),
    (np.array([[-1, 0, 0]]), [1, 2, 3], 3, r"tree parents must be a flat sequence, got an array of shape \(1, 3\)"),
    (5, [1], 1, r"tree parents must be a flat sequence of integers, got 5"),
    ({0: -1, 1: 0}, [1, 2], 2, r"tree parents must be a flat sequence of integers, got \{0: -1, 1: 0\}"),
    ([-1, 0, 0], [1, 2], 3, r"a tree needs one token per node: 3 parents, 2 tokens"),
    ([-1, 0, 256], [1, 2, 3], 3, r"tree parents must fit 8 bits \(0..255\): node 2's parent is 256"),
    ([-1, 0, 0], [1, 2, 1 << 16], 3, r"tree tokens must fit 16 bits \(0..65535\): node 2's token is 65536"),
    ([-1, 0, 0], [1, 2, 3], 2, r"p_logits must have shape \(N, V\) = \(3, V >= 1\) for a tree of N = 3 nodes, "
                               r"got \(2, 40\)"),
], ids=["nested parents", "nested token", "2-D array", "a number", "a dict", "lengths", "parent over 8 bits", "token over 16 bits", "rows"])
def test_malformed_trees_are_refused_before_the_core(parents, tokens, rows, words):
    """Each malformed tree or row block is named before anything reaches the core, which then verifies the
    next good tree."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.random.default_rng(6).normal(0, 1, (3, 40))
    with pytest.raises(ValueError, match=words):
        drv.verify_tree(parents, tokens, p[:rows], greedy=True)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]    # nothing reached the core
    assert drv.verify_tree([-1, 0, 0], [1, 2, 3], p, greedy=True).tokens


def test_ragged_logit_rows_are_refused_naming_them():
    """Rows of different lengths had raised numpy's "inhomogeneous shape" error, which names neither the
    argument nor the rows; chain and tree alike, before the core."""
    drv, _ = golden_verifier(4, 64, 16)
    drv.seed([1, 2, 3, 4])
    ragged = [[0.1, 0.2, 0.3], [0.4]]
    with pytest.raises(ValueError, match=r"p_logits must be rows of one length, got rows of lengths \[3, 1\]"):
        drv.verify([1], ragged, greedy=True)
    with pytest.raises(ValueError, match=r"q_logits must be rows of one length, got rows of lengths \[3, 1\]"):
        drv.verify([1, 2], np.zeros((3, 3)), ragged, temperature=1.0)
    with pytest.raises(ValueError, match=r"p_logits must be rows of one length, got rows of lengths \[3, 1\]"):
        drv.verify_tree([-1, 0], [0, 1], ragged, greedy=True)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]


def test_integer_codes_outside_int16_are_refused_naming_the_entry():
    """Rows given as integer logit codes must fit the 16-bit code: a wider one is named (row, column, value)
    rather than wrapped."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.zeros((2, 8), dtype=np.int32)
    p[1, 6] = 1 << 15
    with pytest.raises(ValueError, match=r"p_logits\[1, 6\] = 32768 in .*must fit int16 \(-32768..32767\)"):
        drv.verify([1], p, greedy=True)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]
    p[1, 6] = (1 << 15) - 1
    assert drv.verify([1], p, greedy=True).tokens


def test_durations_are_not_taken_as_logit_codes_or_token_ids():
    """numpy files timedelta64 under its integers: such logits were verified as codes and such draft tokens or
    tree nodes taken as ids. Refused before the core, naming the dtype."""
    drv, _ = golden_verifier(4, 64, 16)
    p = np.random.default_rng(5).normal(0, 1, (2, 8))
    with pytest.raises(ValueError, match="got dtype timedelta64"):
        drv.verify([1], np.zeros((2, 8), "m8[s]"), greedy=True)
    with pytest.raises(ValueError, match="draft tokens must be integers, got timedelta64"):
        drv.verify(np.array([1], "m8[s]"), p, greedy=True)
    with pytest.raises(ValueError, match="tree parents must be integers, got timedelta64"):
        drv.verify_tree(np.array([0, 0], "m8[s]"), [1, 2], p, greedy=True)
    assert drv.read_reg("ROWS") == 0 and not drv.read_fields("STATUS")["BUSY"]    # nothing reached the core


def test_quantize_out_matches_and_is_left_alone_on_error():
    x = np.random.default_rng(0).normal(0, 50, (3, 7))
    x[1, 2] = -np.inf
    out = np.zeros((5, 9), dtype=np.int16)
    fmt.quantize(x, out=out[1:4, :7])
    assert np.array_equal(out[1:4, :7], fmt.quantize(x)) and not out[0].any() and not out[:, 7:].any()
    x[2, 3] = np.nan
    before = out.copy()
    with pytest.raises(ValueError, match="nan"):
        fmt.quantize(x, out=out[1:4, :7])
    assert np.array_equal(out, before)


@pytest.mark.icarus(long=True)
def test_driver_on_rtl(sim, waves):
    harness.run("verifier", "tb.verifier.test_verifier_driver", sim, params={"LANES": 4, "VOCAB_MAX": 64},
                waves=waves)
