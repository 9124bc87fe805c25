"""One source of truth for every core's registers and stream word formats.

This module has no dependencies beyond the standard library, so the MyHDL generator (``fpga``), the
pynq drivers (``specdec.hw.drivers``), the cocotb testbenches (``tb``), the C header (``hls_ref``) and the
Markdown register reference are all derived from it, on the build machine and on a PYNQ board alike.

Conventions shared by every core
--------------------------------
* 32-bit AXI4-Lite registers, word aligned, allocated densely from offset 0 by :class:`MapBuilder`.
* Offset 0 is ``ID``: a hash of the core's whole map (:meth:`CoreMap.map_hash`). A driver refuses
  hardware whose ID differs.
* ``CTRL`` (pulse), ``STATUS`` (ro) and ``ERR`` (ro) follow with the same common fields, so one driver base
  class decodes them for every core.
* Access kinds: ``ro`` (driven by the core; a write answers SLVERR), ``rw`` (storage with a reset value,
  byte strobes honoured; survives a soft reset), ``pulse`` (write-only strobe seen by the core for one
  cycle; reads as 0). An address outside the map answers DECERR.
* Register groups (:class:`RegisterGroup`) name ordered lists of a core's registers, e.g. ``RESULT``: the
  registers that hold one operation's outcome. The golden records, the drivers' results, the C++ result
  layouts and the testbenches' checks follow them. A group only names registers the map already holds, so
  it is not part of the hash.
"""
from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass
from typing import Iterable

import numpy as np

ACCESS_KINDS = ("ro", "rw", "pulse")
WORD_BYTES = 4
REG_BITS = 8 * WORD_BYTES     # every register's width

# AXI response codes (AXI4-Lite BRESP/RRESP).
RESP_OKAY = 0
RESP_SLVERR = 2
RESP_DECERR = 3


def integers(values, what: str) -> list[int]:
    """``values`` (any iterable) as a list of ints, each a Python or numpy integer; a float (even whole), a bool,
    a string or a nested sequence raises ValueError naming ``what`` and the values (``int()`` would have taken
    15496.7 as token 15496 and True as token 1)."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{what} must be integers, got text {values[:60]!r}")
    try:
        items = list(values)        # once: a generator read twice would pass its bools unseen
    except TypeError:
        raise ValueError(f"{what} must be integers, got {str(values)[:80]}") from None
    shown = str(items if iter(values) is values else values)[:80]     # an iterator shows what it gave
    if any(isinstance(v, (bool, np.bool_)) for v in items):
        raise ValueError(f"{what} must be integers, got bools: {shown}")
    try:
        return [operator.index(v) for v in items]
    except TypeError:
        raise ValueError(f"{what} must be integers, got {shown}") from None


def is_integer(x) -> bool:
    """``x`` is an integer of any kind (Python, numpy) and no bool: a slot, a row, a node, a token, a count."""
    if isinstance(x, (bool, np.bool_)):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def integer(value, what: str, *, bool_ok: bool = False) -> int:
    """``value`` as an int: a Python or numpy integer; anything else, a float even when whole, raises ValueError
    naming ``what`` and the value (``int()`` would truncate 1.5 into a real field value, slot or row). A bool is
    taken only where ``bool_ok`` says the value is a bit field's (``ENABLE=True``): as a slot, row, count or
    word it is a mistake that would silently read as 0 or 1."""
    if isinstance(value, (bool, np.bool_)) and not bool_ok:
        raise ValueError(f"{what} must be an integer, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


def flag(value, what: str) -> bool:
    """``value`` as a one-bit flag: a bool (Python or numpy) or the integer 0 or 1; anything else raises ValueError
    naming ``what`` and the value (the string "0" is truthy to Python and 0 to a register: a round the host would
    take as greedy and the core as sampling)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v not in (0, 1):
        raise ValueError(f"{what} must be a bool, got {value!r}")
    return bool(v)


@dataclass(frozen=True)
class Field:
    """A named bit field inside a register."""

    name: str
    lsb: int
    width: int
    doc: str
    values: tuple[tuple[str, int, str], ...] = ()   # named codes of an enumerated field: (name, value, doc)

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def code(self, name: str) -> int:
        """The value of the named code of an enumerated field."""
        for n, v, _ in self.values:
            if n == name:
                return v
        raise KeyError(f"field {self.name} has no code {name!r}; codes: {[n for n, _, _ in self.values]}")

    def extract(self, value: int) -> int:
        return (value >> self.lsb) & ((1 << self.width) - 1)

    def insert(self, word: int, value: int) -> int:
        limit = (1 << self.width) - 1
        if not 0 <= value <= limit:
            raise ValueError(f"field {self.name}: value {value} outside 0..{limit}")
        return (word & ~self.mask) | (value << self.lsb)


@dataclass(frozen=True)
class Register:
    """One 32-bit register of a core."""

    name: str
    offset: int
    access: str
    doc: str
    reset: int = 0
    fields: tuple[Field, ...] = ()

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; fields: {[f.name for f in self.fields]}")

    def decode(self, value: int) -> dict[str, int]:
        return {f.name: f.extract(value) for f in self.fields}

    def encode(self, **values: int) -> int:
        word = 0
        for name, v in values.items():
            word = self.field(name).insert(word, integer(v, f"{self.name}.{name}", bool_ok=True))
        return word


@dataclass(frozen=True)
class StreamField:
    """A field of a stream word, repeated ``count`` times (lanes) from ``lsb`` upwards."""

    name: str
    lsb: int
    width: int
    doc: str
    count: int = 1
    signed: bool = False


@dataclass(frozen=True)
class StreamFormat:
    """The word format of an AXI-Stream port of a core."""

    name: str
    direction: str  # "in" (to the core) or "out"
    width: int
    doc: str
    fields: tuple[StreamField, ...] = ()


@dataclass(frozen=True)
class RegisterGroup:
    """A named, ordered list of a core's registers, e.g. ``RESULT``: the outcome of one operation.

    Python records derived from a group name their fields after its registers in lower case
    (:attr:`fields`); the C header gives each register its index in the group.
    """

    name: str
    registers: tuple[str, ...]
    doc: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The registers' names in lower case: the field names of a record that holds the group."""
        return tuple(r.lower() for r in self.registers)


@dataclass(frozen=True)
class CoreMap:
    """Registers and streams of one core, with the hash that its ID register carries."""

    name: str
    doc: str
    registers: tuple[Register, ...]
    streams: tuple[StreamFormat, ...] = ()
    error_bits: tuple[Field, ...] = ()
    groups: tuple[RegisterGroup, ...] = ()   # named register lists; not hashed (they add no register)

    def __post_init__(self) -> None:
        names = [r.name for r in self.registers]
        if len(set(names)) != len(names):
            raise ValueError(f"core {self.name}: duplicate register names in {names}")
        for i, r in enumerate(self.registers):
            if r.offset != i * WORD_BYTES:
                raise ValueError(f"core {self.name}: register {r.name} at {r.offset:#x}, expected {i * WORD_BYTES:#x}")
        gnames = [g.name for g in self.groups]
        if len(set(gnames)) != len(gnames):
            raise ValueError(f"core {self.name}: duplicate group names in {gnames}")
        for g in self.groups:
            if not g.registers or len(set(g.registers)) != len(g.registers):
                raise ValueError(f"core {self.name}: group {g.name} must list distinct registers, got {g.registers}")
            unknown = [r for r in g.registers if r not in names]
            if unknown:
                raise ValueError(f"core {self.name}: group {g.name} names registers {unknown} not in the map")

    # -- lookup ---------------------------------------------------------------------------------
    def reg(self, name: str) -> Register:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"core {self.name} has no register {name!r}; registers: {[r.name for r in self.registers]}")

    def offset(self, name: str) -> int:
        return self.reg(name).offset

    def at(self, offset: int) -> Register | None:
        if offset % WORD_BYTES or not 0 <= offset < self.span:
            return None
        return self.registers[offset // WORD_BYTES]

    @property
    def span(self) -> int:
        """Bytes of address space the registers occupy."""
        return len(self.registers) * WORD_BYTES

    @property
    def addr_width(self) -> int:
        """AXI-Lite address bits: a power-of-two window holding every register (at least 8 bits)."""
        return max(8, (self.span - 1).bit_length())

    def stream(self, name: str) -> StreamFormat:
        for s in self.streams:
            if s.name == name:
                return s
        raise KeyError(f"core {self.name} has no stream {name!r}; streams: {[s.name for s in self.streams]}")

    def group(self, name: str) -> RegisterGroup:
        """The register group ``name`` (e.g. ``"RESULT"``); a clear error lists the core's groups."""
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"core {self.name} has no register group {name!r}; groups: {[g.name for g in self.groups]}")

    def decode_err(self, value: int) -> list[str]:
        """Names of the error bits set in an ``ERR`` register value."""
        return [f.name for f in self.error_bits if f.extract(value)]

    # -- identity -------------------------------------------------------------------------------
    def canonical(self) -> dict:
        """What the hash covers: names, offsets, access, resets, fields, streams and error bits (not groups)."""
        return {
            "name": self.name,
            "registers": [
                {"name": r.name, "offset": r.offset, "access": r.access, "reset": r.reset,
                 "fields": [[f.name, f.lsb, f.width] + ([[list(v[:2]) for v in f.values]] if f.values else [])
                            for f in r.fields]}
                for r in self.registers
            ],
            "streams": [
                {"name": s.name, "dir": s.direction, "width": s.width,
                 "fields": [[f.name, f.lsb, f.width, f.count, f.signed] for f in s.fields]}
                for s in self.streams
            ],
            "errors": [[f.name, f.lsb, f.width] for f in self.error_bits],
        }

    def map_hash(self) -> int:
        """32-bit hash of the map (names, offsets, access, resets, fields, streams); never 0."""
        blob = json.dumps(self.canonical(), sort_keys=True).encode()
        h = int.from_bytes(hashlib.sha256(blob).digest()[:4], "big")
        return h or 1


class MapBuilder:
    """Allocates register offsets in declaration order, after the common ID/CTRL/STATUS/ERR block.

    Parameters
    ----------
    name : str
        Core name (the same name the golden model, C++ reference, MyHDL block, testbench and driver use).
    doc : str
        One paragraph on what the core does.
    errors : iterable of (name, doc)
        The core's error bits, in bit order, as they appear in ``ERR``.
    ctrl : iterable of (name, doc)
        Core-specific ``CTRL`` pulse bits after the common ``START`` and ``SOFT_RESET``.
    """

    def __init__(self, name: str, doc: str, errors: Iterable[tuple[str, str]] = (),
                 ctrl: Iterable[tuple[str, str]] = ()) -> None:
        self.name, self.doc = name, doc
        self._regs: list[Register] = []
        self._streams: list[StreamFormat] = []
        self._groups: list[RegisterGroup] = []
        self._errors = tuple(Field(n, i, 1, d) for i, (n, d) in enumerate(errors))
        if len(self._errors) > 32:
            raise ValueError(f"core {name}: {len(self._errors)} error bits, at most 32")
        ctrl_fields = [Field("START", 0, 1, "Start an operation."),
                       Field("SOFT_RESET", 1, 1, "Clear the datapath, STATUS and ERR; configuration registers keep their values.")]
        ctrl_fields += [Field(n, 2 + i, 1, d) for i, (n, d) in enumerate(ctrl)]
        self.add("ID", "ro", "Hash of this core's register map; a driver refuses hardware whose ID differs.")
        self.add("CTRL", "pulse", "Control strobes (write 1 to act; reads 0).", fields=ctrl_fields)
        self.add("STATUS", "ro", "Core state.", fields=[
            Field("BUSY", 0, 1, "An operation is running."),
            Field("DONE", 1, 1, "The last operation finished; cleared by START or SOFT_RESET."),
            Field("ERROR", 2, 1, "ERR is non-zero; the core stopped and waits for SOFT_RESET."),
        ])
        self.add("ERR", "ro", "Error bits (sticky until SOFT_RESET).", fields=self._errors)

    def add(self, name: str, access: str, doc: str, reset: int = 0, fields: Iterable[Field] = ()) -> "MapBuilder":
        if access not in ACCESS_KINDS:
            raise ValueError(f"register {name}: access {access!r} not in {ACCESS_KINDS}")
        if not 0 <= reset < 1 << 32:
            raise ValueError(f"register {name}: reset value {reset:#x} does not fit 32 bits")
        fields = tuple(fields)
        used = 0
        for f in fields:
            if f.lsb < 0 or f.width < 1 or f.lsb + f.width > 32:
                raise ValueError(f"register {name}: field {f.name} bits [{f.lsb}+:{f.width}] outside 0..31")
            if used & f.mask:
                raise ValueError(f"register {name}: field {f.name} overlaps another field")
            used |= f.mask
        self._regs.append(Register(name, len(self._regs) * WORD_BYTES, access, doc, reset, fields))
        return self

    def stream(self, fmt: StreamFormat) -> "MapBuilder":
        self._streams.append(fmt)
        return self

    def group(self, name: str, registers: Iterable[str], doc: str) -> "MapBuilder":
        """Declare the register group ``name``: ``registers`` in order (checked by :meth:`build`)."""
        self._groups.append(RegisterGroup(name, tuple(registers), doc))
        return self

    def build(self) -> CoreMap:
        return CoreMap(self.name, self.doc, tuple(self._regs), tuple(self._streams), self._errors,
                       tuple(self._groups))


# ------------------------------------------------------------------------------------------------
# The cores
# ------------------------------------------------------------------------------------------------

def _rng_map() -> CoreMap:
    b = MapBuilder(
        "rng",
        "xoshiro128++ uniform random number generator: 128-bit state loaded from SEED0..3, one 32-bit "
        "output per step. The verifier embeds the same generator for its acceptance tests.",
        errors=[("SEED_ZERO", "LOAD_SEED with an all-zero seed (xoshiro's forbidden state).")],
        ctrl=[("LOAD_SEED", "Load the state from SEED0..3 (an all-zero seed raises SEED_ZERO)."),
              ("STEP", "Advance one step; OUT takes the new output.")],
    )
    for i in range(4):
        b.add(f"SEED{i}", "rw", f"State word s[{i}] loaded by CTRL.LOAD_SEED.", reset=0)
    b.add("COUNT", "rw", "Steps that CTRL.START runs (0 runs none).", reset=1)
    b.add("OUT", "ro", "The latest 32-bit output.")
    b.add("XOR", "ro", "XOR of every output since LOAD_SEED: a cheap check that a long burst matched.")
    b.add("STEPS", "ro", "Steps taken since LOAD_SEED (wraps at 2**32).")
    b.group("RESULT", ("OUT", "XOR", "STEPS"), "What a run leaves: the latest output, the XOR and the step count.")
    return b.build()


# Verifier stream width (the number formats themselves are in hwcontract.formats).
LOGIT_BITS = 16           # signed logit code per stream lane
VERIFIER_MAX_GAMMA = 16
VOCAB_LIMIT = 1 << 16     # VOCAB_MAX ceiling: tokens are 16 bits and a row's sum S fits 32 bits

# Token trees (treemask core, verifier tree mode). Node 0 is the root (the last token already chosen); node
# i >= 1 has a parent index below i, so a parent array in node order is a topological order.
TREE_MAX_NODES = 64       # largest tree any build accepts (the NODES_MAX / TREE_MAX parameters are <= this)
TREE_PARENT_BITS = 8      # one parent index per byte, 4 per register
TREE_TOKEN_BITS = 16      # one token per half word, 2 per register


def _tree_registers(b: "MapBuilder", prefix: str, tokens: bool) -> None:
    """NODES and the parent (and token) arrays of a tree, in the layout both tree cores share."""
    per = 32 // TREE_PARENT_BITS
    for k in range(TREE_MAX_NODES // per):
        b.add(f"{prefix}PARENT{k}", "rw", f"Parents of nodes {per * k}..{per * k + per - 1}, one byte each "
              f"(node {per * k} in bits 7:0)" + ("; node 0's byte is ignored (the root)." if k == 0 else "."),
              fields=[Field(f"P{j}", TREE_PARENT_BITS * j, TREE_PARENT_BITS, f"parent of node {per * k + j}")
                      for j in range(per)])
    if not tokens:
        return
    per = 32 // TREE_TOKEN_BITS
    for k in range(TREE_MAX_NODES // per):
        b.add(f"{prefix}TOKEN{k}", "rw", f"Draft tokens of nodes {per * k} (bits 15:0) and {per * k + 1} "
              "(bits 31:16)" + ("; node 0's token is ignored (the root's token was chosen last round)."
                                if k == 0 else "."),
              fields=[Field(f"T{j}", TREE_TOKEN_BITS * j, TREE_TOKEN_BITS, f"token of node {per * k + j}")
                      for j in range(per)])


def _verifier_map() -> CoreMap:
    b = MapBuilder(
        "verifier",
        "Speculative-decoding verifier: streams target rows p_i and draft rows q_i of fixed-point logits, "
        "computes a streaming softmax per row, accepts draft token x_i when u < p(x_i)/q(x_i) (no divider), "
        "resamples the first rejected position from norm(max(0, p - q)) or samples the bonus token from "
        "p_gamma over an on-chip row buffer. Greedy mode compares the target's argmax with the draft.",
        errors=[("SEED_ZERO", "LOAD_SEED with an all-zero seed."),
                ("BAD_GAMMA", "GAMMA above the core's GAMMA_MAX."),
                ("BAD_VOCAB", "VOCAB is 0 or above the core's VOCAB_MAX."),
                ("BAD_TOKEN", "A draft token DRAFT[i], i < GAMMA, is not below VOCAB."),
                ("BAD_TEMP", "INV_TEMP is 0 (temperature 0: use greedy mode) or above 65535 (outside Q8.8) in sampling mode."),
                ("SHORT_ROW", "TLAST came before the last beat of a row."),
                ("LONG_ROW", "The last beat of a row came without TLAST."),
                ("UNEXPECTED_DATA", "A stream beat arrived while the core expected none (stream longer than announced)."),
                ("EMPTY_ROW", "Every logit of a row is -inf, or (tree mode) every weight left after the rejected "
                              "children is 0: no distribution to sample from."),
                ("BAD_TREE", "Tree mode: NODES is 0 or above the core's TREE_MAX, or a node i in 1..NODES-1 has a "
                             "parent not below i.")],
        ctrl=[("LOAD_SEED", "Load the RNG state from SEED0..3.")],
    )
    b.add("CONFIG", "rw", "Round configuration.", fields=[
        Field("GREEDY", 0, 1, "1: greedy (argmax) verification, only target rows are streamed; 0: sampling."),
        Field("TREE", 1, 1, "1: verify the token tree NODES / TREE_PARENT* / TREE_TOKEN* (GAMMA and DRAFT* "
                            "are ignored; only target rows are streamed, one per node on the walked path).")])
    b.add("GAMMA", "rw", "Draft tokens this round (0 = plain sampling of the next token).", reset=0)
    b.add("VOCAB", "rw", "Vocabulary size V of the rows streamed (1..VOCAB_MAX).", reset=0)
    b.add("INV_TEMP", "rw", "1/temperature, unsigned Q8.8 (256 = 1.0); 0 is an error in sampling mode.", reset=256)
    for k in range(VERIFIER_MAX_GAMMA // 2):
        b.add(f"DRAFT{k}", "rw", f"Draft tokens x_{2 * k} (bits 15:0) and x_{2 * k + 1} (bits 31:16).", fields=[
            Field("LO", 0, 16, f"x_{2 * k}"), Field("HI", 16, 16, f"x_{2 * k + 1}")])
    for i in range(4):
        b.add(f"SEED{i}", "rw", f"RNG state word s[{i}] loaded by CTRL.LOAD_SEED.")
    b.add("NODES", "rw", "Tree mode: nodes of the tree, root included (1..TREE_MAX).", reset=1)
    _tree_registers(b, "TREE_", tokens=True)
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("LANES", 0, 4, "Logits per stream beat."), Field("GAMMA_MAX", 4, 5, "Largest GAMMA accepted."),
        Field("TREE_MAX", 9, 7, "Largest NODES accepted in tree mode.")])
    b.add("VOCAB_MAX", "ro", "Largest VOCAB accepted (row buffer depth).")
    b.add("N_ACCEPT", "ro", "Draft tokens accepted in the last round (tree mode: nodes on the accepted path, root "
                            "excluded).")
    b.add("NEXT_TOKEN", "ro", "The token emitted after the accepted prefix (resampled, argmax or bonus).")
    b.add("ACCEPT_BITS", "ro", "Bit i: position i was tested and accepted (tree mode: depth i + 1 of the path).")
    b.add("ROWS", "ro", "Rows consumed this round (target and draft).")
    b.add("WORDS", "ro", "RNG words consumed this round.")
    b.add("LAST_EP", "ro", "e_p(x) = EXP(m_p - z_p[x]) of the last tested position (Q1.15).")
    b.add("LAST_EQ", "ro", "e_q(x) of the last tested position (Q1.15).")
    b.add("LAST_SP", "ro", "Running sum S_p of the last target row.")
    b.add("LAST_SQ", "ro", "Running sum S_q of the last draft row.")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY this round.")
    b.add("CYCLES_STALL", "ro", "BUSY cycles spent waiting for a stream beat.")
    b.add("CUR_NODE", "ro", "Tree mode: the node whose target row the core takes next (while BUSY), or the last "
                            "node of the accepted path (when DONE); 0 in chain mode.")
    b.add("PATH_LO", "ro", "Tree mode: bit j set when node j (1..31) is on the accepted path.")
    b.add("PATH_HI", "ro", "Tree mode: bit j set when node 32 + j is on the accepted path.")
    b.stream(StreamFormat("s_axis", "in", 8 * LOGIT_BITS,
                          "Logit rows, LANES codes per beat (element j = beat*LANES + lane; lanes past VOCAB carry "
                          "-inf), TLAST on each row's last beat. Order: p_0, q_0, p_1, q_1, ..., p_gamma "
                          "(greedy: p_0 .. p_gamma). The host stops at the first rejection (STATUS.DONE). Tree mode: "
                          "p of node 0, then p of each node CUR_NODE names, until DONE.",
                          (StreamField("LOGIT", 0, LOGIT_BITS, "Q7.8 logit code; -32768 = -inf", count=8, signed=True),)))
    b.group("RESULT", ("N_ACCEPT", "NEXT_TOKEN", "ACCEPT_BITS", "ROWS", "WORDS", "LAST_EP", "LAST_EQ", "LAST_SP",
                       "LAST_SQ"),
            "The decision of one round, bit-exact across the golden model, the C++ reference and the RTL.")
    b.group("TREE_RESULT", ("CUR_NODE", "PATH_LO", "PATH_HI"),
            "What a tree-mode round adds to RESULT: the accepted path and its last node.")
    b.group("COUNTERS", ("CYCLES_BUSY", "CYCLES_STALL"),
            "Cycle counters of one round (the RTL's; the cycle model in hls_ref predicts BUSY - STALL).")
    return b.build()


TREEMASK_MASK_BITS = TREE_MAX_NODES


def _treemask_map() -> CoreMap:
    b = MapBuilder(
        "treemask",
        "Tree-attention mask generator: from the parent array of an N-node token tree (node 0 the root, "
        "parent(i) < i) it streams the N x N ancestor mask, row i = row parent(i) with bit i set, one row per "
        "cycle, each with the node's depth (its position id after the root).",
        errors=[("BAD_NODES", "NODES is 0 or above the core's NODES_MAX."),
                ("BAD_PARENT", "A node i in 1..NODES-1 has a parent not below i.")],
    )
    b.add("NODES", "rw", "Nodes N of the tree, root included (1..NODES_MAX).", reset=1)
    _tree_registers(b, "", tokens=False)
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("NODES_MAX", 0, 7, "Largest NODES accepted.")])
    b.add("ROWS", "ro", "Mask rows sent this operation.")
    b.add("MAX_DEPTH", "ro", "Largest depth in the tree (0 for the root alone).")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY this operation (START to DONE).")
    b.add("CYCLES_STALL", "ro", "BUSY cycles in which a row waited for m_axis TREADY.")
    b.stream(StreamFormat("m_axis", "out", 128,
                          "One word per node, in node order, TLAST on node N-1: its ancestor mask (bit j set when "
                          "node j is node i or one of its ancestors) and its depth.",
                          (StreamField("MASK", 0, TREEMASK_MASK_BITS, "ancestor-or-self bits, bit j = node j"),
                           StreamField("DEPTH", 64, 8, "depth of the node (root 0)"),
                           StreamField("NODE", 72, 8, "the node's index i"))))
    b.group("RESULT", ("ROWS", "MAX_DEPTH"), "The outcome of one operation (the mask rows are on m_axis).")
    b.group("COUNTERS", ("CYCLES_BUSY", "CYCLES_STALL"), "Cycle counters of one operation.")
    return b.build()


# KV-cache page table (kvpage core, docs/kvpage.md): slots are sequences and their branches; a rollback
# names its branches in a 64-bit mask (MASK_LO/HI), so 64 is the most slots a build has (parameter SLOTS,
# hwcontract.params; PARAMS.SLOTS says how many this instance has).
KV_SLOTS = 64
KV_MAX_PAGES = 1024       # largest PAGES parameter (page ids fit 10 bits)
KV_MAX_BLOCKS = 1024      # largest MAX_BLOCKS parameter (rows of one slot's block table)
KV_OPS = (
    ("NEW", 1, "Open an empty sequence in the lowest free slot -> RES_SLOT."),
    ("FORK", 2, "Branch the sequence SLOT: the new slot shares its rows (block table copied, pages shared) -> "
                "RES_SLOT."),
    ("WRITE", 3, "Make row ROW of SLOT writable: ROW = LEN appends a new page; the branch's last shared row is "
                 "copied on write (RES_SRC -> RES_PAGE, FLAGS.COPY); an own row returns its page -> RES_PAGE."),
    ("TRANSLATE", 4, "Physical page of row ROW of SLOT -> RES_PAGE."),
    ("COMMIT", 5, "The branch SLOT becomes its parent's sequence, keeping its first ROW rows; the parent's "
                  "other branches are rolled back -> RES_SLOT (= SLOT)."),
    ("ROLLBACK", 6, "Free every branch in MASK_HI:MASK_LO (bit s = slot s) in one operation."),
    ("FREE", 7, "Free the sequence SLOT and every branch of it."),
    ("REFS", 8, "Reference count of page PAGE (slots mapping it) -> RES_REFS."),
    ("INFO", 9, "State of slot SLOT -> RES_INFO, RES_LEN, RES_BASE, RES_COUNT."),
    ("CLEAR", 10, "Free every slot and every page (the state after reset)."),
)
KV_KINDS = (("FREE", 0, "unused"), ("SEQ", 1, "a sequence"), ("BRANCH", 2, "a branch of a sequence"),
            ("ZOMBIE", 3, "freed; its pages wait on its chain to be reused"))


def _kvpage_map() -> CoreMap:
    b = MapBuilder(
        "kvpage",
        "KV-cache page table: block tables of up to SLOTS (a build parameter) sequences and branches over a pool of "
        "PAGES physical "
        "pages, a free list, copy-on-write forks, and commit / rollback in a constant number of cycles.",
        errors=[("BAD_OP", "OP.CODE is not an operation."),
                ("BAD_SLOT", "SLOT (or a MASK bit) is not a slot of the kind the operation needs: a sequence for "
                             "FORK and FREE (freeing one twice lands here), a branch for COMMIT and ROLLBACK, a "
                             "live slot for WRITE and TRANSLATE; or SLOT >= SLOTS (or a MASK bit at or past it)."),
                ("NO_SLOT", "NEW or FORK with all SLOTS slots live."),
                ("POOL_EMPTY", "WRITE needs a page and the pool has none free."),
                ("BAD_ROW", "ROW out of range: TRANSLATE at or past LEN; WRITE past LEN or at MAX_BLOCKS; COMMIT "
                            "keeping more rows than the branch has."),
                ("SHARED_ROW", "WRITE to a shared row: a branch row below its last shared one, or a sequence row "
                               "that a live branch shares."),
                ("BAD_PAGE", "REFS of a page at or past PAGES.")],
    )
    b.add("OP", "rw", "The operation CTRL.START runs.", fields=[
        Field("CODE", 0, 4, "Operation.", values=KV_OPS)])
    b.add("SLOT", "rw", "Slot operand (0..SLOTS-1).")
    b.add("ROW", "rw", "Row operand: the logical block (WRITE, TRANSLATE) or the rows to keep (COMMIT).")
    b.add("PAGE", "rw", "Page operand (REFS).")
    b.add("MASK_LO", "rw", "ROLLBACK: branch slots 0..31 (bit s = slot s).")
    b.add("MASK_HI", "rw", "ROLLBACK: branch slots 32..63 (bit s = slot 32 + s).")
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("PAGES_LOG2", 0, 4, "log2 of PAGES (physical pages in the pool)."),
        Field("BLOCKS_LOG2", 4, 4, "log2 of MAX_BLOCKS (rows of a slot's block table)."),
        Field("SLOTS", 8, 8, "Slots (sequences and branches)")])
    b.add("RES_SLOT", "ro", "NEW, FORK, COMMIT: the slot of the result.")
    b.add("RES_PAGE", "ro", "WRITE, TRANSLATE: the physical page of the row.")
    b.add("RES_SRC", "ro", "WRITE with FLAGS.COPY: the page whose contents the host copies into RES_PAGE.")
    b.add("RES_FLAGS", "ro", "WRITE: what it did.", fields=[
        Field("ALLOC", 0, 1, "A page was taken from the pool."),
        Field("COPY", 1, 1, "Copy on write: copy page RES_SRC into RES_PAGE before writing.")])
    b.add("RES_REFS", "ro", "REFS: slots whose block table maps the page (0: free).")
    b.add("RES_INFO", "ro", "INFO: kind and parent of the slot.", fields=[
        Field("KIND", 0, 2, "Slot kind.", values=KV_KINDS),
        Field("PARENT", 8, 6, "A branch's sequence.")])
    b.add("RES_LEN", "ro", "INFO: rows in the slot's block table.")
    b.add("RES_BASE", "ro", "INFO: a branch's rows 0..BASE-1 are shared with its sequence (0 for a sequence).")
    b.add("RES_COUNT", "ro", "INFO: pages the slot owns (its chain; a zombie's pages wait there to be reused).")
    b.add("FREE_PAGES", "ro", "Pages free in the pool.")
    b.add("SEQS_LO", "ro", "Bit s: slot s is a sequence (slots 0..31).")
    b.add("SEQS_HI", "ro", "Bit s: slot 32 + s is a sequence.")
    b.add("BRANCHES_LO", "ro", "Bit s: slot s is a branch (slots 0..31).")
    b.add("BRANCHES_HI", "ro", "Bit s: slot 32 + s is a branch.")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY in the last operation (START to DONE).")
    b.add("OPS", "ro", "Operations completed since reset (wraps at 2**32).")
    b.group("RESULT", ("RES_SLOT", "RES_PAGE", "RES_SRC", "RES_FLAGS", "RES_REFS", "RES_INFO", "RES_LEN", "RES_BASE",
                       "RES_COUNT"),
            "The result registers an operation may write; each keeps its value until an operation writes it.")
    b.group("STATE", ("FREE_PAGES", "SEQS_LO", "SEQS_HI", "BRANCHES_LO", "BRANCHES_HI"),
            "The always-visible state of the page table after an operation.")
    b.group("COUNTERS", ("CYCLES_BUSY", "OPS"), "Cycles of the last operation and operations since reset.")
    return b.build()


# Draft engine (draftengine core, docs/draftengine.md): an R x C int8 array; jobs of up to DE_M_MAX tokens.
DE_M_MAX = 16             # tokens per job (a chain's or a tree's batch)
DE_ROWS = (4, 8, 16)      # ROWS (output channels per tile) a build may have
DE_COLS = (8, 16)         # COLS (input features per chunk); >= 8 so that a beat holds ROWS parameter words
DE_PARAM_WORD_BITS = 64   # one output channel's requantization parameters in a parameter beat
DE_OPS = (("LOAD_W", 1, "Write COUNT beats from s_axis into the weight memory from beat ADDR."),
          ("LOAD_P", 2, "Write COUNT beats from s_axis into the parameter memory from tile ADDR."),
          ("RUN", 3, "One job: M * ceil(K / (ROWS*COLS)) activation beats in, ceil(N / ROWS) * M result beats out."))
DE_OUT_CODES = {8: 0, 16: 1, 32: 2}     # output width (bits) -> CONFIG.OUT code
DE_OUTS = (("OUT8", DE_OUT_CODES[8], "int8 outputs (requantized, saturated)"),
           ("OUT16", DE_OUT_CODES[16], "int16 outputs (requantized, saturated)"),
           ("OUT32", DE_OUT_CODES[32], "int32 outputs: acc + BIAS, saturated (MULT and SHIFT unused)"))


def _draftengine_map() -> CoreMap:
    b = MapBuilder(
        "draftengine",
        "int8 draft engine: an output-stationary ROWS x COLS array of int8 multiply-accumulates (int32 sums) "
        "with per-output-channel requantization (bias, 16-bit multiplier, shift, half-up rounding, saturation). "
        "Weight tiles and per-channel parameters are loaded once into on-chip memories (LOAD_W, LOAD_P); a job "
        "(RUN) streams in M activation vectors and streams out requantized outputs, one beat per (tile, token).",
        errors=[("BAD_OP", "CONFIG.OP is not an operation."),
                ("BAD_SHAPE", "RUN: M is 0 or above M_MAX, K is 0 or above K_MAX, or N is 0 or above ROWS * PDEPTH."),
                ("BAD_OUT", "RUN: CONFIG.OUT is not an output width."),
                ("BAD_RANGE", "LOAD_W / LOAD_P: COUNT is 0 or ADDR + COUNT passes the memory's depth; RUN (shape "
                              "legal): WBASE + ceil(N/ROWS) * ceil(K/COLS) passes WDEPTH or PBASE + ceil(N/ROWS) "
                              "passes PDEPTH."),
                ("SHORT_STREAM", "TLAST came before the last beat the operation expects."),
                ("LONG_STREAM", "The last beat the operation expects came without TLAST.")],
    )
    b.add("CONFIG", "rw", "The operation CTRL.START runs, and the job's output width.", fields=[
        Field("OP", 0, 2, "Operation.", values=DE_OPS),
        Field("OUT", 4, 2, "Output width of RUN.", values=DE_OUTS)])
    b.add("ADDR", "rw", "LOAD_W: first weight beat written; LOAD_P: first parameter tile written.")
    b.add("COUNT", "rw", "LOAD_W / LOAD_P: beats to write.", reset=1)
    b.add("M", "rw", "RUN: tokens (activation vectors), 1..M_MAX.", reset=1)
    b.add("K", "rw", "RUN: input features, 1..K_MAX.", reset=1)
    b.add("N", "rw", "RUN: output channels, 1..ROWS * PDEPTH.", reset=1)
    b.add("WBASE", "rw", "RUN: weight beat of tile 0, chunk 0; tile t, chunk c is beat WBASE + t * ceil(K/COLS) + c.")
    b.add("PBASE", "rw", "RUN: parameter tile of output channels 0..ROWS-1; tile t is PBASE + t.")
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("ROWS", 0, 5, "Output channels per tile (array rows)."),
        Field("COLS", 5, 5, "Input features per weight beat row (array columns)."),
        Field("M_MAX", 10, 5, "Largest M accepted."),
        Field("URAM", 15, 1, "1: the weight memory is UltraRAM, its read pipelined (hwcontract.latency.de_wpipe).")])
    b.add("WDEPTH", "ro", "Weight memory depth (beats of ROWS * COLS bytes).")
    b.add("PDEPTH", "ro", "Parameter memory depth (tiles of ROWS channel words).")
    b.add("K_MAX", "ro", "Largest K accepted (activation memory: M_MAX * K_MAX / (ROWS * COLS) beats).")
    b.add("SATURATED", "ro", "RUN: outputs of the job that saturated (lanes past N excluded).")
    b.add("BEATS_IN", "ro", "s_axis beats taken by the last operation.")
    b.add("BEATS_OUT", "ro", "m_axis beats sent by the last operation.")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY in the last operation (START to DONE).")
    b.add("CYCLES_STALL", "ro", "BUSY cycles spent waiting: for an s_axis beat (LOAD, RUN's activations) or for "
                                "m_axis TREADY (RUN's results).")
    b.stream(StreamFormat("s_axis", "in", 8 * DE_ROWS[-1] * DE_COLS[-1],
                          "ROWS * COLS bytes per beat (TDATA is 8 * ROWS * COLS bits), TLAST on an operation's "
                          "last beat. LOAD_W: one weight tile chunk, byte r * COLS + c = w[t * ROWS + r, "
                          "chunk * COLS + c]; LOAD_P: ROWS parameter words (param_word), word r for channel "
                          "t * ROWS + r at bit 64 r; RUN: activations of one token, ROWS * COLS features per "
                          "beat, token after token. Values past N and K are zero.",
                          (StreamField("BYTE", 0, 8, "int8 weight or activation (two's complement)",
                                       count=DE_ROWS[-1] * DE_COLS[-1], signed=True),)))
    b.stream(StreamFormat("param_word", "in", DE_PARAM_WORD_BITS,
                          "One output channel's requantization parameters inside a LOAD_P beat.",
                          (StreamField("BIAS", 0, 32, "added to the sum (int32)", signed=True),
                           StreamField("MULT", 32, 16, "multiplier (unsigned)"),
                           StreamField("SHIFT", 48, 6, "right shift 0..48 (rounding half up)"))))
    b.stream(StreamFormat("m_axis", "out", 32 * DE_ROWS[-1],
                          "RUN: one beat per (tile t, token m), t-major (t = 0: m = 0..M-1, then t = 1, ...), "
                          "TLAST on the job's last beat; lane r (bits 32 r + 31 .. 32 r) is output channel "
                          "t * ROWS + r, sign-extended (TDATA is 32 * ROWS bits).",
                          (StreamField("Y", 0, 32, "output value, sign-extended to 32 bits", count=DE_ROWS[-1],
                                       signed=True),)))
    b.group("RESULT", ("SATURATED", "BEATS_IN", "BEATS_OUT"), "The outcome of one operation (outputs are on m_axis).")
    b.group("COUNTERS", ("CYCLES_BUSY", "CYCLES_STALL"),
            "Cycle counters of one operation (the cycle model in hls_ref.draftengine predicts BUSY - STALL).")
    return b.build()


# Tree attention (treeattn core, docs/treeattn.md): 128-bit streams of int8 codes in, Q7.8 codes out.
TA_BEAT_BITS = 128        # both streams, whatever LANES is
TA_CTX_LIMIT = 8192       # largest CTX_MAX parameter (committed context keys of one job)
TA_MULT_BITS = 16         # MULT: unsigned score-to-distance multiplier
TA_SHIFT_MAX = 31         # SHIFT: 0..31


def _treeattn_map() -> CoreMap:
    b = MapBuilder(
        "treeattn",
        "Tree attention for one KV head: the GROUP query heads of each of NODES step rows attend, with a streaming "
        "max and the verifier's exp table, over CTX committed context keys (streamed in blocks from the KV pages) "
        "and the step's own nodes that the row's MASK shows (the treemask core's ancestor bits; a chain's row r "
        "sees nodes 0..r). Masked pairs cost no multiply-accumulate.",
        errors=[("BAD_CTX", "CTX is above the core's CTX_MAX."),
                ("BAD_NODES", "NODES is 0 or above the core's NODES_MAX."),
                ("BAD_SCALE", f"MULT is 0 or above {(1 << TA_MULT_BITS) - 1}, or SHIFT is above {TA_SHIFT_MAX}."),
                ("BAD_MASK", "A MASK row r lacks bit r or has a bit above r set (nodes come in topological order)."),
                ("SHORT_STREAM", "TLAST came before the job's last s_axis beat."),
                ("LONG_STREAM", "The job's last s_axis beat came without TLAST.")],
    )
    b.add("CTX", "rw", "Committed context keys L of the job (0..CTX_MAX).", reset=0)
    b.add("NODES", "rw", "Step rows (nodes) N of the job (1..NODES_MAX).", reset=1)
    b.add("MULT", "rw", f"Score multiplier (1..{(1 << TA_MULT_BITS) - 1}): a score in 1/256 nat is (s * MULT) >> "
                        "SHIFT (hwcontract.formats.ta_multiplier).", reset=1)
    b.add("SHIFT", "rw", f"Right shift of the scaled score (0..{TA_SHIFT_MAX}).", reset=0)
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("HEAD_DIM", 0, 8, "Dimensions of a head."),
        Field("GROUP", 8, 4, "Query heads per KV head."),
        Field("NODES_MAX", 12, 7, "Largest NODES accepted."),
        Field("LANES", 19, 6, "Multiply-accumulates per cycle."),
        Field("BLOCK", 25, 7, "Context keys per block buffer.")])
    b.add("CTX_MAX", "ro", "Largest CTX accepted.")
    b.add("MACS", "ro", "Multiply-accumulates of the last job: 2 * HEAD_DIM * GROUP * sum_r (CTX + popcount(MASK[r])).")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY in the last job (START to DONE).")
    b.add("CYCLES_STALL", "ro", "BUSY cycles in which the core waited for an s_axis beat or for m_axis TREADY.")
    b.stream(StreamFormat("s_axis", "in", TA_BEAT_BITS,
                          "16 bytes a beat (byte i at bits 8i+7..8i), TLAST on the job's last beat. MASK: NODES "
                          "beats, row r's visible step nodes in bits NODES_MAX-1..0 (bit j: node j), rest 0; Q: for "
                          "each row r, for each query head h, q[r, h] (HEAD_DIM / 16 beats); the context: for each key "
                          "j < CTX, K[j] then V[j] (HEAD_DIM / 16 beats each); the step: for each node n < NODES, "
                          "K[n] then V[n].",
                          (StreamField("BYTE", 0, 8, "int8 code (two's complement)", count=TA_BEAT_BITS // 8,
                                       signed=True),)))
    b.stream(StreamFormat("m_axis", "out", TA_BEAT_BITS,
                          "For each row r, for each query head h: o[r, h] as HEAD_DIM Q7.8 codes in units of v's "
                          "codes, 8 a beat (element order = lane order), TLAST on the job's last beat.",
                          (StreamField("O", 0, 16, "Q7.8 output code", count=TA_BEAT_BITS // 16, signed=True),)))
    b.group("RESULT", ("MACS",), "The outcome of one job besides its m_axis rows.")
    b.group("COUNTERS", ("CYCLES_BUSY", "CYCLES_STALL"),
            "Cycle counters of one job (the cycle model hls_ref.treeattn.cycles predicts BUSY - STALL).")
    return b.build()


# The vector unit (vecunit core, docs/vecunit.md): 64-bit beats in (a data word and a constant word), 32-bit out.
VU_BEAT_BITS = 64         # s_axis: X (bits 31..0) and C (bits 63..32)
VU_OUT_BITS = 32          # m_axis: one Y a beat
VU_OPS = ("QUANT", "DEQ", "NORMQ", "ROPE", "SILU", "TOPK")   # OP register values, in order
VU_LEN_LIMIT = 65536      # largest LEN_MAX parameter


def _vecunit_map() -> CoreMap:
    b = MapBuilder(
        "vecunit",
        "The vector unit: the fixed-point glue between the draft engine's and the tree-attention unit's jobs. One "
        "job streams one vector of LEN elements through one operation (OP): QUANT (int8 activation planes at "
        "per-column multipliers), DEQ (the engine's int32 sums and planes into Q15.16 values or Q7.8 codes, with a "
        "residual add), NORMQ (RMSNorm then QUANT, two passes over the row), ROPE (the rotary embedding at POS), "
        "SILU (silu(g) * u) and TOPK (the K largest values and their indices).",
        errors=[("BAD_OP", f"OP is above {len(VU_OPS) - 1}."),
                ("BAD_LEN", "LEN is 0 or above the core's LEN_MAX."),
                ("BAD_PARTS", "OP is DEQ and PARTS is 0 or above the core's PARTS_MAX."),
                ("BAD_HALF", "OP is ROPE and HALF is 0, above the core's HALF_MAX, or LEN is not a multiple of "
                             "2 * HALF."),
                ("BAD_K", "OP is TOPK and K is 0, above the core's K_MAX, or above LEN."),
                ("SHORT_STREAM", "TLAST came before the job's last s_axis beat."),
                ("LONG_STREAM", "The job's last s_axis beat came without TLAST.")],
    )
    b.add("OP", "rw", "Operation: " + ", ".join(f"{i} {n}" for i, n in enumerate(VU_OPS)) + ".", reset=0)
    b.add("LEN", "rw", "Elements of the job's vector (1..LEN_MAX).", reset=1)
    b.add("FLAGS", "rw", "Options of the operation.", reset=0, fields=[
        Field("PLANES2", 0, 1, "QUANT, NORMQ: write the second int8 plane (the first plane's rounding residual)."),
        Field("RES", 1, 1, "DEQ: each element's parts are followed by one beat whose X is a Q15.16 value added."),
        Field("SAT16", 2, 1, "DEQ: saturate to signed 16 bits (Q7.8 codes) instead of 32.")])
    b.add("PARTS", "rw", "DEQ: int32 parts per element (1..PARTS_MAX).", reset=1)
    b.add("WMASK", "rw", "DEQ: bit p set: part p weighs PLANE (127, a first plane's sum); clear: 1.", reset=0)
    b.add("POS", "rw", "ROPE: the position the rows are rotated to (unsigned).", reset=0)
    b.add("HALF", "rw", "ROPE: half a head's dimensions (1..HALF_MAX); LEN is a whole number of heads.", reset=32)
    b.add("EPS", "rw", "NORMQ: epsilon added to the mean square, in Q.32 (unsigned).", reset=0)
    b.add("NORM_MULT", "rw", "NORMQ: the mean's multiplier, round(2**32 / LEN) (unsigned): mean = (sum of squares "
                             "* NORM_MULT) >> 32.", reset=0)
    b.add("K", "rw", "TOPK: values kept (1..K_MAX, at most LEN).", reset=1)
    b.add("PARAMS", "ro", "Build parameters of this instance.", fields=[
        Field("PARTS_MAX", 0, 5, "Largest PARTS accepted."),
        Field("HALF_MAX", 5, 8, "Largest HALF accepted."),
        Field("K_MAX", 13, 5, "Largest K accepted.")])
    b.add("LEN_MAX", "ro", "Largest LEN accepted.")
    b.add("SATURATED", "ro", "Outputs of the last job that saturated (QUANT / NORMQ: first-plane codes clipped to "
                             "+-127; DEQ, ROPE, SILU: values clipped to the output width).")
    b.add("BEATS_IN", "ro", "s_axis beats taken by the last job.")
    b.add("BEATS_OUT", "ro", "m_axis beats sent by the last job.")
    b.add("CYCLES_BUSY", "ro", "Clock cycles BUSY in the last job (START to DONE).")
    b.add("CYCLES_STALL", "ro", "BUSY cycles in which the core waited for an s_axis beat or for m_axis TREADY.")
    b.stream(StreamFormat("s_axis", "in", VU_BEAT_BITS,
                          "One element (or one part of an element) a beat, TLAST on the job's last beat. QUANT: LEN "
                          "beats (X, C = its column's MULT / SHIFT); DEQ: per element PARTS beats (X = a part, C of "
                          "the first = the column's MULT / SHIFT) and with RES one more (X = the residual); NORMQ: "
                          "the row twice (LEN beats, C ignored; then LEN beats with C = MULT / SHIFT); ROPE: LEN "
                          "beats (C = the element's frequency in turns per position, Q.32); SILU: per element g then "
                          "u (2 LEN beats, C ignored); TOPK: LEN beats (C ignored).",
                          (StreamField("X", 0, 32, "data word (two's complement)", signed=True),
                           StreamField("C", 32, 32, "constant word (unsigned)"))))
    b.stream(StreamFormat("vu_scale", "in", 32, "A column's multiplier inside a C word (QUANT, DEQ, NORMQ).",
                          (StreamField("MULT", 0, 16, "multiplier (unsigned)"),
                           StreamField("SHIFT", 16, 6, "right shift 0..63 (rounding half up)"))))
    b.stream(StreamFormat("m_axis", "out", VU_OUT_BITS,
                          "One beat an element, TLAST on the job's last beat. QUANT, NORMQ: the first plane's int8 "
                          "code in bits 7..0 and the second's in 15..8 (0 without PLANES2), sign-extended from bit 15 "
                          "up; DEQ, ROPE, SILU: the value; TOPK: 2 K beats, index then value, largest value first "
                          "(ties: lower index first).",
                          (StreamField("Y", 0, 32, "output word (two's complement)", signed=True),)))
    b.group("RESULT", ("SATURATED", "BEATS_IN", "BEATS_OUT"), "The outcome of one job besides its m_axis words.")
    b.group("COUNTERS", ("CYCLES_BUSY", "CYCLES_STALL"),
            "Cycle counters of one job (the cycle model hls_ref.vecunit.cycles predicts BUSY - STALL).")
    return b.build()


CORES: dict[str, CoreMap] = {m.name: m for m in (_rng_map(), _verifier_map(), _treemask_map(), _kvpage_map(),
                                                  _draftengine_map(), _treeattn_map(), _vecunit_map())}


def core(name: str) -> CoreMap:
    """The map of core ``name``; a clear error lists the known cores."""
    try:
        return CORES[name]
    except KeyError:
        raise KeyError(f"unknown core {name!r}; known cores: {sorted(CORES)}") from None
