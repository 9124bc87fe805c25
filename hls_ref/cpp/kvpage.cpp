// kvpage.cpp: HLS-style C++ reference of the kvpage core (KV-cache page table).
//
// Bit-exact with the golden model hls_ref/kvpage.py (and docs/kvpage.md, fpga/kvpage.py). Written as Vitis
// HLS source (top function kvpage_core, INTERFACE/PIPELINE pragmas); g++ ignores the pragmas
// (-Wno-unknown-pragmas) and the extern "C" entries below make it callable from Python (hls_ref/cpp.py).
//
// The state is kept the way the RTL keeps it, not the way the golden model's tuples do: per-slot registers
// (kind, parent, base, len and the chain's head, tail and count), the block tables table[slot][row], one
// NEXT link per page (every chain is a singly linked list; the link of a chain's tail is stale and never
// read, the count bounds every chain), the row each page was allocated for (ROWOF), the free list (head,
// count), the bump pointer and FREE_PAGES. No operation walks a chain: COMMIT splices at most two links,
// ROLLBACK and FREE relabel slots, and a zombie's chain joins the free list with one link. Reference counts
// are not stored: REFS computes them as the RTL does, from ROWOF and the 64 block tables.
//
// Register map, op and kind codes, error bits, the result layout (register groups RESULT and STATE), the
// sizes and the PAGES / MAX_BLOCKS bounds come from specdec_regs.h, generated from hwcontract.
#include <stdint.h>

#include <new>

#include "specdec_regs.h"

// Loop labels name the loops for Vitis HLS reports and directives; g++ sees them as unused.
#pragma GCC diagnostic ignored "-Wunused-label"

// Sizes: one bit per slot in MASK_HI:MASK_LO, SEQS_*, BRANCHES_*; state and memories for the largest build (a
// core with fewer SLOTS uses slots 0..slots-1; the others stay free and out of every mask).
static const int SLOTS = SPECDEC_KV_SLOTS;
static const int MAX_PAGES = SPECDEC_KVPAGE_PARAM_PAGES_MAX;
static const int MAX_BLOCKS_MAX = SPECDEC_KVPAGE_PARAM_MAX_BLOCKS_MAX;
static_assert(SPECDEC_KVPAGE_PARAM_PAGES_MAX == SPECDEC_KV_MAX_PAGES &&
              SPECDEC_KVPAGE_PARAM_MAX_BLOCKS_MAX == SPECDEC_KV_MAX_BLOCKS, "parameters reach the map's sizes");
static_assert(SLOTS == 64, "slot masks are 64-bit words");

// Op codes, slot kinds and error bits from the map.
static const uint32_t OP_NEW = SPECDEC_KVPAGE_OP_CODE_NEW;
static const uint32_t OP_FORK = SPECDEC_KVPAGE_OP_CODE_FORK;
static const uint32_t OP_WRITE = SPECDEC_KVPAGE_OP_CODE_WRITE;
static const uint32_t OP_TRANSLATE = SPECDEC_KVPAGE_OP_CODE_TRANSLATE;
static const uint32_t OP_COMMIT = SPECDEC_KVPAGE_OP_CODE_COMMIT;
static const uint32_t OP_ROLLBACK = SPECDEC_KVPAGE_OP_CODE_ROLLBACK;
static const uint32_t OP_FREE = SPECDEC_KVPAGE_OP_CODE_FREE;
static const uint32_t OP_REFS = SPECDEC_KVPAGE_OP_CODE_REFS;
static const uint32_t OP_INFO = SPECDEC_KVPAGE_OP_CODE_INFO;
static const uint32_t OP_CLEAR = SPECDEC_KVPAGE_OP_CODE_CLEAR;

static const uint8_t KIND_FREE = SPECDEC_KVPAGE_RES_INFO_KIND_FREE;
static const uint8_t KIND_SEQ = SPECDEC_KVPAGE_RES_INFO_KIND_SEQ;
static const uint8_t KIND_BRANCH = SPECDEC_KVPAGE_RES_INFO_KIND_BRANCH;
static const uint8_t KIND_ZOMBIE = SPECDEC_KVPAGE_RES_INFO_KIND_ZOMBIE;

static const uint32_t FLAG_ALLOC = SPECDEC_KVPAGE_RES_FLAGS_ALLOC_MASK;
static const uint32_t FLAG_COPY = SPECDEC_KVPAGE_RES_FLAGS_COPY_MASK;

// BUSY cycles of each operation (hls_ref.kvpage.CYCLES, docs/kvpage.md): FORK adds one per row it copies,
// REFS one per slot it compares (CYCLES_REFS_BASE + slots); an error costs the check cycle only.
static const uint32_t CYCLES_NEW = 2, CYCLES_FORK = 4, CYCLES_WRITE = 4, CYCLES_TRANSLATE = 4, CYCLES_COMMIT = 7,
                      CYCLES_ROLLBACK = 4, CYCLES_FREE = 4, CYCLES_REFS_BASE = 5, CYCLES_INFO = 2,
                      CYCLES_CLEAR = 2, CYCLES_ERROR = 1;

static_assert((1u << SPECDEC_KVPAGE_RES_INFO_PARENT_WIDTH) == (uint32_t)SLOTS, "PARENT names one of 64 slots");
static_assert(SPECDEC_KVPAGE_MASK_HI_OFFSET == SPECDEC_KVPAGE_MASK_LO_OFFSET + SPECDEC_WORD_BYTES,
              "MASK_HI:MASK_LO is one 64-bit slot mask");
static_assert((1u << SPECDEC_KVPAGE_OP_CODE_WIDTH) > OP_CLEAR && SPECDEC_KVPAGE_OP_CODE_LSB == 0u,
              "op codes fit OP.CODE");
static_assert(SPECDEC_KVPAGE_RES_INFO_KIND_LSB == 0u && (1u << SPECDEC_KVPAGE_RES_INFO_KIND_WIDTH) > KIND_ZOMBIE,
              "kinds fit RES_INFO.KIND");
static_assert(KIND_FREE != KIND_SEQ && KIND_FREE != KIND_BRANCH && KIND_FREE != KIND_ZOMBIE &&
              KIND_SEQ != KIND_BRANCH && KIND_SEQ != KIND_ZOMBIE && KIND_BRANCH != KIND_ZOMBIE, "kinds distinct");
static_assert((1u << ((1u << SPECDEC_KVPAGE_PARAMS_PAGES_LOG2_WIDTH) - 1)) >= (uint32_t)MAX_PAGES &&
              (1u << ((1u << SPECDEC_KVPAGE_PARAMS_BLOCKS_LOG2_WIDTH) - 1)) >= (uint32_t)MAX_BLOCKS_MAX,
              "PARAMS holds log2 of the largest PAGES and MAX_BLOCKS");
static_assert(MAX_PAGES <= 65536 && MAX_BLOCKS_MAX < 65536, "page ids and row counts fit uint16_t");
static_assert(SPECDEC_KVPAGE_ERR_BAD_OP == SPECDEC_KVPAGE_ERR_BAD_OP_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_BAD_SLOT == SPECDEC_KVPAGE_ERR_BAD_SLOT_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_NO_SLOT == SPECDEC_KVPAGE_ERR_NO_SLOT_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_POOL_EMPTY == SPECDEC_KVPAGE_ERR_POOL_EMPTY_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_BAD_ROW == SPECDEC_KVPAGE_ERR_BAD_ROW_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_SHARED_ROW == SPECDEC_KVPAGE_ERR_SHARED_ROW_MASK, "error bits are ERR fields");
static_assert(SPECDEC_KVPAGE_ERR_BAD_PAGE == SPECDEC_KVPAGE_ERR_BAD_PAGE_MASK, "error bits are ERR fields");

// Result and state registers: the RESULT group (the registers an operation may write), then the STATE group
// (always visible), in the groups' order.
enum {
    REG_RES_SLOT = SPECDEC_KVPAGE_RESULT_RES_SLOT_INDEX,
    REG_RES_PAGE = SPECDEC_KVPAGE_RESULT_RES_PAGE_INDEX,
    REG_RES_SRC = SPECDEC_KVPAGE_RESULT_RES_SRC_INDEX,
    REG_RES_FLAGS = SPECDEC_KVPAGE_RESULT_RES_FLAGS_INDEX,
    REG_RES_REFS = SPECDEC_KVPAGE_RESULT_RES_REFS_INDEX,
    REG_RES_INFO = SPECDEC_KVPAGE_RESULT_RES_INFO_INDEX,
    REG_RES_LEN = SPECDEC_KVPAGE_RESULT_RES_LEN_INDEX,
    REG_RES_BASE = SPECDEC_KVPAGE_RESULT_RES_BASE_INDEX,
    REG_RES_COUNT = SPECDEC_KVPAGE_RESULT_RES_COUNT_INDEX,
    NUM_RES_REGS = SPECDEC_KVPAGE_RESULT_COUNT,   // the result registers an operation writes
    REG_FREE_PAGES = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_FREE_PAGES_INDEX,
    REG_SEQS_LO = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_SEQS_LO_INDEX,
    REG_SEQS_HI = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_SEQS_HI_INDEX,
    REG_BRANCHES_LO = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_BRANCHES_LO_INDEX,
    REG_BRANCHES_HI = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_BRANCHES_HI_INDEX,
    NUM_REGS = NUM_RES_REGS + SPECDEC_KVPAGE_STATE_COUNT
};

// Words of kvpage_core's result: ERR, the cycle model's CYCLES_BUSY, the mask of the result registers the
// operation wrote (bit i: register i of the RESULT group), then the values of the RESULT and STATE groups.
enum { OUT_ERR = 0, OUT_CYCLES, OUT_WRITTEN, OUT_REGS, OUT_COUNT = OUT_REGS + NUM_REGS };

// The core's state. The per-slot fields are registers (the 64-wide masks and priority encoders read them
// all at once); table, next and rowof are block RAMs, read and written one word per cycle.
struct KvState {
    uint32_t pages;                           // build parameters (PARAMS)
    uint32_t max_blocks;
    uint32_t slots;
    uint8_t kind[SLOTS];
    uint8_t parent[SLOTS];                    // a branch's sequence
    uint16_t base[SLOTS];                     // a branch's rows 0..base-1 are its sequence's
    uint16_t len[SLOTS];                      // rows in the block table
    uint16_t head[SLOTS];                     // the slot's chain: first page, last page, pages
    uint16_t tail[SLOTS];
    uint16_t count[SLOTS];
    uint16_t table[SLOTS][MAX_BLOCKS_MAX];    // block tables
    uint16_t next[MAX_PAGES];                 // chain links
    uint16_t rowof[MAX_PAGES];                // row each page was allocated for
    uint16_t free_head;                       // the free list
    uint16_t free_count;
    uint16_t bump;                            // pages bump .. pages-1 were never used
    uint16_t free_pages;                      // FREE_PAGES
    uint32_t regs[NUM_RES_REGS];              // RES_SLOT .. RES_COUNT keep their values between operations
};

// The state after reset or CLEAR. Tables, links and ROWOF keep stale values: nothing reads a row at or
// past a slot's LEN, a link past a chain's count or the ROWOF of a page at or past the bump pointer.
static void reset_state(KvState &st) {
reset:
    for (int s = 0; s < SLOTS; ++s) {
#pragma HLS UNROLL
        st.kind[s] = KIND_FREE;
        st.parent[s] = 0;
        st.base[s] = 0;
        st.len[s] = 0;
        st.head[s] = 0;
        st.tail[s] = 0;
        st.count[s] = 0;
    }
    st.free_head = 0;
    st.free_count = 0;
    st.bump = 0;
    st.free_pages = (uint16_t)st.pages;
}

static inline bool is_live(uint8_t k) {
#pragma HLS INLINE
    return k == KIND_SEQ || k == KIND_BRANCH;
}

// Bit s: slot s has kind k (SEQS, BRANCHES, and the priority encoders' inputs).
static uint64_t kind_mask(const KvState &st, uint8_t k) {
#pragma HLS INLINE
    uint64_t m = 0;
mask:
    for (int s = 0; s < SLOTS; ++s) {
#pragma HLS UNROLL
        if (s < (int)st.slots && st.kind[s] == k) m |= (uint64_t)1 << s;
    }
    return m;
}

// Bit s: slot s is a live branch of sequence q.
static uint64_t children_mask(const KvState &st, int q) {
#pragma HLS INLINE
    uint64_t m = 0;
children:
    for (int s = 0; s < SLOTS; ++s) {
#pragma HLS UNROLL
        if (st.kind[s] == KIND_BRANCH && st.parent[s] == q) m |= (uint64_t)1 << s;
    }
    return m;
}

// Index of the lowest set bit of m (m != 0): a priority encoder.
static inline int lowest(uint64_t m) {
#pragma HLS INLINE
    return __builtin_ctzll(m);
}

// NEW/FORK's slot: the lowest free one, else the lowest zombie; -1 when all slots are live.
static int pick_slot(const KvState &st) {
    const uint64_t free_slots = kind_mask(st, KIND_FREE);
    if (free_slots) return lowest(free_slots);
    const uint64_t zombies = kind_mask(st, KIND_ZOMBIE);
    return zombies ? lowest(zombies) : -1;
}

// Claim pick_slot's slot (the caller checked there is one); a zombie's chain goes to the front of the free
// list with one link. Its pages were free already: FREE_PAGES does not change.
static int take_slot(KvState &st) {
    const int n = pick_slot(st);
    if (st.kind[n] == KIND_ZOMBIE && st.count[n]) {
        st.next[st.tail[n]] = st.free_head;
        st.free_head = st.head[n];
        st.free_count = (uint16_t)(st.free_count + st.count[n]);
    }
    st.count[n] = 0;
    return n;
}

// A page from the pool for row `row` (the caller checked FREE_PAGES > 0): the free list's head, else the
// bump pointer, else the head of the lowest zombie's chain (a zombie whose chain empties becomes free).
static uint16_t alloc_page(KvState &st, uint32_t row) {
    uint16_t p;
    if (st.free_count) {
        p = st.free_head;
        st.free_head = st.next[p];
        st.free_count--;
    } else if (st.bump < st.pages) {
        p = st.bump++;
    } else {
        const int z = lowest(kind_mask(st, KIND_ZOMBIE));
        p = st.head[z];
        st.head[z] = st.next[p];
        if (--st.count[z] == 0) st.kind[z] = KIND_FREE;
    }
    st.free_pages--;
    st.rowof[p] = (uint16_t)row;
    return p;
}

// Slot s dies: its mappings go; with pages on its chain it becomes a zombie (they are free now).
static void kill_slot(KvState &st, int s) {
#pragma HLS INLINE
    st.kind[s] = st.count[s] ? KIND_ZOMBIE : KIND_FREE;
    st.free_pages = (uint16_t)(st.free_pages + st.count[s]);
}

// Slots whose block table maps page p at its row ROWOF[p] (the only row a page is ever mapped at): the
// reference count. Pages at or past the bump pointer were never used.
static uint32_t refs_of(const KvState &st, uint32_t p) {
    if (p >= st.bump) return 0;
    const uint32_t r = st.rowof[p];
    uint32_t n = 0;
refs:
    for (int s = 0; s < SLOTS; ++s) {
#pragma HLS PIPELINE II=1
        if (is_live(st.kind[s]) && r < st.len[s] && st.table[s][r] == p) ++n;
    }
    return n;
}

// START's checks for each operation, in the RTL's order (hls_ref.kvpage.start_error); 0 when it runs.
static uint32_t start_error(const KvState &st, uint32_t code, uint32_t slot, uint32_t row, uint32_t page,
                            uint64_t mask) {
    const bool slot_ok = slot < st.slots;
    const int kind = slot_ok ? st.kind[slot] : -1;
    switch (code) {
    case OP_NEW:
        return pick_slot(st) < 0 ? SPECDEC_KVPAGE_ERR_NO_SLOT : 0;
    case OP_FORK:
        if (kind != KIND_SEQ) return SPECDEC_KVPAGE_ERR_BAD_SLOT;
        return pick_slot(st) < 0 ? SPECDEC_KVPAGE_ERR_NO_SLOT : 0;
    case OP_TRANSLATE:
        if (kind != KIND_SEQ && kind != KIND_BRANCH) return SPECDEC_KVPAGE_ERR_BAD_SLOT;
        return row >= st.len[slot] ? SPECDEC_KVPAGE_ERR_BAD_ROW : 0;
    case OP_WRITE: {
        if (kind != KIND_SEQ && kind != KIND_BRANCH) return SPECDEC_KVPAGE_ERR_BAD_SLOT;
        const uint32_t n = st.len[slot], base = st.base[slot];
        if (row >= st.max_blocks || row > n) return SPECDEC_KVPAGE_ERR_BAD_ROW;
        const bool cow_row = kind == KIND_BRANCH && base > 0 && row == base - 1;
        if ((kind == KIND_BRANCH && base > 0 && row < base - 1) ||
            (kind == KIND_SEQ && row < n && children_mask(st, (int)slot)))
            return SPECDEC_KVPAGE_ERR_SHARED_ROW;
        const bool needs_page = row == n || cow_row;
        return needs_page && st.free_pages == 0 ? SPECDEC_KVPAGE_ERR_POOL_EMPTY : 0;
    }
    case OP_COMMIT:
        if (kind != KIND_BRANCH) return SPECDEC_KVPAGE_ERR_BAD_SLOT;
        return row > st.len[slot] ? SPECDEC_KVPAGE_ERR_BAD_ROW : 0;
    case OP_ROLLBACK:
        return mask & ~kind_mask(st, KIND_BRANCH) ? SPECDEC_KVPAGE_ERR_BAD_SLOT : 0;
    case OP_FREE:
        return kind == KIND_SEQ ? 0 : SPECDEC_KVPAGE_ERR_BAD_SLOT;
    case OP_REFS:
        return page < st.pages ? 0 : SPECDEC_KVPAGE_ERR_BAD_PAGE;
    case OP_INFO:
        return slot_ok ? 0 : SPECDEC_KVPAGE_ERR_BAD_SLOT;
    case OP_CLEAR:
        return 0;
    default:
        return SPECDEC_KVPAGE_ERR_BAD_OP;
    }
}

// COMMIT: branch b becomes its sequence's sequence, keeping its first `keep` rows. Two splices, no walk:
// with cut = min(keep, base) and kb = keep - base, the new chain is the sequence's pages of rows 0..cut-1
// (ending at page j = table[b][cut-1]) then b's own pages of rows base..keep-1 (ending at k =
// table[b][keep-1]); the rest of both chains is the freed chain, which the sequence's slot keeps as a
// zombie. The sequence's other branches die.
static void commit(KvState &st, int b, uint32_t keep) {
    const int q = st.parent[b];
    const uint32_t base_b = st.base[b];
    const uint32_t cut = keep < base_b ? keep : base_b;
    const uint32_t kb = keep > base_b ? keep - base_b : 0;   // b's own rows kept
    // Reads: the two cut points and the links after them.
    const uint16_t j = cut ? st.table[b][cut - 1] : 0;
    const uint16_t k = kb ? st.table[b][keep - 1] : 0;
    const uint16_t s_rest_head = cut ? st.next[j] : st.head[q];
    const uint32_t s_rest_count = st.count[q] - cut;
    const uint16_t s_rest_tail = st.tail[q];
    const uint16_t b_rest_head = kb ? st.next[k] : st.head[b];
    const uint32_t b_rest_count = st.count[b] - kb;
    const uint16_t b_rest_tail = st.tail[b];
    // The kept chain: sequence rows 0..cut-1, then b's rows base..keep-1.
    const uint16_t new_head = cut ? st.head[q] : st.head[b];
    const uint16_t new_tail = kb ? k : j;
    const uint32_t new_count = cut + kb;
    if (cut && kb) st.next[j] = st.head[b];
    // The freed chain: the sequence's rest, then b's rest.
    if (s_rest_count && b_rest_count) st.next[s_rest_tail] = b_rest_head;
    st.head[q] = s_rest_count ? s_rest_head : b_rest_head;
    st.tail[q] = b_rest_count ? b_rest_tail : s_rest_tail;
    st.count[q] = (uint16_t)(s_rest_count + b_rest_count);
    const uint64_t siblings = children_mask(st, q) & ~((uint64_t)1 << b);
    kill_slot(st, q);
siblings:
    for (int s = 0; s < SLOTS; ++s) {
#pragma HLS UNROLL
        if (siblings >> s & 1) kill_slot(st, s);
    }
    st.kind[b] = KIND_SEQ;
    st.parent[b] = 0;
    st.base[b] = 0;
    st.len[b] = (uint16_t)keep;
    st.head[b] = new_head;
    st.tail[b] = new_tail;
    st.count[b] = (uint16_t)new_count;
}

// Top function (Vitis HLS): one operation (CTRL.START with the operand registers below).
//
// st      in/out  the core's state (registers and memories; its pages / max_blocks are the build's).
// code    in      OP.CODE (a value that is no operation is ERR.BAD_OP).
// slot, row, page, mask  in  SLOT, ROW, PAGE and MASK_HI:MASK_LO.
// result  out     OUT_COUNT words: ERR, the cycle model's CYCLES_BUSY, the mask of the result registers
//                 this operation wrote, and the values of RES_SLOT .. BRANCHES_HI after it. An error
//                 changes no state and writes no result register.
void kvpage_core(KvState &st, uint32_t code, uint32_t slot, uint32_t row, uint32_t page, uint64_t mask,
                 uint32_t result[OUT_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=code bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=slot bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=row bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=page bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=mask bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
    uint32_t err = start_error(st, code, slot, row, page, mask);
    uint32_t cycles = CYCLES_ERROR;
    uint32_t written = 0;
    if (!err) {
        switch (code) {
        case OP_NEW: {
            const int n = take_slot(st);
            st.kind[n] = KIND_SEQ;
            st.parent[n] = 0;
            st.base[n] = 0;
            st.len[n] = 0;
            st.regs[REG_RES_SLOT] = (uint32_t)n;
            written = 1u << REG_RES_SLOT;
            cycles = CYCLES_NEW;
            break;
        }
        case OP_FORK: {
            const int b = take_slot(st);
            const uint32_t n = st.len[slot];
        copy:
            for (uint32_t r = 0; r < n; ++r) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=0 max=1024
                st.table[b][r] = st.table[slot][r];
            }
            st.kind[b] = KIND_BRANCH;
            st.parent[b] = (uint8_t)slot;
            st.base[b] = (uint16_t)n;
            st.len[b] = (uint16_t)n;
            st.regs[REG_RES_SLOT] = (uint32_t)b;
            written = 1u << REG_RES_SLOT;
            cycles = CYCLES_FORK + n;
            break;
        }
        case OP_WRITE: {
            const uint32_t n = st.len[slot], base = st.base[slot];
            uint32_t src = 0, flags = 0;
            uint16_t p;
            if (base <= row && row < n) {             // an own row: its page
                p = st.table[slot][row];
            } else if (row == n) {                    // append a row: a new page at the chain's tail
                p = alloc_page(st, row);
                st.table[slot][row] = p;
                st.len[slot] = (uint16_t)(n + 1);
                if (st.count[slot]) st.next[st.tail[slot]] = p;
                else st.head[slot] = p;
                st.tail[slot] = p;
                st.count[slot]++;
                flags = FLAG_ALLOC;
            } else {                                  // copy on write of the last shared row (base - 1)
                p = alloc_page(st, row);
                src = st.table[slot][row];
                st.table[slot][row] = p;
                st.base[slot] = (uint16_t)(base - 1);
                st.next[p] = st.head[slot];           // the new page heads the branch's chain
                if (!st.count[slot]) st.tail[slot] = p;
                st.head[slot] = p;
                st.count[slot]++;
                flags = FLAG_ALLOC | FLAG_COPY;
            }
            st.regs[REG_RES_PAGE] = p;
            st.regs[REG_RES_SRC] = src;
            st.regs[REG_RES_FLAGS] = flags;
            written = 1u << REG_RES_PAGE | 1u << REG_RES_SRC | 1u << REG_RES_FLAGS;
            cycles = CYCLES_WRITE;
            break;
        }
        case OP_TRANSLATE:
            st.regs[REG_RES_PAGE] = st.table[slot][row];
            written = 1u << REG_RES_PAGE;
            cycles = CYCLES_TRANSLATE;
            break;
        case OP_COMMIT:
            commit(st, (int)slot, row);
            st.regs[REG_RES_SLOT] = slot;
            written = 1u << REG_RES_SLOT;
            cycles = CYCLES_COMMIT;
            break;
        case OP_ROLLBACK:
        case OP_FREE: {
            const uint64_t dying = code == OP_ROLLBACK ? mask : children_mask(st, (int)slot) | (uint64_t)1 << slot;
        kill:
            for (int s = 0; s < SLOTS; ++s) {
#pragma HLS UNROLL
                if (dying >> s & 1) kill_slot(st, s);
            }
            cycles = code == OP_ROLLBACK ? CYCLES_ROLLBACK : CYCLES_FREE;
            break;
        }
        case OP_REFS:
            st.regs[REG_RES_REFS] = refs_of(st, page);
            written = 1u << REG_RES_REFS;
            cycles = CYCLES_REFS_BASE + st.slots;
            break;
        case OP_INFO: {
            const uint8_t k = st.kind[slot];
            const uint32_t par = k == KIND_BRANCH ? st.parent[slot] : 0;
            st.regs[REG_RES_INFO] = (uint32_t)k << SPECDEC_KVPAGE_RES_INFO_KIND_LSB |
                                    par << SPECDEC_KVPAGE_RES_INFO_PARENT_LSB;
            st.regs[REG_RES_LEN] = is_live(k) ? st.len[slot] : 0;
            st.regs[REG_RES_BASE] = k == KIND_BRANCH ? st.base[slot] : 0;
            st.regs[REG_RES_COUNT] = st.count[slot];
            written = 1u << REG_RES_INFO | 1u << REG_RES_LEN | 1u << REG_RES_BASE | 1u << REG_RES_COUNT;
            cycles = CYCLES_INFO;
            break;
        }
        default:   // OP_CLEAR
            reset_state(st);
            cycles = CYCLES_CLEAR;
            break;
        }
    }
    const uint64_t seqs = kind_mask(st, KIND_SEQ), branches = kind_mask(st, KIND_BRANCH);
    result[OUT_ERR] = err;
    result[OUT_CYCLES] = cycles;
    result[OUT_WRITTEN] = written;
out:
    for (int i = 0; i < NUM_RES_REGS; ++i) result[OUT_REGS + i] = st.regs[i];
    result[OUT_REGS + REG_FREE_PAGES] = st.free_pages;
    result[OUT_REGS + REG_SEQS_LO] = (uint32_t)seqs;
    result[OUT_REGS + REG_SEQS_HI] = (uint32_t)(seqs >> 32);
    result[OUT_REGS + REG_BRANCHES_LO] = (uint32_t)branches;
    result[OUT_REGS + REG_BRANCHES_HI] = (uint32_t)(branches >> 32);
}

// ---- host entries (not synthesised) -----------------------------------------------------------

// Whether `v` is one of the `n` allowed values of a build parameter (SPECDEC_KVPAGE_PARAM_*_VALUES).
static bool param_in(uint32_t v, const int32_t *allowed, int n) {
    for (int i = 0; i < n; ++i)
        if (v == (uint32_t)allowed[i]) return true;
    return false;
}

extern "C" {

// A core after reset with PAGES = pages, MAX_BLOCKS = max_blocks and SLOTS = slots (hwcontract.params,
// SPECDEC_KVPAGE_PARAM_*_VALUES); NULL for bad parameters. Free it with kvpage_destroy.
void *kvpage_create(uint32_t pages, uint32_t max_blocks, uint32_t slots) {
    if (!param_in(pages, SPECDEC_KVPAGE_PARAM_PAGES_VALUES, SPECDEC_KVPAGE_PARAM_PAGES_COUNT) ||
        !param_in(max_blocks, SPECDEC_KVPAGE_PARAM_MAX_BLOCKS_VALUES, SPECDEC_KVPAGE_PARAM_MAX_BLOCKS_COUNT) ||
        !param_in(slots, SPECDEC_KVPAGE_PARAM_SLOTS_VALUES, SPECDEC_KVPAGE_PARAM_SLOTS_COUNT))
        return nullptr;
    KvState *st = new (std::nothrow) KvState();   // value-initialised: every memory starts at 0
    if (!st) return nullptr;
    st->pages = pages;
    st->max_blocks = max_blocks;
    st->slots = slots;
    reset_state(*st);
    return st;
}

void kvpage_destroy(void *handle) { delete static_cast<KvState *>(handle); }

// One operation on the core `handle`; result[kvpage_result_words()] as kvpage_core writes it. Returns
// the ERR bits.
int kvpage_op(void *handle, uint32_t code, uint32_t slot, uint32_t row, uint32_t page, uint64_t mask,
              uint32_t *result) {
    kvpage_core(*static_cast<KvState *>(handle), code, slot, row, page, mask, result);
    return (int)result[OUT_ERR];
}

// Facts compiled in: the result words and the ID hash.
uint32_t kvpage_result_words(void) { return OUT_COUNT; }
uint32_t kvpage_id_hash(void) { return SPECDEC_KVPAGE_ID_HASH; }

}  // extern "C"
