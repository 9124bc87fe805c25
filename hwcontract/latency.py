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

# UltraRAM (URAM288, UltraScale+; UG573): 4,096 words of 72 bits, cascaded in columns of at most 8 (Vivado's
# default CASCADE_HEIGHT), no initial value
URAM_WORDS = 4096
URAM_BITS = 72
URAM_CASCADE = 8


def uram_matrix(depth: int, width: int) -> tuple[int, int, int]:
    """``(rows, columns, slices)`` of the URAM288 matrix of a ``depth`` x ``width`` memory as Vivado builds it
    (UG901, "Pipelining the RAM"): ``ceil(depth / 4K)`` blocks cascaded in columns of at most
    :data:`URAM_CASCADE`, and ``ceil(width / 72)`` such matrices side by side. It takes
    ``ceil(depth / 4K) * slices`` URAM288."""
    blocks = -(-depth // URAM_WORDS)
    return min(blocks, URAM_CASCADE), -(-blocks // URAM_CASCADE), -(-width // URAM_BITS)


def uram_blocks(depth: int, width: int) -> int:
    """The URAM288 a ``depth`` x ``width`` memory takes in Vivado's matrix (:func:`uram_matrix`)."""
    return -(-depth // URAM_WORDS) * uram_matrix(depth, width)[2]


def de_wpipe(wdepth: int, uram: int) -> int:
    """Pipeline registers after the draft engine's weight memory read: none in block RAM; in UltraRAM the rows
    plus the columns of its matrix (:func:`uram_matrix`), which UG901 gives as the registers that pipeline a
    URAM matrix fully: Vivado packs them into the URAMs' output and cascade registers, so a deep cascade's read
    is register to register at any fabric clock the part runs."""
    if not uram:
        return 0
    rows, columns, _ = uram_matrix(wdepth, 1)
    return rows + columns


def de_pipe(cols: int, wpipe: int = 0) -> int:
    """Enabled cycles from a draftengine MAC issue to its result in the output register (COLS columns,
    ``wpipe`` pipeline registers after the weight memory's read: :func:`de_wpipe`)."""
    return 5 + wpipe + (cols.bit_length() - 1) + 1 + DE_REQUANT + 1

# treeattn (docs/treeattn.md, "Cycle model"): the closed form hls_ref.treeattn.cycles adds up. A (row, head)'s pass
# over a block of b keys takes 2 * b * D MAC cycles, D rescale cycles and TA_FILL cycles of the pipeline around them.
TA_CHECK = 2                    # CHECK: the start checks (CTX, NODES, MULT, SHIFT) read registered flags
TA_TREE = 5                     # the score's lane adder tree: log2 of the largest LANES registered levels
TA_SCALE = MUL_NARROW + 1       # a score into 1/256 nat: * MULT (mul_wide), the sign's correction and >> SHIFT
TA_SCORE = 6 + TA_TREE + TA_SCALE  # a score issue to the running max m': memory read, operands, product, the tree,
                                # the chunk sum, the scaling, the max, m' registered
TA_DIST = 1 + EXP               # a scaled score into its weight: m' - ss and the clamp, EXP
TA_FILL = 1 + (TA_SCORE - 1) + (TA_DIST + 1) + 4   # the pass's setup cycle, the scores' drain to m', the weights'
                                # head start over the weighted sums (EXP's drain), and l's update (l * f) at its end
TA_DIV = 35                     # per (row, head): the restoring divider's load and 34 quotient bits
TA_TAIL = 11                    # the last code's drain: acc read, lane select, |acc|, * R (MUL_WIDE), sum, rounding
                                # and saturation, the output beat's register and its handshake

# vecunit (docs/vecunit.md, "Cycle model"): hls_ref.vecunit.cycles. A job takes one cycle an s_axis beat; before
# them the start checks, between NORMQ's passes the reciprocal square root, after them ROPE's last stored half-head
# and TOPK's 2 K output beats, then the pipeline's drain.
VU_CHECK = 9 + 1                # CHECK: LEN mod 2 HALF (BAD_HALF), two of LEN's 18 bits a cycle, then the decision
VU_RSQRT = 7 + 32 + 1 + 81 + 41 + 1  # NORMQ: the last square into the sum, ss * NORM_MULT (a bit a cycle), m,
                                # floor(2**80 / m) (a quotient bit a cycle), its square root (a root bit a cycle), r
VU_TAIL = 26 + 1                # the last slot's 26 pipeline stages (QUANT after NORMQ's multiply is the deepest;
                                # every operation is padded to it) and the m_axis register's handshake
