r"""AXI4-Lite register slave generated from a core's register map (``hwcontract.regmap``).

Every core instantiates :func:`axil_regs` with its :class:`~hwcontract.regmap.CoreMap` and three dicts of
signals keyed by register name: ``ro`` (values the core drives), ``rw`` (storage the block owns and the
core reads) and ``pulse`` (one-cycle strobes the block drives). Decoding is by register name; no offset
appears in a core.

Handshake (one outstanding transaction per direction)::

    clk      _/‾\_/‾\_/‾\_/‾\_/‾\_
    awvalid  __/‾‾‾‾‾‾‾‾\_________      address and data wait together
    wvalid   __/‾‾‾‾‾‾‾‾\_________
    awready  ________/‾‾\_________      registered: one cycle after both are valid
    wready   ________/‾‾\_________      the write takes effect on this edge
    bvalid   ____________/‾‾‾‾\___      held until bready
    bresp    ------------< R  >---      OKAY, SLVERR (write to ro) or DECERR (unmapped)

Reads mirror it: ``arready`` one cycle after ``arvalid``, ``rvalid`` with ``rdata``/``rresp`` next.
"""
from __future__ import annotations

from myhdl import ConcatSignal, Signal, always, always_comb, always_seq, block, intbv

from hwcontract.regmap import REG_BITS, RESP_DECERR, RESP_OKAY, RESP_SLVERR, WORD_BYTES, CoreMap

from .pipe import Ram

_KIND_CODE = {"ro": 1, "rw": 2, "pulse": 3}  # 0: unmapped
BYTE = REG_BITS // WORD_BYTES
WORD_MASK = (1 << REG_BITS) - 1
LANES_MASK = (1 << WORD_BYTES) - 1
if (REG_BITS, WORD_BYTES) != (32, 4):
    raise ValueError(f"axil: the byte lanes below are written for 32-bit words of 4 bytes, the map has "
                     f"{REG_BITS}-bit words of {WORD_BYTES} bytes")


class AxiLite:
    """AXI4-Lite slave port; flattens to ``<prefix>_awaddr`` ... ``<prefix>_rready`` on conversion.

    Parameters
    ----------
    addr_width : int
        Byte address bits.
    """

    def __init__(self, addr_width: int) -> None:
        if not 2 < addr_width <= 32:
            raise ValueError(f"AXI-Lite addr_width {addr_width} outside 3..32")
        self.awaddr = Signal(intbv(0)[addr_width:])   # write address
        self.awprot = Signal(intbv(0)[3:])            # protection (ignored)
        self.awvalid = Signal(bool(0))
        self.awready = Signal(bool(0))
        self.wdata = Signal(intbv(0)[REG_BITS:])      # write data
        self.wstrb = Signal(intbv(0)[WORD_BYTES:])    # byte strobes
        self.wvalid = Signal(bool(0))
        self.wready = Signal(bool(0))
        self.bresp = Signal(intbv(0)[2:])             # write response
        self.bvalid = Signal(bool(0))
        self.bready = Signal(bool(0))
        self.araddr = Signal(intbv(0)[addr_width:])   # read address
        self.arprot = Signal(intbv(0)[3:])            # protection (ignored)
        self.arvalid = Signal(bool(0))
        self.arready = Signal(bool(0))
        self.rdata = Signal(intbv(0)[REG_BITS:])      # read data
        self.rresp = Signal(intbv(0)[2:])             # read response
        self.rvalid = Signal(bool(0))
        self.rready = Signal(bool(0))


def register_signals(cmap: CoreMap) -> dict[str, Signal]:
    """Fresh 32-bit signals for every register but ``ID``, ``rw`` ones starting at their reset value.

    The core drives the ``ro`` signals and reads the ``rw`` and ``pulse`` ones; :func:`axil_regs`
    drives the latter two.
    """
    return {r.name: Signal(intbv(r.reset)[REG_BITS:]) for r in cmap.registers if r.name != "ID"}


@block
def _rw_word(clk, rst, sig, written, slot, wr_en, wslot, wstrb, wdata):
    """Storage word: written bytes replace the old ones; ``written`` flags the bytes written since reset.

    One enable per byte and the data bits straight into the flip-flops (FDRE with CE, no LUT per bit);
    ``(sig & ~mask) | (wdata & mask)`` would cost a LUT per stored bit.
    """

    @always_seq(clk.posedge, reset=rst)
    def upd():
        if wr_en and wslot == slot:
            if wstrb[0]:
                sig.next[8:0] = wdata[8:0]
                written.next[0] = 1
            if wstrb[1]:
                sig.next[16:8] = wdata[16:8]
                written.next[1] = 1
            if wstrb[2]:
                sig.next[24:16] = wdata[24:16]
                written.next[2] = 1
            if wstrb[3]:
                sig.next[32:24] = wdata[32:24]
                written.next[3] = 1

    return upd


@block
def _pulse_word(clk, rst, sig, slot, wr_en, wslot, bytemask, wdata):
    """Strobe word: the written bits for one cycle."""

    @always_seq(clk.posedge, reset=rst)
    def upd():
        if wr_en and wslot == slot:
            sig.next = wdata & bytemask
        else:
            sig.next = 0

    return upd


@block
def axil_regs(clk, rst, bus, cmap, regs):
    """Register file and AXI4-Lite slave for ``cmap``.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    bus : AxiLite
        The slave port.
    cmap : CoreMap
        The core's register map; ``ID`` is answered here with ``cmap.map_hash()``.
    regs : dict[str, Signal]
        From :func:`register_signals`: ``ro`` values driven by the core; ``rw`` storage driven here
        (reset to the map's reset value, kept across soft resets); ``pulse`` strobes driven here (the
        written value for one cycle, else 0).
    """
    want = {r.name for r in cmap.registers if r.name != "ID"}
    if set(regs) != want:
        raise ValueError(f"core {cmap.name}: register signals {sorted(regs)} != map's {sorted(want)}")
    if len(bus.awaddr) != cmap.addr_width:
        raise ValueError(f"core {cmap.name}: bus has {len(bus.awaddr)} address bits, map needs {cmap.addr_width}")
    nslots = 1 << (cmap.addr_width - 2)
    kinds = tuple(_KIND_CODE[r.access] for r in cmap.registers) + (0,) * (nslots - len(cmap.registers))
    slot_w = cmap.addr_width - 2

    # Read path. A wide register mux costs about 15 LUTs per 32-bit word read, so the ``rw`` words are
    # read from a shadow copy in distributed RAM (four byte lanes written with the storage words): a
    # byte reads its RAM lane once written since reset, else the register's reset value. Only the
    # ``ro`` words and ID go through the mux (rbus: one word per slot, ConcatSignal puts its first
    # argument at the top; rw and pulse slots are 0 there).
    pieces = []
    for r in reversed(cmap.registers):
        if r.name == "ID":
            pieces.append(intbv(cmap.map_hash())[REG_BITS:])
        elif r.access == "ro":
            pieces.append(regs[r.name])
        else:
            pieces.append(intbv(0)[REG_BITS:])
    rbus = ConcatSignal(*pieces)
    rw_regs = [r for r in cmap.registers if r.access == "rw"]
    resets = [0] * nslots
    for r in rw_regs:
        resets[r.offset // WORD_BYTES] = r.reset
    resets = tuple(resets)
    shadow = [Ram("distributed", nslots, BYTE) for _ in range(WORD_BYTES)]
    sh0, sh1, sh2, sh3 = shadow      # plain names: a list of lists does not convert
    # written-since-reset flags, 4 per slot (byte lanes), only rw slots have flip-flops
    wflags = {r.offset // WORD_BYTES: Signal(intbv(0)[WORD_BYTES:]) for r in rw_regs}
    vbus = ConcatSignal(*[wflags.get(k, intbv(0)[WORD_BYTES:]) for k in reversed(range(nslots))])
    rvalid_b = Signal(intbv(0)[WORD_BYTES:])
    rreset = Signal(intbv(0)[REG_BITS:])

    bytemask = Signal(intbv(0)[REG_BITS:])
    wslot = Signal(intbv(0)[slot_w:])
    rslot = Signal(intbv(0)[slot_w:])
    wkind = Signal(intbv(0)[2:])
    rkind = Signal(intbv(0)[2:])
    wr_en = Signal(bool(0))       # a write to a rw/pulse register commits this cycle
    aw_ok = Signal(bool(0))

    @always_comb
    def decode_slots():
        wslot.next = bus.awaddr[cmap.addr_width:2]
        rslot.next = bus.araddr[cmap.addr_width:2]

    @always_comb
    def kinds_lookup():
        wkind.next = kinds[int(wslot)]
        rkind.next = kinds[int(rslot)]

    @always_comb
    def shadow_lookup():
        rvalid_b.next = (vbus >> (int(rslot) * WORD_BYTES)) & LANES_MASK
        rreset.next = resets[int(rslot)]

    @always(clk.posedge)
    def shadow_write():
        if wr_en and wkind == 2:
            if bus.wstrb[0]:
                sh0[wslot].next = bus.wdata[8:0]
            if bus.wstrb[1]:
                sh1[wslot].next = bus.wdata[16:8]
            if bus.wstrb[2]:
                sh2[wslot].next = bus.wdata[24:16]
            if bus.wstrb[3]:
                sh3[wslot].next = bus.wdata[32:24]

    @always_comb
    def make_bytemask():
        m = intbv(0)[REG_BITS:]
        if bus.wstrb[0]:
            m[8:0] = 0xFF
        if bus.wstrb[1]:
            m[16:8] = 0xFF
        if bus.wstrb[2]:
            m[24:16] = 0xFF
        if bus.wstrb[3]:
            m[32:24] = 0xFF
        bytemask.next = m

    @always_comb
    def write_fire():
        aw_ok.next = bus.awvalid and bus.wvalid and not bus.awready and not (bus.bvalid and not bus.bready)
        wr_en.next = (bus.awvalid and bus.wvalid and not bus.awready and not (bus.bvalid and not bus.bready)
                      and (wkind == 2 or wkind == 3))

    @always_seq(clk.posedge, reset=rst)
    def write_channel():
        bus.awready.next = 0
        bus.wready.next = 0
        if bus.bvalid and bus.bready:
            bus.bvalid.next = 0
        if aw_ok:
            bus.awready.next = 1
            bus.wready.next = 1
            bus.bvalid.next = 1
            if wkind == 0:
                bus.bresp.next = RESP_DECERR
            elif wkind == 1:
                bus.bresp.next = RESP_SLVERR
            else:
                bus.bresp.next = RESP_OKAY

    @always_seq(clk.posedge, reset=rst)
    def read_channel():
        bus.arready.next = 0
        if bus.rvalid and bus.rready:
            bus.rvalid.next = 0
        if bus.arvalid and not bus.arready and not (bus.rvalid and not bus.rready):
            bus.arready.next = 1
            bus.rvalid.next = 1
            if rkind == 2:
                d = intbv(0)[REG_BITS:]
                d[:] = rreset
                if rvalid_b[0]:
                    d[8:0] = sh0[rslot]
                if rvalid_b[1]:
                    d[16:8] = sh1[rslot]
                if rvalid_b[2]:
                    d[24:16] = sh2[rslot]
                if rvalid_b[3]:
                    d[32:24] = sh3[rslot]
                bus.rdata.next = d
            else:
                bus.rdata.next = (rbus >> (int(rslot) * REG_BITS)) & WORD_MASK
            if rkind == 0:
                bus.rresp.next = RESP_DECERR
            else:
                bus.rresp.next = RESP_OKAY

    insts = [decode_slots, kinds_lookup, shadow_lookup, shadow_write, make_bytemask, write_fire, write_channel,
             read_channel]

    for r in cmap.registers:
        if r.access == "rw":
            slot = r.offset // WORD_BYTES
            insts.append(_rw_word(clk, rst, regs[r.name], wflags[slot], slot, wr_en, wslot, bus.wstrb, bus.wdata))
        elif r.access == "pulse":
            insts.append(_pulse_word(clk, rst, regs[r.name], r.offset // WORD_BYTES, wr_en, wslot, bytemask,
                                     bus.wdata))
    return insts


@block
def _wire(src, dst):
    """``dst`` follows ``src``."""

    @always_comb
    def follow():
        dst.next = src

    return follow


#: The AXI-Lite signals the master drives and those the slave drives (AxiLite attribute names), but the
#: write response's handshake (gated) and AWPROT / ARPROT (which the slave ignores).
_FROM_MASTER = ("awaddr", "awvalid", "wdata", "wstrb", "wvalid", "araddr", "arvalid", "rready")
_FROM_SLAVE = ("awready", "wready", "bresp", "arready", "rdata", "rresp", "rvalid")


@block
def axil_hold_b(outer, inner, hold):
    """The port ``outer`` onto ``inner`` (an :func:`axil_regs` slave's), with the write response held while
    ``hold`` is high: BVALID reaches the master, and its BREADY the slave, only when ``hold`` is low.

    A core whose register write starts work that must finish before the master's next read (the verifier's
    tree start checks) holds the response of that write, so the read that follows it sees the outcome. The
    slave takes no other write meanwhile (one outstanding write). ``hold`` must come from registers and
    fall within a bounded time."""

    @always_comb
    def gate():
        outer.bvalid.next = inner.bvalid and not hold
        inner.bready.next = outer.bready and not hold

    return ([gate] + [_wire(getattr(outer, n), getattr(inner, n)) for n in _FROM_MASTER]
            + [_wire(getattr(inner, n), getattr(outer, n)) for n in _FROM_SLAVE])
