"""Pipeline latencies: the one place the RTL's stage counts and the cycle models agree on.

The MyHDL blocks build their pipelines to these depths (``fpga.pipe`` and the cores check it), and the
cycle models in ``hls_ref`` add them up; docs/verifier.md ("Cycle model") explains each term.
"""
from __future__ import annotations

# fpga.pipe building blocks
MUL_NARROW = 4      # mul_wide with one or two 16-bit tiles: A/B, M, P registers, one sum level
MUL_WIDE = 5        # three or four tiles: two sum levels
EXP = 6             # exp_pipe: distance, table reads, a register after the block RAM, M, P, rounding

# verifier: stream path (a beat taken at the input to its sum added into S)
#   input register, decode, M, P, temper, max tree (2), running max, EXP, lane sum (2)
VER_STREAM = 1 + 1 + 2 + 1 + 2 + 1 + EXP + 2
VER_RESCALE = MUL_NARROW        # extra cycles of a beat that raises a finite running max (S * EXP(m - m'))
VER_START = 1                   # CHECK: the start checks read registered flags

# verifier: a row buffer read: the RAM's synchronous read, its output register, the block/LUTRAM mux register
VER_BUF_READ = 3
# verifier: sampling passes (a buffer read issued to the lane's weight): read, EXP, product, weight
VER_SAMPLE = VER_BUF_READ + EXP + MUL_NARROW + 1
VER_WALK_TAIL = 3               # WALK: prefix <= t - C, a register, count the lanes

# verifier: states that wait a fixed number of cycles (each total counts the state's cycles)
VER_TEST = EXP + MUL_NARROW + 1 + MUL_WIDE + 2  # TEST: lane 0 (EXP, products), u * x (operands, MUL_WIDE), compare, decide
# verifier, tree mode: the node scan reads one node's registers a cycle (read, test, then the decision), so a
# scanning state takes these cycles plus one per node it reads (hls_ref.verifier.tree_rtl_cycles)
VER_TCHECK = 2                  # TCHECK: the start checks of nodes 1..N-1 (BAD_TREE's parents, BAD_TOKEN)
VER_PICK = 2                    # TPICK: the next child of the node, its token
VER_HIT = 2                     # THIT: the first child whose token is the row's argmax
VER_READ = VER_BUF_READ + 1     # TREAD: buffer read, lane select
VER_TCALC = 2 + MUL_WIDE        # TCALC: operands, product, t registered


def ver_prefix(lanes: int) -> int:
    """Registered levels of the verifier's lane prefix sums: log2(L)."""
    return max(0, lanes.bit_length() - 1)


# draftengine: issue -> memory read, register (chunk select), DSP A/B, M, P, adder tree (log2 COLS), accumulator,
# requantization (REQUANT), output register; CHECK cycles validate an operation's registers
DE_CHECK = 4
DE_REQUANT = 2 + MUL_WIDE + 5   # bias, |t|, MULT product, sign, coarse shift, fine shift, rounding, saturation


def de_pipe(cols: int) -> int:
    """Enabled cycles from a draftengine MAC issue to its result in the output register (COLS columns)."""
    return 5 + (cols.bit_length() - 1) + 1 + DE_REQUANT + 1
