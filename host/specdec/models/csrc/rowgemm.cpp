// rowgemm: y = x W^T (+ b) for the few rows a speculative-decoding forward multiplies (specdec.kernels).
//
// x is M x K, W is N x K (torch.nn.Linear's layout), y is M x N, all float32 and row-major. Each thread takes a
// contiguous share of W's rows and streams them from memory once with a software prefetch ahead, against the few
// rows of x that stay in L1 (span: one W row against up to seven rows of x, or three W rows against groups of up
// to four). Up to about six rows the product is bound by reading W, so its time hardly grows with M; from eight
// rows on, by the FMAs (measured in specdec/kernels.py and at span). A product of one row prefetches W into L1; one
// of more rows prefetches it into L2 only, so the stream does not evict the rows of x from L1 and the FMAs overlap
// the stream (docs/benchmarks.md, "the row kernel's prefetch").
//
// rowgemm_h takes W in IEEE half precision (uint16 bits) and widens each 8-float slice in registers (F16C), and
// rowgemm_q8 takes W as int8 codes times a float32 scale per block of 32 (GGUF's Q8_0) and multiplies them out in
// registers (exact: 8 + 11 significant bits): half or a quarter of the bytes to stream, and the same float32 FMAs
// in the same order, so either gives exactly the float32 path's result for the float32 form of that W.
#include <immintrin.h>
#include <omp.h>
#include <stddef.h>

namespace {

constexpr int PREFETCH = 2048;          // W elements ahead of the one being read (8 KiB of float32)

#define TARGET __attribute__((target("avx2,fma,f16c")))

TARGET inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// W's storage: a row accessor per layout, with the 8-float slice at k (load8), one element (at) and the address
// to prefetch (ptr). Every layout widens to the same float32 values, so the products are the same bits.

struct F32 {                // float32
    const float *w;
    int K;
    struct Row {
        const float *p;
        TARGET __m256 load8(int k) const { return _mm256_loadu_ps(p + k); }
        TARGET float at(int k) const { return p[k]; }
        const void *ptr(int k) const { return p + k; }
    };
    Row row(int n) const { return {w + (size_t)n * K}; }
};

struct F16 {                // IEEE half precision (uint16 bits), widened with F16C
    const unsigned short *w;
    int K;
    struct Row {
        const unsigned short *p;
        TARGET __m256 load8(int k) const { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + k))); }
        TARGET float at(int k) const { return _cvtsh_ss(p[k]); }
        const void *ptr(int k) const { return p + k; }
    };
    Row row(int n) const { return {w + (size_t)n * K}; }
};

struct Q8 {                 // int8 codes times one float32 scale per block of 32 along K (GGUF's Q8_0 layout)
    const signed char *q;
    const float *s;
    int K;
    struct Row {
        const signed char *p;
        const float *s;
        TARGET __m256 load8(int k) const {     // an int8 times a scale with at most 11 significant bits: exact
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + k))));
            return _mm256_mul_ps(v, _mm256_set1_ps(s[k >> 5]));
        }
        TARGET float at(int k) const { return (float)p[k] * s[k >> 5]; }
        const void *ptr(int k) const { return p + k; }
    };
    Row row(int n) const { return {q + (size_t)n * K, s + (size_t)n * (K >> 5)}; }
};

// One tile: NW rows of W (from n; the last `cnt` of a share may be fewer, the missing ones read row n again and
// are not stored) against MM rows of x (from m0), NW x MM accumulators over k. Every output sums over k in the
// same order (eight lanes in steps of 8, their sum, the tail with one rounding each, then the bias), so its bits
// do not depend on the tile that computed it. PF: this tile is the first to read these W rows, so it prefetches
// (into L1 for a lone row of x, else into L2: the rows of x keep L1).
template <int NW, int MM, bool PF, typename W>
TARGET inline void tile(const float *x, int K, const W &w, const float *b, float *y, int N, int n, int cnt, int m0) {
    constexpr auto HINT = NW * MM == 1 ? _MM_HINT_T0 : _MM_HINT_T1;
    const int K8 = K & ~7;
    typename W::Row wr[NW];
    for (int j = 0; j < NW; j++) wr[j] = w.row(j < cnt ? n + j : n);
    const float *xr[MM];
    for (int i = 0; i < MM; i++) xr[i] = x + (size_t)(m0 + i) * K;
    __m256 a[NW][MM];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < MM; i++) a[j][i] = _mm256_setzero_ps();
    for (int k = 0; k < K8; k += 8) {
        __m256 v[NW];
        for (int j = 0; j < NW; j++) {
            if (PF) _mm_prefetch((const char *)wr[j].ptr(k + PREFETCH), HINT);
            v[j] = wr[j].load8(k);
        }
        for (int i = 0; i < MM; i++) {
            const __m256 u = _mm256_loadu_ps(xr[i] + k);
            for (int j = 0; j < NW; j++) a[j][i] = _mm256_fmadd_ps(v[j], u, a[j][i]);
        }
    }
    for (int i = 0; i < MM; i++) {
        float *yr = y + (size_t)(m0 + i) * N;
        for (int j = 0; j < NW && j < cnt; j++) {
            float s = hsum(a[j][i]);
            for (int k = K8; k < K; k++) s = __builtin_fmaf(wr[j].at(k), xr[i][k], s);     // one rounding, any W
            yr[n + j] = s + (b ? b[n + j] : 0.0f);
        }
    }
}

// The most rows of x one tile takes: NW = 1 keeps MM accumulators, the W slice and an x slice in 16 registers.
constexpr int ONE_PASS_MAX = 7;

// tile<NW, mm> for a run-time mm: 1..ONE_PASS_MAX with one W row, 1..4 with three (twelve accumulators at most)
template <int NW, bool PF, typename W>
TARGET inline void tile_of(int mm, const float *x, int K, const W &w, const float *b, float *y, int N, int n,
                           int cnt, int m0) {
    static_assert(NW == 1 || NW == 3, "span takes one or three W rows at a time");
    switch (mm) {
        case 1: tile<NW, 1, PF>(x, K, w, b, y, N, n, cnt, m0); return;
        case 2: tile<NW, 2, PF>(x, K, w, b, y, N, n, cnt, m0); return;
        case 3: tile<NW, 3, PF>(x, K, w, b, y, N, n, cnt, m0); return;
        case 4: tile<NW, 4, PF>(x, K, w, b, y, N, n, cnt, m0); return;
    }
    if constexpr (NW == 1) {
        switch (mm) {
            case 5: tile<1, 5, PF>(x, K, w, b, y, N, n, cnt, m0); return;
            case 6: tile<1, 6, PF>(x, K, w, b, y, N, n, cnt, m0); return;
            default: tile<1, 7, PF>(x, K, w, b, y, N, n, cnt, m0); return;
        }
    }
}

// rows [n0, n1) of y for every row of x; W in one of the layouts above.
//
// Up to ONE_PASS_MAX rows of x, one W row at a time against all of them: W streams from memory once and each
// slice of it meets every row of x while it is in a register, and M accumulators hide the FMA latency from 5 rows
// on. The product is bound by reading W, so 1 to 6 rows cost about the same (docs/benchmarks.md, "Kernels by
// rows").
//
// More rows are bound by the FMAs: three W rows at a time against groups of up to four rows of x (twelve
// accumulators keep both FMA pipes busy), the groups as equal as can be (9 rows: 3 + 3 + 3, not 4 + 4 + 1 padded
// to 12). The first group streams the W rows from memory, the others re-read them from L1.
template <typename W>
TARGET void span(const float *x, int M, int K, const W &w, const float *b, float *y, int N, int n0, int n1) {
    if (M <= ONE_PASS_MAX) {
        for (int n = n0; n < n1; n++) tile_of<1, true>(M, x, K, w, b, y, N, n, 1, 0);
        return;
    }
    const int groups = (M + 3) / 4, base = M / groups, extra = M % groups;
    for (int n = n0; n < n1; n += 3) {
        const int cnt = n1 - n < 3 ? n1 - n : 3;
        for (int g = 0, m0 = 0; g < groups; g++) {
            const int mm = base + (g < extra);
            if (g == 0) tile_of<3, true>(mm, x, K, w, b, y, N, n, cnt, m0);
            else tile_of<3, false>(mm, x, K, w, b, y, N, n, cnt, m0);
            m0 += mm;
        }
    }
}

}  // namespace

extern "C" {

// 1 when this CPU runs the AVX2/FMA/F16C code
int rowgemm_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // extern "C"

namespace {

template <typename W>
void product(const float *x, int M, int K, const W &w, int N, const float *b, float *y, int threads) {
    if (threads <= 1 || N < 64) {
        span(x, M, K, w, b, y, N, 0, N);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int share = (N + nt - 1) / nt;
        const int n0 = t * share, n1 = n0 + share < N ? n0 + share : N;
        if (n0 < n1) span(x, M, K, w, b, y, N, n0, n1);
    }
}

}  // namespace

extern "C" {

// y (M x N) = x (M x K) W^T (W: N x K, float32) + b (N, or null), on `threads` threads
void rowgemm(const float *x, int M, int K, const float *w, int N, const float *b, float *y, int threads) {
    product(x, M, K, F32{w, K}, N, b, y, threads);
}

// the same with W in half precision (its uint16 bits)
void rowgemm_h(const float *x, int M, int K, const unsigned short *w, int N, const float *b, float *y,
               int threads) {
    product(x, M, K, F16{w, K}, N, b, y, threads);
}

// the same with W as int8 codes q (N x K) times scales s (N x K/32, float32): K a multiple of 32
void rowgemm_q8(const float *x, int M, int K, const signed char *q, const float *s, int N, const float *b,
                float *y, int threads) {
    product(x, M, K, Q8{q, s, K}, N, b, y, threads);
}

}  // extern "C"
