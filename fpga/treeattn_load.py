r"""treeattn: the loader (s_axis into the MASK rows, the Q memory and the K/V memory's block buffers).

The frame's regions in order: MASK (N beats: row r's bits NODES_MAX-1..0 into ``mask_mem[r]``, checked: bit r
set, none above), Q (N * GROUP * E beats), the context blocks (``2 * b_c * E`` beats each, into buffer ``c % 2``
once compute has finished block c - 2: ``lc < cc + 2``), the step's K/V (``2 * N * E`` beats, its own region).
A MASK beat r is checked against two registers shifted a beat (bit r, the bits above r), not by a shift of the beat.
The loader wants a beat (``need``) in every cycle of a region but while it waits for a free buffer; it counts the
job's beats and stops the core at the first error: BAD_MASK on a MASK beat, SHORT_STREAM on TLAST before the last
beat, LONG_STREAM on the last beat without TLAST.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, intbv

from .treeattn_defs import Geo, bits_for

LD_MASK, LD_Q, LD_CTX, LD_STEP, LD_DONE = range(5)


@block
def loader(clk, rst, init, take, tdata, tlast, n, ctx, cc, need, lc, step_ld, bad_mask, short, long_, mask_mem,
           mrow_w, q_we, kv_we, q_wa, kv_wa, wdata, g: Geo):
    """The loader's counters; ``take`` is the handshake (a beat arrives this cycle).

    Outputs: ``need`` (combinational), ``lc`` (context blocks loaded), ``step_ld``, the error strobes (this
    cycle's beat is bad), the memories' write enables, addresses and word ``wdata`` (the beat, or with two beats
    a word the one held and this one, in byte order)."""
    BUF, BPW = g.BUF, g.BPW
    LGB = (BPW - 1).bit_length()                # a beat's word: cnt >> LGB
    BW = bits_for(g.BLOCK * 2 * g.E)
    ph = Signal(intbv(LD_DONE, min=0, max=5))
    cnt = Signal(intbv(0)[bits_for(max(g.ITEMS * g.E, g.NODES_MAX * 2 * g.E, g.BLOCK * 2 * g.E)):])
    held = Signal(intbv(0)[len(tdata):])        # the first beat of a two-beat word
    left = Signal(intbv(0)[bits_for(g.CTX_MAX):])           # context keys not yet loaded
    blk = Signal(intbv(0)[BW:])                              # beats of the block being loaded
    beats = Signal(intbv(0)[bits_for(g.NODES_MAX * (1 + g.GROUP * g.E + 2 * g.E) + 2 * g.E * g.CTX_MAX):])
    qbeats = Signal(intbv(0)[bits_for(g.ITEMS * g.E):])
    sbeats = Signal(intbv(0)[bits_for(g.NODES_MAX * 2 * g.E):])
    row_bad = Signal(bool(0))
    onehot = Signal(intbv(1)[g.NODES_MAX:])                 # bit r of the MASK beat r being taken
    above = Signal(intbv(0)[g.NODES_MAX:])                  # the bits above r
    left_n = Signal(intbv(0)[bits_for(g.CTX_MAX):])         # context keys left after the block being loaded
    MW = g.NODES_MAX
    KB = 2 * g.E                                             # beats a key
    ALL = (1 << g.NODES_MAX) - 1

    @always_comb
    def wants():
        if ph == LD_CTX:
            need.next = lc < cc + 2
        else:
            need.next = ph != LD_DONE
        q_we.next = take and ph == LD_Q and cnt % BPW == BPW - 1
        kv_we.next = take and (ph == LD_CTX or ph == LD_STEP) and cnt % BPW == BPW - 1
        q_wa.next = cnt >> LGB
        if ph == LD_STEP:
            kv_wa.next = g.KV_STEP + (cnt >> LGB)
        else:
            kv_wa.next = (lc % 2) * BUF + (cnt >> LGB)
        left_n.next = left - blk // KB
        mrow_w.next = tdata[MW:0]
        row_bad.next = (tdata[MW:0] & onehot) == 0 or (tdata[MW:0] & above) != 0

    @always_comb
    def errors():
        bad_mask.next = take and ph == LD_MASK and row_bad
        short.next = take and tlast and beats != 1
        long_.next = take and not tlast and beats == 1

    @always(clk.posedge)
    def mask_write():
        if take and ph == LD_MASK:
            mask_mem[cnt].next = mrow_w
        if init:
            onehot.next = 1
            above.next = ALL & ~1
        elif take and ph == LD_MASK:
            onehot.next = (onehot << 1) & ALL
            above.next = (above << 1) & ALL

    @always(clk.posedge)
    def seq():
        if rst or init:
            ph.next = LD_MASK
            cnt.next = 0
            lc.next = 0
            step_ld.next = 0
            left.next = ctx
            qbeats.next = n * (g.GROUP * g.E)
            sbeats.next = n * (2 * g.E)
            beats.next = n * (1 + g.GROUP * g.E + 2 * g.E) + ctx * (2 * g.E)
            if ctx >= g.BLOCK:
                blk.next = g.BLOCK * 2 * g.E
            else:
                blk.next = ctx * (2 * g.E)
        elif take:
            beats.next = beats - 1
            cnt.next = cnt + 1
            if ph == LD_MASK and cnt == n - 1:
                ph.next = LD_Q
                cnt.next = 0
            elif ph == LD_Q and cnt == qbeats - 1:
                cnt.next = 0
                ph.next = LD_CTX if left != 0 else LD_STEP
            elif ph == LD_CTX and cnt == blk - 1:
                cnt.next = 0
                lc.next = lc + 1
                left.next = left_n
                if left_n == 0:
                    ph.next = LD_STEP
                elif left_n >= g.BLOCK:
                    blk.next = g.BLOCK * KB
                else:
                    blk.next = left_n * KB
            elif ph == LD_STEP and cnt == sbeats - 1:
                ph.next = LD_DONE
                step_ld.next = 1

    if BPW == 1:
        @always_comb
        def word():
            wdata.next = tdata

        return wants, errors, mask_write, seq, word

    @always(clk.posedge)
    def hold():
        if take:
            held.next = tdata

    @always_comb
    def word2():
        wdata.next = (tdata << len(held)) | held

    return wants, errors, mask_write, seq, hold, word2
