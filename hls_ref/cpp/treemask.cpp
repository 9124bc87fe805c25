// treemask.cpp: HLS-style C++ reference of the treemask core (tree-attention mask generator).
//
// Bit-exact with docs/treemask.md, the golden model hls_ref/treemask.py and the RTL fpga/treemask.py.
// Written as Vitis HLS source (top function treemask_core, INTERFACE/PIPELINE pragmas); g++ ignores the
// pragmas (-Wno-unknown-pragmas) and the extern "C" entries below make it callable from Python
// (hls_ref/cpp.py).
//
// Register map, error bits, the m_axis word format, the result layout (register group RESULT), the tree
// size and the NODES_MAX bounds come from specdec_regs.h, generated from hwcontract.
#include <stdint.h>

#include "specdec_regs.h"

// Loop labels name the loops for Vitis HLS reports and directives; g++ sees them as unused.
#pragma GCC diagnostic ignored "-Wunused-label"

// Tree facts from the map: one parent byte per node, PARENT0.. contiguous, one mask bit per node.
static const int PARENT_BITS = SPECDEC_TREE_PARENT_BITS;
static const int PARENTS_PER_REG = 32 / PARENT_BITS;
static const int MAX_NODES = SPECDEC_TREE_MAX_NODES;
static const int PARENT_REGS = MAX_NODES / PARENTS_PER_REG;
static const int MASK_BITS = SPECDEC_TREEMASK_STREAM_M_AXIS_MASK_WIDTH;
static const int DEPTH_LSB = SPECDEC_TREEMASK_STREAM_M_AXIS_DEPTH_LSB;
static const int NODE_LSB = SPECDEC_TREEMASK_STREAM_M_AXIS_NODE_LSB;

static_assert(SPECDEC_TREEMASK_PARENT1_OFFSET == SPECDEC_TREEMASK_PARENT0_OFFSET + SPECDEC_WORD_BYTES,
              "PARENT words contiguous");
static_assert(SPECDEC_TREEMASK_PARENT0_P0_WIDTH == PARENT_BITS && SPECDEC_TREEMASK_PARENT0_P1_LSB == PARENT_BITS,
              "parent fields packed from bit 0");
static_assert((SPECDEC_TREEMASK_PARENT15_OFFSET - SPECDEC_TREEMASK_PARENT0_OFFSET) / SPECDEC_WORD_BYTES + 1 ==
                  (unsigned)PARENT_REGS,
              "PARENT0.. hold MAX_NODES parents");
static_assert(SPECDEC_TREEMASK_PARAM_NODES_MAX_MAX == MAX_NODES, "NODES_MAX reaches the largest tree");
static_assert(MASK_BITS == 64 && MAX_NODES == MASK_BITS, "one 64-bit mask row per node");
static_assert(SPECDEC_TREEMASK_STREAM_M_AXIS_MASK_LSB == 0 && DEPTH_LSB >= 64 && NODE_LSB >= 64 &&
              NODE_LSB + SPECDEC_TREEMASK_STREAM_M_AXIS_NODE_WIDTH <= SPECDEC_TREEMASK_STREAM_M_AXIS_WIDTH &&
              SPECDEC_TREEMASK_STREAM_M_AXIS_WIDTH == 128,
              "a word is MASK in the low 64 bits, DEPTH and NODE in the high 64");
static_assert(SPECDEC_TREEMASK_ERR_BAD_NODES == SPECDEC_TREEMASK_ERR_BAD_NODES_MASK, "error bits are ERR fields");
static_assert(SPECDEC_TREEMASK_ERR_BAD_PARENT == SPECDEC_TREEMASK_ERR_BAD_PARENT_MASK, "error bits are ERR fields");

// One m_axis word as two 64-bit halves (TDATA bits 63:0 and 127:64).
struct Word {
    uint64_t lo;
    uint64_t hi;
};

// Result words: the RESULT register group in its order, then ERR and the cycle model's CYCLES_BUSY.
enum {
    RES_ROWS = SPECDEC_TREEMASK_RESULT_ROWS_INDEX,
    RES_MAX_DEPTH = SPECDEC_TREEMASK_RESULT_MAX_DEPTH_INDEX,
    RES_ERR = SPECDEC_TREEMASK_RESULT_COUNT,
    RES_CYCLES,
    RES_COUNT
};

// Parent field of node k from the PARENT register words.
static inline uint32_t parent_of(const uint32_t parent_regs[PARENT_REGS], int k) {
#pragma HLS INLINE
    return (parent_regs[k / PARENTS_PER_REG] >> (PARENT_BITS * (k % PARENTS_PER_REG))) & ((1u << PARENT_BITS) - 1);
}

// CTRL.START's checks in order (BAD_NODES, then BAD_PARENT); 0 when the tree is well formed.
static uint32_t start_error(uint32_t nodes, const uint32_t parent_regs[PARENT_REGS], uint32_t nodes_max) {
    if (nodes == 0 || nodes > nodes_max) return SPECDEC_TREEMASK_ERR_BAD_NODES;
check:
    for (int k = 1; k < MAX_NODES; ++k) {
#pragma HLS UNROLL
        if ((uint32_t)k < nodes && parent_of(parent_regs, k) >= (uint32_t)k) return SPECDEC_TREEMASK_ERR_BAD_PARENT;
    }
    return 0;
}

// Top function (Vitis HLS): the ancestor mask and depths of the tree in NODES / PARENT*.
//
// nodes        in   the NODES register.
// parent_regs  in   PARENT0..PARENT15.
// nodes_max    in   the build's NODES_MAX (SPECDEC_TREEMASK_PARAM_NODES_MAX_MIN..MAX).
// out          out  one word per node (an AXI-Stream in hardware, TLAST on node N-1); nothing on error.
// result       out  ROWS, MAX_DEPTH, ERR and the cycle model's CYCLES_BUSY (N + 1; 0 on error).
void treemask_core(uint32_t nodes, const uint32_t parent_regs[PARENT_REGS], uint32_t nodes_max, Word out[MAX_NODES],
                   uint32_t result[RES_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=nodes bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=parent_regs bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=out
    for (int k = 0; k < RES_COUNT; ++k) result[k] = 0;
    const uint32_t err = start_error(nodes, parent_regs, nodes_max);
    if (err) {
        result[RES_ERR] = err;
        return;
    }
    uint64_t row_mem[MAX_NODES];      // distributed RAM, read at parent(i)
    uint8_t depth_mem[MAX_NODES];
#pragma HLS DEPENDENCE variable=row_mem inter false
#pragma HLS DEPENDENCE variable=depth_mem inter false
    uint32_t max_depth = 0;
rows:
    for (uint32_t i = 0; i < nodes; ++i) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=64
        uint64_t row = (uint64_t)1 << i;
        uint32_t depth = 0;
        if (i) {
            const uint32_t p = parent_of(parent_regs, (int)i);
            row |= row_mem[p];
            depth = depth_mem[p] + 1u;
        }
        row_mem[i] = row;
        depth_mem[i] = (uint8_t)depth;
        if (depth > max_depth) max_depth = depth;
        out[i].lo = row;
        out[i].hi = ((uint64_t)depth << (DEPTH_LSB - 64)) | ((uint64_t)i << (NODE_LSB - 64));
    }
    result[RES_ROWS] = nodes;
    result[RES_MAX_DEPTH] = max_depth;
    result[RES_CYCLES] = nodes + 1;   // one row per cycle after the cycle that fills the output register
}

// ---- host entries (not synthesised) -----------------------------------------------------------

extern "C" {

// Runs one tree: parent_regs[PARENT_REGS] as the PARENT registers hold them, out[2 * MAX_NODES] receives
// each word's (lo, hi) halves, result[RES_COUNT] = ROWS, MAX_DEPTH, ERR, cycles. Returns the ERR bits; -1 for
// a bad nodes_max.
int treemask_run(uint32_t nodes, const uint32_t *parent_regs, uint32_t nodes_max, uint64_t *out, uint32_t *result) {
    if (nodes_max < SPECDEC_TREEMASK_PARAM_NODES_MAX_MIN || nodes_max > SPECDEC_TREEMASK_PARAM_NODES_MAX_MAX)
        return -1;
    treemask_core(nodes, parent_regs, nodes_max, reinterpret_cast<Word *>(out), result);
    return (int)result[RES_ERR];
}

// Register facts compiled in: PARENT registers, nodes they hold, and the ID hash.
uint32_t treemask_parent_regs(void) { return PARENT_REGS; }
uint32_t treemask_id_hash(void) { return SPECDEC_TREEMASK_ID_HASH; }

}  // extern "C"
