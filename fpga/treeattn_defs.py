"""treeattn: the geometry every sub-block of the tree-attention unit shares (widths, depths, address maps).

The build parameters are the contract's (``hwcontract.params`` core "treeattn"), the number formats
``hwcontract.formats``' TA_* constants, the stream width ``hwcontract.regmap.TA_BEAT_BITS`` and the pipeline depths
``hwcontract.latency``'s TA_* constants; :class:`Geo` derives the rest once, so that no sub-block restates a width.
"""
from __future__ import annotations

from dataclasses import dataclass

from myhdl import Signal, intbv

from hwcontract import latency as lat
from hwcontract.formats import EXP_FRAC, EXP_LIMIT, TA_ACC_BITS, TA_OUT_BITS, TA_OUT_SHIFT, TA_RECIP_SHIFT
from hwcontract.regmap import REG_BITS, TA_BEAT_BITS, TA_MULT_BITS, TA_SHIFT_MAX

from .pipe import Ram

BYTE = 8                        # an int8 code
CODE_BITS = TA_OUT_BITS         # an output code (Q7.8)
CODES_PER_BEAT = TA_BEAT_BITS // CODE_BITS
BYTES_PER_BEAT = TA_BEAT_BITS // BYTE
W_BITS = EXP_FRAC + 1           # a weight or the rescale factor f (Q1.15, up to 1.0)
DIST_BITS = EXP_LIMIT.bit_length()      # a clamped distance 0..EXP_LIMIT
SHIFT_BITS = TA_SHIFT_MAX.bit_length()
MULT_BITS = TA_MULT_BITS
L_BITS = REG_BITS               # l, the sum of weights (Q1.15 units, fits 32 bits)
R_BITS = TA_RECIP_SHIFT - EXP_FRAC + 1  # R = floor(2^48 / l) for l >= 2^15: up to 2^33
R_LO = (R_BITS + 1) // 2        # R is multiplied in two halves (each fits a DSP tile's narrow port)
#: The divider's partial remainder after the dividend's bits above R's: 2^48 >> R_BITS (below l >= 2^15).
DIV_START = 1 << (TA_RECIP_SHIFT - R_BITS)


def signed(bits: int, val: int = 0) -> intbv:
    """A signed intbv of ``bits`` bits."""
    return intbv(val, min=-(1 << (bits - 1)), max=1 << (bits - 1))


def signed_ram(style: str, depth: int, width: int) -> Ram:
    """A :class:`fpga.pipe.Ram` of signed ``width``-bit elements (the memory declares them ``signed``, so sums
    with them sign-extend)."""
    mem = Ram(style, depth, width)
    mem[:] = [Signal(signed(width)) for _ in range(depth)]
    return mem


def bits_for(n: int) -> int:
    """Bits of an unsigned counter that holds 0..n."""
    return max(1, int(n).bit_length())


@dataclass(frozen=True)
class Geo:
    """The unit's derived geometry for one build.

    The Q and K/V memories hold words of :attr:`WORD` bytes: a beat (LANES <= 16: a compute cycle reads one of its
    :attr:`CPW` chunks) or two (LANES = 32: the loader joins two beats). The K/V memory holds the two context block
    buffers (keys ``BLOCK`` each) and then the step's nodes (``NODES_MAX``); a key's K vector is followed by its V
    vector, each :attr:`WV` words.
    """

    HEAD_DIM: int
    GROUP: int
    NODES_MAX: int
    LANES: int
    CTX_MAX: int
    BLOCK: int

    def __post_init__(self) -> None:
        if self.LANES > self.HEAD_DIM:
            raise ValueError(f"treeattn: LANES={self.LANES} above HEAD_DIM={self.HEAD_DIM}")

    @property
    def WORD(self) -> int:
        """Bytes of a Q or K/V memory word: a beat, or LANES bytes where LANES is wider (two beats a word)."""
        return max(BYTES_PER_BEAT, self.LANES)

    @property
    def MW(self) -> int:
        """Bits of a Q or K/V memory word."""
        return self.WORD * BYTE

    @property
    def BPW(self) -> int:
        """Stream beats a memory word (1 or 2)."""
        return self.WORD // BYTES_PER_BEAT

    @property
    def CPW(self) -> int:
        """Compute chunks (LANES bytes) a memory word (1 or 2)."""
        return self.WORD // self.LANES

    @property
    def WV(self) -> int:
        """Memory words a vector."""
        return self.HEAD_DIM // self.WORD

    @property
    def D(self) -> int:
        """Compute cycles (and memory words) a vector."""
        return self.HEAD_DIM // self.LANES

    @property
    def E(self) -> int:
        """Stream beats a vector."""
        return self.HEAD_DIM // BYTES_PER_BEAT

    @property
    def LG_D(self) -> int:
        return (self.D - 1).bit_length()

    @property
    def LG_L(self) -> int:
        return (self.LANES - 1).bit_length()

    @property
    def ITEMS(self) -> int:
        """(row, head) pairs a job may have."""
        return self.NODES_MAX * self.GROUP

    @property
    def KEYS(self) -> int:
        """Key slots of a pass (the larger of a context block and the step's nodes)."""
        return max(self.BLOCK, self.NODES_MAX)

    @property
    def SW(self) -> int:
        """A score's bits (signed): |q . k| <= HEAD_DIM * 128 * 128."""
        return (self.HEAD_DIM * (1 << (2 * BYTE - 2))).bit_length() + 2

    @property
    def SSW(self) -> int:
        """A scaled score's bits (signed): ``(s * MULT) >> SHIFT`` with MULT below 2**MULT_BITS."""
        return self.SW + MULT_BITS

    @property
    def PW(self) -> int:
        """A lane product's bits (signed): a weight (W_BITS unsigned) or a q code times a v or k code."""
        return W_BITS + 1 + BYTE

    AW = TA_ACC_BITS
    Q_DEPTH = property(lambda self: self.ITEMS * self.WV)
    BUF = property(lambda self: self.BLOCK * 2 * self.WV)               # a context block buffer's words
    KV_STEP = property(lambda self: 2 * self.BUF)                       # the step's region in the K/V memory
    KV_DEPTH = property(lambda self: self.KV_STEP + self.NODES_MAX * 2 * self.WV)
    ACC_DEPTH = property(lambda self: self.ITEMS * self.D)
    ST_TREE = lat.TA_TREE
    OUT_SHIFT = TA_OUT_SHIFT
