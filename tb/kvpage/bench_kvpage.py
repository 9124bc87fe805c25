"""cocotb side of ``specdec bench kv``: the cycles of each kvpage operation on the RTL, written as JSON to
``$BENCH_OUT``. Every operation is also run through the golden model and compared (``KvpageTB.op``).

Measured: NEW; FORK of sequences of 1, 16 and MAX_BLOCKS rows; WRITE as an append, a copy on write and
an own row; TRANSLATE; COMMIT of a branch holding 1 page and one holding many; ROLLBACK of 1 branch and of
63 (every slot but the sequence's); FREE of a sequence with 63 branches; REFS; INFO.
"""
from __future__ import annotations

import json
import os

import cocotb

from hls_ref import kvpage as golden
from hwcontract.regmap import KV_SLOTS
from tb.kvpage.test_kvpage import KvpageTB

Op = golden.Op


@cocotb.test()
async def bench(dut):
    tb = KvpageTB(dut)
    await tb.reset()
    out: dict[str, dict] = {}

    async def measure(label: str, op: Op, **facts) -> dict:
        res = await tb.op(op)
        assert not res.err, (label, golden._MAP.decode_err(res.err))
        out[label] = {"op": op.code, "cycles": res.cycles, **facts}
        return res.regs

    seq = (await measure("new", Op("NEW")))["RES_SLOT"]
    await measure("write append", Op("WRITE", slot=seq, row=0), rows_before=0)
    await measure("write own row", Op("WRITE", slot=seq, row=0))
    await measure("translate", Op("TRANSLATE", slot=seq, row=0))
    await measure("fork (1 row)", Op("FORK", slot=seq), rows=1)
    await tb.op(Op("FREE", slot=seq))
    # a long sequence: FORK copies its rows; COMMIT and ROLLBACK do not depend on what branches hold
    seq = (await tb.op(Op("NEW"))).regs["RES_SLOT"]
    rows = min(tb.max_blocks // 2, tb.pages // 4)        # room for the branch to grow as many more
    for r in range(rows):
        await tb.op(Op("WRITE", slot=seq, row=r))
        if r + 1 == 16:
            b = (await measure("fork (16 rows)", Op("FORK", slot=seq), rows=16))["RES_SLOT"]
            await tb.op(Op("ROLLBACK", mask=1 << b))
    big = (await measure(f"fork ({rows} rows)", Op("FORK", slot=seq), rows=rows))["RES_SLOT"]
    await measure("write copy-on-write", Op("WRITE", slot=big, row=rows - 1))
    grown = 1
    while tb.state.length[big] < tb.max_blocks and tb.state.free_pages > 2 and grown < rows:
        await tb.op(Op("WRITE", slot=big, row=tb.state.length[big]))
        grown += 1
    small = (await tb.op(Op("FORK", slot=seq))).regs["RES_SLOT"]
    await tb.op(Op("WRITE", slot=small, row=rows - 1))
    await measure(f"commit (branch holding {grown} pages, a sibling rolled back)",
                  Op("COMMIT", slot=big, row=tb.state.length[big]), pages_held=grown)
    seq = big
    one = (await tb.op(Op("FORK", slot=seq))).regs["RES_SLOT"]
    await tb.op(Op("WRITE", slot=one, row=tb.state.length[one] - 1))
    await measure("commit (branch holding 1 page)", Op("COMMIT", slot=one, row=tb.state.length[one]),
                  pages_held=1)
    seq = one
    b1 = (await tb.op(Op("FORK", slot=seq))).regs["RES_SLOT"]
    await tb.op(Op("WRITE", slot=b1, row=tb.state.length[b1] - 1))
    await measure("rollback (1 branch)", Op("ROLLBACK", mask=1 << b1), branches=1)
    mask = 0
    for _ in range(KV_SLOTS - 1):
        b = (await tb.op(Op("FORK", slot=seq))).regs["RES_SLOT"]
        if tb.state.free_pages:
            await tb.op(Op("WRITE", slot=b, row=tb.state.length[b] - 1))
        mask |= 1 << b
    await measure(f"rollback ({KV_SLOTS - 1} branches)", Op("ROLLBACK", mask=mask), branches=KV_SLOTS - 1)
    for _ in range(KV_SLOTS - 1):
        await tb.op(Op("FORK", slot=seq))
    await measure(f"free (sequence with {KV_SLOTS - 1} branches)", Op("FREE", slot=seq), branches=KV_SLOTS - 1)
    await measure("refs", Op("REFS", page=0))
    await measure("info", Op("INFO", slot=0))
    seq = (await tb.op(Op("NEW"))).regs["RES_SLOT"]
    full = min(tb.max_blocks, tb.pages)
    for r in range(full):
        await tb.op(Op("WRITE", slot=seq, row=r))
    await measure(f"fork ({full} rows, a full block table)", Op("FORK", slot=seq), rows=full)
    for v in out.values():
        v["model_cycles"] = golden.CYCLES[v["op"]] + (v.get("rows", 0) if v["op"] == "FORK" else 0)
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump(out, fh, indent=2)
