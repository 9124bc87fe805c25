// rowgemm: y = x W^T (+ b) for the few rows a speculative-decoding forward multiplies (specdec.kernels).
//
// x is M x K, W is N x K (torch.nn.Linear's layout), y is M x N, all float32 and row-major. Each thread takes a
// contiguous share of W's rows and streams them from memory once, two at a time with a software prefetch ahead,
// against up to four rows of x that stay in L1; more rows of x re-read the W rows from L1, three W rows at a time
// (rows3). At M <= 4 the product is bound by reading W, so its time hardly grows with M; from 5 rows on the
// FMAs take about as long as the reads on a fast day (measured in specdec/kernels.py).
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

// rows [n0, n1) of y for every row of x; W in one of the layouts above
template <typename W>
TARGET void rows(const float *x, int M, int K, const W &w, const float *b, float *y, int N, int n0, int n1) {
    const int K8 = K & ~7;
    for (int n = n0; n < n1; n += 2) {
        const bool two = n + 1 < n1;
        const typename W::Row w0 = w.row(n), w1 = w.row(two ? n + 1 : n);
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mm = M - m0 < 4 ? M - m0 : 4;
            const float *xr[4];
            for (int i = 0; i < 4; i++) xr[i] = x + (size_t)(m0 + (i < mm ? i : 0)) * K;
            __m256 a0[4], a1[4];
            for (int i = 0; i < 4; i++) a0[i] = a1[i] = _mm256_setzero_ps();
            for (int k = 0; k < K8; k += 8) {
                _mm_prefetch((const char *)w0.ptr(k + PREFETCH), _MM_HINT_T0);
                _mm_prefetch((const char *)w1.ptr(k + PREFETCH), _MM_HINT_T0);
                const __m256 v0 = w0.load8(k), v1 = w1.load8(k);
                for (int i = 0; i < 4; i++) {
                    const __m256 u = _mm256_loadu_ps(xr[i] + k);
                    a0[i] = _mm256_fmadd_ps(v0, u, a0[i]);
                    a1[i] = _mm256_fmadd_ps(v1, u, a1[i]);
                }
            }
            for (int i = 0; i < mm; i++) {
                float s0 = hsum(a0[i]), s1 = hsum(a1[i]);
                for (int k = K8; k < K; k++) {
                    s0 = __builtin_fmaf(w0.at(k), xr[i][k], s0);     // one rounding, on either W type
                    s1 = __builtin_fmaf(w1.at(k), xr[i][k], s1);
                }
                float *yr = y + (size_t)(m0 + i) * N;
                yr[n] = s0 + (b ? b[n] : 0.0f);
                if (two) yr[n + 1] = s1 + (b ? b[n + 1] : 0.0f);
            }
        }
    }
}

// the same for more than four rows of x, three W rows at a time: twelve accumulators keep both FMA pipes busy
// (eight, with two W rows, wait on the FMA latency), where the product is bound by arithmetic, not by reading W.
// Each output sums over k in the same order as in rows(), so the result does not depend on which one ran.
template <typename W>
TARGET void rows3(const float *x, int M, int K, const W &w, const float *b, float *y, int N, int n0, int n1) {
    const int K8 = K & ~7;
    for (int n = n0; n < n1; n += 3) {
        const int cnt = n1 - n < 3 ? n1 - n : 3;
        const typename W::Row w0 = w.row(n), w1 = w.row(cnt > 1 ? n + 1 : n), w2 = w.row(cnt > 2 ? n + 2 : n);
        for (int m0 = 0; m0 < M; m0 += 4) {
            const int mm = M - m0 < 4 ? M - m0 : 4;
            const float *xr[4];
            for (int i = 0; i < 4; i++) xr[i] = x + (size_t)(m0 + (i < mm ? i : 0)) * K;
            __m256 a0[4], a1[4], a2[4];
            for (int i = 0; i < 4; i++) a0[i] = a1[i] = a2[i] = _mm256_setzero_ps();
            for (int k = 0; k < K8; k += 8) {
                _mm_prefetch((const char *)w0.ptr(k + PREFETCH), _MM_HINT_T0);
                _mm_prefetch((const char *)w1.ptr(k + PREFETCH), _MM_HINT_T0);
                _mm_prefetch((const char *)w2.ptr(k + PREFETCH), _MM_HINT_T0);
                const __m256 v0 = w0.load8(k), v1 = w1.load8(k), v2 = w2.load8(k);
                for (int i = 0; i < 4; i++) {
                    const __m256 u = _mm256_loadu_ps(xr[i] + k);
                    a0[i] = _mm256_fmadd_ps(v0, u, a0[i]);
                    a1[i] = _mm256_fmadd_ps(v1, u, a1[i]);
                    a2[i] = _mm256_fmadd_ps(v2, u, a2[i]);
                }
            }
            for (int i = 0; i < mm; i++) {
                float s0 = hsum(a0[i]), s1 = hsum(a1[i]), s2 = hsum(a2[i]);
                for (int k = K8; k < K; k++) {
                    s0 = __builtin_fmaf(w0.at(k), xr[i][k], s0);
                    s1 = __builtin_fmaf(w1.at(k), xr[i][k], s1);
                    s2 = __builtin_fmaf(w2.at(k), xr[i][k], s2);
                }
                float *yr = y + (size_t)(m0 + i) * N;
                yr[n] = s0 + (b ? b[n] : 0.0f);
                if (cnt > 1) yr[n + 1] = s1 + (b ? b[n + 1] : 0.0f);
                if (cnt > 2) yr[n + 2] = s2 + (b ? b[n + 2] : 0.0f);
            }
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
        if (M > 4) rows3(x, M, K, w, b, y, N, 0, N);
        else rows(x, M, K, w, b, y, N, 0, N);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int share = (((N + nt - 1) / nt) + 1) & ~1;       // even, so pairs of W rows stay together
        const int n0 = t * share, n1 = n0 + share < N ? n0 + share : N;
        if (n0 < n1 && M > 4) rows3(x, M, K, w, b, y, N, n0, n1);
        else if (n0 < n1) rows(x, M, K, w, b, y, N, n0, n1);
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
