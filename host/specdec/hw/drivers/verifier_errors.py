"""What the verifier driver refuses, and how it says so.

* :func:`check_logits` validates a round's rows on the host, before anything reaches the core, naming the
  argument, the index, the value and the row (p_i the target's, q_i the draft's, or a tree node's).
* :class:`VerifierError` is the :class:`~specdec.errors.CoreError` of a refused round: besides the decoded
  ERR bits it names the input the core refused (:func:`reason`: the draft tokens not below VOCAB and their
  positions, the row that was empty, ...) and keeps the result registers as the error left them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from hwcontract.formats import INV_TEMP_MAX, integer_dtype
from hwcontract.regmap import core
from ...errors import CoreError

_ERR = core("verifier").reg("ERR")
_STREAM_BITS = ("SHORT_ROW", "LONG_ROW", "UNEXPECTED_DATA")


class VerifierError(CoreError):
    """The verifier refused a round.

    Attributes
    ----------
    bits, err : list of str, int
        The decoded ERR bits and the raw value (as :class:`~specdec.errors.CoreError`).
    reason : str
        The input the core refused, in words.
    registers : dict
        The result registers (``RESULT`` group, and ``TREE_RESULT`` in tree mode) as the error left them.
    reset : bool
        True: the driver soft-reset the core after the error (configuration and RNG state survive), so it
        takes the next round at once. False: the core was already in error before the round; nothing was
        written, and :meth:`~specdec.hw.drivers.base.SpecdecIP.soft_reset` recovers it.
    """

    def __init__(self, err: int, bits: list[str], reason: str, registers: dict[str, int],
                 reset: bool = True) -> None:
        CoreError.__init__(self, "verifier", err, bits)
        self.reason, self.registers, self.reset = reason, registers, reset
        tail = ("the core was soft-reset (its configuration and RNG state are kept)" if reset
                else "call soft_reset() to recover")
        self.args = (f"verifier refused the round, ERR={err:#x} {', '.join(bits) or 'unknown bits'}: {reason}; "
                     f"{tail}",)


def target_row(i: int) -> str:
    """Chain mode's target row i, for messages."""
    return f"p_{i} (the target's row at position {i})"


def draft_row(i: int) -> str:
    """Chain mode's draft row i, for messages."""
    return f"q_{i} (the draft's row at position {i})"


def node_row(i: int) -> str:
    """Tree mode's row of node i, for messages."""
    return f"the target's row at tree node {i}"


def check_logits(a: np.ndarray, name: str, row: Callable[[int], str]) -> None:
    """Validate a 2-D block of logit rows before anything reaches the core.

    Parameters
    ----------
    a : ndarray, shape (rows, V)
        Float logits (-inf = masked) or integer Q7.8 codes.
    name : str
        The argument's name (``p_logits``), for the message.
    row : callable
        ``row(i)`` names row i (:func:`target_row`, :func:`draft_row`, :func:`node_row`).

    Raises
    ------
    ValueError
        NaN or +inf in float logits, an integer code outside int16, or another dtype; the message names the
        argument, the index, the value and the row.
    """
    if np.issubdtype(a.dtype, np.floating):
        bad = np.isnan(a) | np.isposinf(a)
        if bad.any():
            i, j = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"{name}[{i}, {j}] is {float(a[i, j])!r} in {row(i)}: NaN or +inf logits cannot be "
                             "quantized")
    elif integer_dtype(a.dtype):
        if a.dtype != np.int16 and a.size:
            bad = (a < -(1 << 15)) | (a >= 1 << 15)
            if bad.any():
                i, j = (int(x) for x in np.argwhere(bad)[0])
                raise ValueError(f"{name}[{i}, {j}] = {int(a[i, j])} in {row(i)}: integer logit codes must fit "
                                 "int16 (-32768..32767)")
    else:
        raise ValueError(f"{name} must be float logits (quantized here) or integer Q7.8 codes, got dtype {a.dtype}")


@dataclass(frozen=True)
class RoundInputs:
    """What the driver wrote for one round: enough to name the input behind each error bit.

    ``draft`` in chain mode; ``parents`` and ``tokens`` (node 0 the root) in tree mode. ``limits`` holds the
    core's ``LANES``, ``GAMMA_MAX``, ``VOCAB_MAX`` and ``TREE_MAX``.
    """

    vocab: int
    greedy: bool
    temperature: float
    inv_temp: int | None
    limits: dict[str, int]
    draft: tuple[int, ...] = ()
    parents: tuple[int, ...] | None = None
    tokens: tuple[int, ...] = ()

    @property
    def tree(self) -> bool:
        return self.parents is not None


def reason(bits: list[str], regs: dict[str, int], r: RoundInputs) -> str:
    """The inputs behind the error ``bits`` of round ``r``, in words (``regs``: the result registers)."""
    return "; ".join(_bit_reason(bit, regs, r) for bit in bits) or "no error bit decoded"


def _bit_reason(bit: str, regs: dict[str, int], r: RoundInputs) -> str:
    lim = r.limits
    if bit == "BAD_GAMMA":
        return f"{len(r.draft)} draft tokens exceed the core's GAMMA_MAX = {lim['GAMMA_MAX']}"
    if bit == "BAD_VOCAB":
        return f"rows of V = {r.vocab} logits exceed the core's VOCAB_MAX = {lim['VOCAB_MAX']}"
    if bit == "BAD_TOKEN":
        return _bad_tokens(r)
    if bit == "BAD_TEMP":
        return (f"temperature {r.temperature!r} gives INV_TEMP = {r.inv_temp}, outside 1..{INV_TEMP_MAX} in "
                "sampling mode (temperature 0 means greedy: pass greedy=True)")
    if bit == "BAD_TREE":
        return _bad_tree(r)
    if bit == "EMPTY_ROW":
        return _empty_row(regs, r)
    if bit in _STREAM_BITS:
        nb = -(-r.vocab // lim["LANES"])
        return (f"{bit}: the row stream broke the protocol (each row is ceil(V / LANES) = {nb} beats, TLAST on "
                "the last): a stream or DMA fault")
    return _ERR.field(bit).doc


def _bad_tokens(r: RoundInputs) -> str:
    if r.tree:
        noun, where = "token", "tree node"
        bad = [(i, x) for i, x in enumerate(r.tokens) if i and x >= r.vocab]
    else:
        noun, where = "draft token", "position"
        bad = [(i, x) for i, x in enumerate(r.draft) if x >= r.vocab]
    many = len(bad) > 1
    listed = ", ".join(f"{x} at {where} {i}" for i, x in bad)
    return (f"{noun}{'s' if many else ''} {listed} {'are' if many else 'is'} not below VOCAB = {r.vocab} "
            f"(token ids 0..{r.vocab - 1})")


def _bad_tree(r: RoundInputs) -> str:
    n, tree_max = len(r.parents), r.limits["TREE_MAX"]
    if not 1 <= n <= tree_max:
        return f"a tree of {n} nodes is outside the core's 1..TREE_MAX = {tree_max}"
    bad = [f"node {i} has parent {p}" for i, p in enumerate(r.parents) if i and p >= i]
    return f"{', '.join(bad)} (each node's parent must be below it)"


def _empty_row(regs: dict[str, int], r: RoundInputs) -> str:
    if r.tree:
        node = regs.get("CUR_NODE", 0)
        left = "" if r.greedy else ", or all of it on the rejected children"
        return f"{node_row(node)} leaves nothing to sample from (every logit -inf{left})"
    k = regs.get("ROWS", 0) - 1                 # the row the core stopped at, in streaming order
    i, which = (k, 0) if r.greedy else divmod(k, 2)
    return f"{(draft_row if which else target_row)(i)} has every logit -inf: no distribution to sample from"
