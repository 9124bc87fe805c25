r"""treemask: tree-attention mask generator (MyHDL face of docs/treemask.md).

The golden model is ``hls_ref.treemask``; the register map ``hwcontract.regmap.core("treemask")``.

From the parent array of an N-node token tree (node 0 the root, ``parent(i) < i``) the core streams one
128-bit word per node, in node order, TLAST on node N-1::

    row(0) = 1                  row(i) = row(parent(i)) | (1 << i)
    depth(0) = 0                depth(i) = depth(parent(i)) + 1
    word(i) = NODE i [79:72] | DEPTH depth(i) [71:64] | MASK row(i) [63:0]

Structure: ``rows_mem`` (NODES_MAX rows of NODES_MAX bits) and ``depth_mem`` are distributed RAMs with
one write port (node i, as its word is formed) and one asynchronous read port at ``parent(i)``; the word
is formed combinationally from the read and registered into the output stage, which advances whenever it
is empty or taken (one word per cycle while TREADY is high). Retiming keeps the read-form-write loop
short without changing a cycle: the read address ``parent(i)`` is a register, picked from the PARENT*
snapshot for node i+1 as node i is formed; MAX_DEPTH takes the output stage's depth one cycle after it
is loaded; the output stage loads while TLAST is not pending (the last node not yet formed: no counter
compare). The parent checks of CTRL.START are one comparator per node (:func:`parent_check`), ORed and
registered every cycle: NODES and PARENT* change only by register writes, and the AXI-Lite slave commits
at most one write in two cycles, so a START sees checks of the values written before it.

FSM::

    IDLE/DONE --START--> BAD_NODES? BAD_PARENT? --> ERR (sticky until CTRL.SOFT_RESET)
                         else snapshot PARENT*, NODES --> RUN
    RUN: cycle 1 fills the output stage with word 0; then one word per TREADY cycle; after the
         TLAST handshake --> DONE.  CYCLES_BUSY = RUN cycles = N + 1 + stalls (hls_ref.treemask.cycles)

Handshake (N = 3, TREADY low once)::

    clk      _/‾\_/‾\_/‾\_/‾\_/‾\_/‾\_/‾\_
    CTRL     =<ST>=========================     START written
    state    ------< RUN              >DONE
    tvalid   ___________/‾‾‾‾‾‾‾‾‾‾‾‾\____
    tready   ‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾\___/‾‾‾‾‾‾‾
    tdata    -----------< w0 >< w1    >< w2 >
    tlast    ___________________________/‾\     BUSY 5 cycles, STALL 1: 5 - 1 = 3 + 1
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, intbv

from hwcontract import params as hwparams
from hwcontract.regmap import REG_BITS, TREE_PARENT_BITS, core

from .axil import AxiLite, axil_regs, register_signals
from .pipe import Ram

# FSM states
ST_IDLE, ST_RUN, ST_DONE, ST_ERR = range(4)


def _stream_layout(cmap):
    """(width, mask width, depth width, node width, pad width) of ``m_axis``: MASK, DEPTH, NODE packed
    from bit 0 upwards in that order (checked, so that the concatenation below follows the map)."""
    fmt = cmap.stream("m_axis")
    f = {x.name: x for x in fmt.fields}
    mask, depth, node = f["MASK"], f["DEPTH"], f["NODE"]
    if not (mask.lsb == 0 and depth.lsb == mask.width and node.lsb == depth.lsb + depth.width
            and node.lsb + node.width <= fmt.width):
        raise ValueError(f"treemask: m_axis fields {fmt.fields} are not MASK, DEPTH, NODE packed from bit 0")
    return fmt.width, mask.width, depth.width, node.width, fmt.width - node.lsb - node.width


@block
def parent_check(K, parent, nodes, bad):
    """``bad``: node K exists (K < NODES) and its parent field is not below K.

    Parameters
    ----------
    K : int
        The node (1..NODES_MAX-1).
    parent : Signal(intbv[TREE_PARENT_BITS])
        Its PARENT field.
    nodes : Signal(intbv[REG_BITS])
        The NODES register.
    bad : Signal(bool)
        Output.
    """

    @always_comb
    def chk():
        bad.next = nodes > K and parent >= K

    return chk


@block
def treemask(clk, rst, s_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, NODES_MAX=64):
    """Tree-attention mask generator IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("treemask")``).
    m_axis_tdata : Signal(intbv[128])
        Output word: MASK bits 63:0, DEPTH bits 71:64, NODE bits 79:72, the rest 0.
    m_axis_tvalid, m_axis_tready, m_axis_tlast : Signal(bool)
        AXI-Stream handshake; TLAST on node N-1's word.
    NODES_MAX : int
        Largest NODES accepted (1..64): depth of the row and depth memories, width of a row.
    """
    hwparams.check("treemask", dict(NODES_MAX=NODES_MAX))
    cmap = core("treemask")
    WIDTH, MASK_W, DEPTH_W, NODE_W, PAD_W = _stream_layout(cmap)
    if len(m_axis_tdata) != WIDTH:
        raise ValueError(f"treemask: m_axis_tdata has {len(m_axis_tdata)} bits, the map says {WIDTH}")
    W = NODES_MAX                                   # row bits
    PW = max(1, (NODES_MAX - 1).bit_length())       # node index / parent / depth bits (all < NODES_MAX)
    IW = PW + 1                                     # counts 0..NODES_MAX
    MEM = 1 << PW                                   # memory entries (NODES_MAX rounded up to a power of 2)
    PB = TREE_PARENT_BITS
    per_reg = REG_BITS // PB
    NREG = -(-NODES_MAX // per_reg)                 # PARENT registers this build reads

    regs = register_signals(cmap)
    ctrl = cmap.reg("CTRL")
    bit_start = ctrl.field("START").lsb
    bit_soft = ctrl.field("SOFT_RESET").lsb
    st = cmap.reg("STATUS")
    st_busy, st_done, st_err = (st.field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
    errf = cmap.reg("ERR")
    E_BAD_NODES, E_BAD_PARENT = (errf.field(n).mask for n in ("BAD_NODES", "BAD_PARENT"))
    PARAMS_VAL = cmap.reg("PARAMS").encode(NODES_MAX=NODES_MAX)

    regfile = axil_regs(clk, rst, s_axil, cmap, regs)
    insts = [regfile]

    cmd = regs["CTRL"]
    r_nodes = regs["NODES"]
    r_status, r_err, r_params, r_rows, r_maxd, r_cbusy, r_cstall = (regs[n] for n in (
        "STATUS", "ERR", "PARAMS", "ROWS", "MAX_DEPTH", "CYCLES_BUSY", "CYCLES_STALL"))
    pwords = [regs[f"PARENT{k}"] for k in range(NREG)]

    # ---------------- state ----------------
    state = Signal(intbv(ST_IDLE, min=0, max=4))
    busy = Signal(bool(0))
    err = Signal(intbv(0)[REG_BITS:])
    n = Signal(intbv(0)[IW:])                       # NODES of this operation
    i = Signal(intbv(0)[IW:])                       # next node to form
    nxt = Signal(intbv(0)[IW:])                     # i + 1
    par = Signal(intbv(0)[REG_BITS * NREG:])        # PARENT* snapshot, node k in bits 8k+7:8k
    rows = Signal(intbv(0)[REG_BITS:])
    maxd = Signal(intbv(0)[PW:])
    cbusy = Signal(intbv(0)[REG_BITS:])
    cstall = Signal(intbv(0)[REG_BITS:])
    bad_nodes = Signal(bool(0))
    bad_nodes_q, bad_parent_q = Signal(bool(0)), Signal(bool(0))   # the START checks, registered
    load = Signal(bool(0))                          # the output stage takes word i this cycle
    loaded = Signal(bool(0))                        # ... it took one last cycle: fold its depth into maxd
    tvalid = Signal(bool(0))
    tlast = Signal(bool(0))
    out_mask = Signal(intbv(0)[MASK_W:])
    out_depth = Signal(intbv(0)[DEPTH_W:])
    out_node = Signal(intbv(0)[NODE_W:])

    # ---------------- START checks: one comparator per node ----------------
    bads = [Signal(bool(0)) for _ in range(1, NODES_MAX)]   # node 0 has none: the root's byte is ignored
    for k in range(1, NODES_MAX):
        lsb = PB * (k % per_reg)
        insts.append(parent_check(k, pwords[k // per_reg](lsb + PB, lsb), r_nodes, bads[k - 1]))
    bad_bus = ConcatSignal(*reversed(bads)) if len(bads) > 1 else bads[0] if bads else Signal(bool(0))
    par_bus = ConcatSignal(*reversed(pwords)) if NREG > 1 else pwords[0]

    @always_comb
    def nodes_check():
        bad_nodes.next = r_nodes == 0 or r_nodes > NODES_MAX

    @always(clk.posedge)
    def checks_reg():
        bad_nodes_q.next = bad_nodes
        bad_parent_q.next = bad_bus != 0

    insts += [nodes_check, checks_reg]

    # ---------------- row and depth memories (distributed RAM) ----------------
    rows_mem = Ram("distributed", MEM, W)
    depth_mem = Ram("distributed", MEM, PW)
    pidx = Signal(intbv(0)[PW:])
    rd_row = Signal(intbv(0)[W:])
    rd_depth = Signal(intbv(0)[PW:])
    onehot = Signal(intbv(0)[W:])
    row_new = Signal(intbv(0)[W:])
    depth_new = Signal(intbv(0)[PW:])
    waddr = Signal(intbv(0)[PW:])

    @always_comb
    def write_addr():
        waddr.next = i & (MEM - 1)

    @always_comb
    def mem_read():
        rd_row.next = rows_mem[pidx]
        rd_depth.next = depth_mem[pidx]

    @always_comb
    def decode_i():
        v = intbv(0)[W:]
        v[int(waddr)] = 1
        onehot.next = v

    @always_comb
    def form_word():
        if i == 0:
            row_new.next = onehot
            depth_new.next = 0
        else:
            row_new.next = rd_row | onehot
            depth_new.next = rd_depth + 1

    @always(clk.posedge)
    def mem_write():
        if load:
            rows_mem[waddr].next = row_new
            depth_mem[waddr].next = depth_new

    insts += [write_addr, mem_read, decode_i, form_word, mem_write]

    # ---------------- glue ----------------
    @always_comb
    def glue():
        busy.next = state == ST_RUN
        load.next = state == ST_RUN and (not tvalid or m_axis_tready) and not tlast     # i < n
        m_axis_tvalid.next = tvalid
        m_axis_tlast.next = tlast

    tbus = ConcatSignal(intbv(0)[PAD_W:], out_node, out_depth, out_mask) if PAD_W else \
        ConcatSignal(out_node, out_depth, out_mask)

    @always_comb
    def tdata_out():
        m_axis_tdata.next = tbus

    @always_comb
    def regs_out():
        r_status.next = (busy << st_busy) | ((state == ST_DONE) << st_done) | ((err != 0) << st_err)
        r_err.next = err
        r_rows.next = rows
        r_maxd.next = maxd
        r_cbusy.next = cbusy
        r_cstall.next = cstall

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL

    insts += [glue, tdata_out, regs_out, consts]

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        if state == ST_RUN:
            cbusy.next = cbusy + 1
            if tvalid and not m_axis_tready:
                cstall.next = cstall + 1
        loaded.next = 0
        if loaded and out_depth[PW:0] > maxd:
            maxd.next = out_depth[PW:0]
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
            tvalid.next = 0
            tlast.next = 0
        elif state == ST_RUN:
            if tvalid and m_axis_tready:
                rows.next = rows + 1
                if tlast:
                    tvalid.next = 0
                    tlast.next = 0
                    state.next = ST_DONE
            if load:
                out_mask.next = row_new
                out_depth.next = depth_new
                out_node.next = i
                tvalid.next = 1
                tlast.next = i == n - 1
                i.next = nxt
                nxt.next = nxt + 1
                pidx.next = (par >> (nxt * PB)) & (MEM - 1)
                loaded.next = 1
        elif state != ST_ERR and cmd[bit_start]:
            rows.next = 0
            maxd.next = 0
            cbusy.next = 0
            cstall.next = 0
            i.next = 0
            nxt.next = 1
            if bad_nodes_q:
                err.next = E_BAD_NODES
                state.next = ST_ERR
            elif bad_parent_q:
                err.next = E_BAD_PARENT
                state.next = ST_ERR
            else:
                n.next = r_nodes[IW:0]
                par.next = par_bus
                state.next = ST_RUN

    insts.append(fsm)
    return insts


def make_ports(NODES_MAX=64):
    """Top-level signals of :func:`treemask` for conversion and simulation."""
    width = core("treemask").stream("m_axis").width
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("treemask").addr_width),
            Signal(intbv(0)[width:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
