r"""treeattn: the compute sequencer (the passes over the blocks, one (row, head) at a time).

Blocks in order: the context blocks c = 0.. (buffer c % 2, b_c keys), then the step block (row r's visible
nodes: the set bits of MASK[r], lowest first). For each block, for r < N, for h < GROUP, one pass of
``2 b D + D + TA_FILL`` cycles (b: the block's keys, or v_r in the step block)::

    SETUP 1 | SCORE b*D | GAP1 (TA_SCORE - 1) + (TA_DIST + 1) | WEIGHT b*D | WB D | TAIL 4
              q . k       drain to m' (mp_load), weights' head    w * v        rescale + add, l

A block's first pass waits in SETUP until the block has loaded (``lc > cc``, or the step's K/V for the step
block); the cycles it waits are not the pass's. ``cc`` counts the context blocks finished (their buffers free).
Every register advances on ``ce`` only.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, downrange, intbv

from hwcontract import latency as lat

from .treeattn_defs import Geo, bits_for

PH_IDLE, PH_SETUP, PH_SCORE, PH_GAP1, PH_WEIGHT, PH_WB, PH_TAIL, PH_DONE = range(8)
GAP1_LEN = (lat.TA_SCORE - 1) + (lat.TA_DIST + 1)
MP_AT = GAP1_LEN - 1 - (lat.TA_SCORE - 2)           # GAP1's count when m' is latched
TAIL_LEN = lat.TA_FILL - 1 - GAP1_LEN
if TAIL_LEN < 1:
    raise ValueError(f"TA_FILL={lat.TA_FILL} leaves {TAIL_LEN} tail cycles; the pass needs at least one")


@block
def low_bit(rem, j, g: Geo):
    """``j``: the index of the lowest set bit of ``rem`` (0 when none)."""
    N = g.NODES_MAX

    @always_comb
    def enc():
        v = 0
        for i in downrange(N):
            if rem[i]:
                v = i
        j.next = v

    return enc


@block
def sequencer(clk, ce, init, run, n, ctx, lc, step_ld, mrow, r, item, first, is_step, nk, cc, comp_done,
              ph, dd, k, rem, mp_load, st_load, st_wr, g: Geo):
    """The pass FSM (``ph``) and its counters; the issue signals are built from them by :func:`issue`."""
    G, D, B = g.GROUP, g.D, g.BLOCK
    h = Signal(intbv(0)[bits_for(G):])
    cnt = Signal(intbv(0)[bits_for(GAP1_LEN):])
    left = Signal(intbv(0)[bits_for(g.CTX_MAX):])           # context keys not yet computed
    bkeys = Signal(intbv(0)[bits_for(B):])                   # keys of the context block
    rem0 = Signal(intbv(0)[g.NODES_MAX:])
    avail = Signal(bool(0))
    last_key = Signal(bool(0))
    rest = Signal(intbv(0)[g.NODES_MAX:])

    @always_comb
    def decide():
        rest.next = rem & (rem - 1)
        if r == 0 and h == 0:
            if is_step:
                avail.next = step_ld
            else:
                avail.next = lc > cc
        else:
            avail.next = 1
        if is_step:
            last_key.next = (rem & (rem - 1)) == 0
        else:
            last_key.next = k == bkeys - 1
        mp_load.next = ph == PH_GAP1 and cnt == MP_AT
        st_load.next = ph == PH_SETUP and avail
        st_wr.next = ph == PH_TAIL and cnt == 0

    @always(clk.posedge)
    def passes():
        if init:
            ph.next = PH_SETUP
            dd.next = 0
            k.next = 0
        elif ce and run:
            if ph == PH_SETUP:
                if avail:
                    ph.next = PH_SCORE
                    rem.next = mrow
                    rem0.next = mrow
                    if left >= B:
                        bkeys.next = B
                    else:
                        bkeys.next = left
            elif ph == PH_SCORE or ph == PH_WEIGHT:
                if dd == D - 1:
                    dd.next = 0
                    k.next = k + 1
                    rem.next = rest
                    if last_key:
                        if ph == PH_SCORE:
                            ph.next = PH_GAP1
                            cnt.next = GAP1_LEN - 1
                            nk.next = k + 1
                        else:
                            ph.next = PH_WB
                else:
                    dd.next = dd + 1
            elif ph == PH_GAP1:
                if cnt == 0:
                    ph.next = PH_WEIGHT
                    k.next = 0
                    rem.next = rem0
                else:
                    cnt.next = cnt - 1
            elif ph == PH_WB:
                if dd == D - 1:
                    dd.next = 0
                    ph.next = PH_TAIL
                    cnt.next = TAIL_LEN - 1
                else:
                    dd.next = dd + 1
            elif ph == PH_TAIL:
                if cnt == 0:
                    k.next = 0
                    if h == G - 1 and r == n - 1 and is_step:
                        ph.next = PH_DONE
                    else:
                        ph.next = PH_SETUP
                else:
                    cnt.next = cnt - 1

    @always(clk.posedge)
    def items():
        if init:
            r.next = 0
            h.next = 0
            item.next = 0
            cc.next = 0
            left.next = ctx
            first.next = 1
            is_step.next = ctx == 0
            comp_done.next = 0
        elif ce and run and ph == PH_TAIL and cnt == 0:
            if h != G - 1:
                h.next = h + 1
                item.next = item + 1
            elif r != n - 1:
                h.next = 0
                r.next = r + 1
                item.next = item + 1
            else:
                h.next = 0
                r.next = 0
                item.next = 0
                if is_step:
                    comp_done.next = 1
                else:
                    cc.next = cc + 1
                    first.next = 0
                    left.next = left - bkeys
                    is_step.next = left == bkeys

    return [decide, passes, items]


@block
def issue(ph, dd, k, rem, item, is_step, cc, is_sc, is_wt, is_wb, kv_ra, q_ra, acc_ra, g: Geo):
    """The issue of this cycle: its kind, the K/V word of chunk dd (key k of buffer cc % 2, or step node j; V after
    K), the q word of (item, dd) and the accumulator word of (item, dd)."""
    WV, BUF, LG = g.WV, g.BUF, (g.CPW - 1).bit_length()   # a chunk's word: dd >> LG (CPW chunks a word)
    j = Signal(intbv(0)[bits_for(g.NODES_MAX):])
    enc = low_bit(rem, j, g)

    @always_comb
    def addr():
        is_sc.next = ph == PH_SCORE
        is_wt.next = ph == PH_WEIGHT
        is_wb.next = ph == PH_WB
        q_ra.next = item * WV + (dd >> LG)
        acc_ra.next = item * g.D + dd
        if is_step:
            if ph == PH_WEIGHT:
                kv_ra.next = g.KV_STEP + j * (2 * WV) + WV + (dd >> LG)
            else:
                kv_ra.next = g.KV_STEP + j * (2 * WV) + (dd >> LG)
        else:
            if ph == PH_WEIGHT:
                kv_ra.next = (cc % 2) * BUF + k * (2 * WV) + WV + (dd >> LG)
            else:
                kv_ra.next = (cc % 2) * BUF + k * (2 * WV) + (dd >> LG)

    return enc, addr
