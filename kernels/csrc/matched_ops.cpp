// Batch-invariant CPU kernels, invariant by construction.
//
// Every output element (one GEMM entry, one attention row, one normalised row) is computed by
// one thread, in an order that depends only on that element's own inputs: never on the batch
// size, on where the row sits in the batch, or on the thread count. Threads split the work
// only across independent outputs (at::parallel_for).
//
// Reductions use 16 logical lanes written out with GCC vector types: lane l accumulates the
// terms l, l + 16, l + 32, ... in order, and the 16 lanes are then added in a fixed tree.
// Two reductions differ: an attention score sums over the head dim in order (the keys fill the
// lanes), and a GEMM entry is one chain of fused multiply-adds over k in order (the output
// columns fill the lanes).
// Vector operations are lane-wise IEEE adds, multiplies and explicit fused multiply-adds, so the
// bits do not depend on how wide the machine's registers are; the hot functions are compiled for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and baseline x86-64 and picked at load time, all with
// identical results.
// The build uses -O2 -ffp-contract=off and no -ffast-math: the compiler fuses no multiply-add
// the source does not write, and reassociates nothing.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <immintrin.h>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint16_t vu16 __attribute__((vector_size(32)));
typedef uint32_t vu32 __attribute__((vector_size(64)));

constexpr int64_t kLanes = 16;
constexpr vi kLaneIndex = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
constexpr int64_t kKeyBlock = 64;  // attention key blocks, aligned to absolute positions
constexpr int64_t kQueryTile = 16;  // consecutive queries whose rows share key and value loads
constexpr int64_t kPanel = 64;  // weight columns per packed GEMM panel: 4 vectors
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define MATCHED_AVX2 1  // 16 ymm registers: the kernels below take their __m256 forms
constexpr int kBlockRows = 4;  // GEMM rows per register block: 8 ymm accumulators
#else
constexpr int kBlockRows = 6;  // GEMM rows per register block: 24 zmm accumulators
#endif
constexpr int64_t kGemmRows = 48;  // rows of one GEMM task: 8 register blocks

#define MATCHED_INLINE static inline __attribute__((always_inline))
// kernels.cpp_ops compiles this file for one level per machine (-march=<level>, with
// MATCHED_ISA_<level> defined): the best the CPU has, or the one AGENT_RL_KERNELS_ISA forces so
// the tests can compare every level's bits. GCC 12's target_clones resolver was seen to pick the
// baseline clone on an AMD EPYC with x86-64-v3, and per-function targets leave the intrinsics
// below unusable. Without a level the file still builds as clones.
#if defined(MATCHED_ISA_X86_64) || defined(MATCHED_ISA_X86_64_V3) || defined(MATCHED_ISA_X86_64_V4)
#define MATCHED_CLONES
#else
#define MATCHED_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

using bf16 = c10::BFloat16;

MATCHED_INLINE vf splat(float x) { return vf{} + x; }

MATCHED_INLINE vf load16(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

MATCHED_INLINE vf load16(const bf16* p) {
  // bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
  vu16 h;
  std::memcpy(&h, p, sizeof(h));
  vu32 w = __builtin_convertvector(h, vu32) << 16;
  vf v;
  std::memcpy(&v, &w, sizeof(v));
  return v;
}

// The first n (< 16) values, zeros after: tails enter every reduction the same way.
template <class T>
MATCHED_INLINE vf load16_partial(const T* p, int64_t n) {
  float tmp[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) tmp[i] = static_cast<float>(p[i]);
  return load16(tmp);
}

MATCHED_INLINE void store16(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }

MATCHED_INLINE float lane(vf v, int i) { return v[i]; }

// a * b + c lane by lane with one IEEE rounding: one vfmadd where the level has FMA, exact
// libm fmaf where it does not, so every level gives the same bits.
#if defined(__AVX512F__)
MATCHED_INLINE vf fma16(float a, vf b, vf c) {
  return (vf)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)c);
}
#else
MATCHED_INLINE vf fma16(float a, vf b, vf c) {
  vf r;
#pragma GCC unroll 16
  for (int i = 0; i < kLanes; ++i) r[i] = __builtin_fmaf(a, b[i], c[i]);
  return r;
}
#endif

// Fixed tree over the 16 lanes: (l, l+8), then (l, l+4), (l, l+2), (l, l+1).
MATCHED_INLINE float reduce16(vf a) {
  float t[kLanes];
  std::memcpy(t, &a, sizeof(t));
  for (int i = 0; i < 8; ++i) t[i] += t[i + 8];
  for (int i = 0; i < 4; ++i) t[i] += t[i + 4];
  t[0] += t[2];
  t[1] += t[3];
  return t[0] + t[1];
}

template <class T>
MATCHED_INLINE T from_float(float x) {
  return static_cast<T>(x);  // bf16: round to nearest even, as torch's .to(bfloat16)
}

// exp in fp32 from exactly rounded lane-wise steps (Cephes expf: Cody-Waite reduction and a
// degree-5 polynomial), the same sequence as kernels.cpu_ops.exp_. Max relative error ~1e-7.
MATCHED_INLINE vf vexp(vf x) {
  const vf lo = splat(-87.0f), hi = splat(88.0f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Round to nearest even by the 1.5 * 2**23 trick (exact for |t| < 2**22).
  const vf magic = splat(12582912.0f);
  vf n = (x * 1.44269504088896341f + magic) - magic;
  vf r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  vf p = r * 1.9875691500e-4f;
  p = (p + 1.3981999507e-3f) * r;
  p = (p + 8.3334519073e-3f) * r;
  p = (p + 4.1665795894e-2f) * r;
  p = (p + 1.6666665459e-1f) * r;
  p = (p + 5.0000001201e-1f) * r;
  p = p * r + r + 1.0f;
  vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

MATCHED_INLINE float exp_scalar(float x) { return lane(vexp(splat(x)), 0); }

#if defined(MATCHED_AVX2)
// AVX2 has 16 vector registers of 8 lanes: the 16-lane `vf` code above spills there. This is
// the same computation (each output a chain of fused multiply-adds over k = 0, 1, ... from 0,
// so the same bits) on __m256 registers: R rows x 16 columns, 2R accumulators.
MATCHED_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
MATCHED_INLINE __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int R, class TA, class TB>
MATCHED_INLINE void outer_products_16(const TA* const* a, const TB* b, int64_t ldb, int64_t n,
                                      float (*out)[16]) {
  __m256 sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const TB* bi = b + i * ldb;
    const __m256 b0 = load8(bi), b1 = load8(bi + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 ai = _mm256_set1_ps(static_cast<float>(a[r][i]));
      sum[r][0] = _mm256_fmadd_ps(ai, b0, sum[r][0]);
      sum[r][1] = _mm256_fmadd_ps(ai, b1, sum[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out[r], sum[r][0]);
    _mm256_storeu_ps(out[r] + 8, sum[r][1]);
  }
}

// The same outer products on AVX2, 16 columns at a time.
template <int R, class TA, class TB>
MATCHED_INLINE void outer_products(const TA* const* a, const TB* b, int64_t ldb, int64_t n,
                                   vf (*acc)[4]) {
  for (int v = 0; v < 4; ++v) {
    float part[R][16];
    outer_products_16<R>(a, b + kLanes * v, ldb, n, part);
    for (int r = 0; r < R; ++r) std::memcpy(&acc[r][v], part[r], sizeof(vf));
  }
}
#else
// acc[r][v] lane j = the chain over i = 0, 1, ..., n - 1 of fmaf(a[r][i], b[i * ldb + 16 v + j],
// acc), from acc = 0: R rows of a against 64 columns of b, each b vector loaded once for all
// rows. The GEMM (rows of x against a packed weight panel) and attention scores (query rows
// against a block's transposed keys) are both this.
template <int R, class TA, class TB>
MATCHED_INLINE void outer_products(const TA* const* a, const TB* b, int64_t ldb, int64_t n,
                                   vf (*acc)[4]) {
  vf sum[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) sum[r][v] = vf{};
  for (int64_t i = 0; i < n; ++i) {
    const TB* bi = b + i * ldb;
    vf bv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) bv[v] = load16(bi + kLanes * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float ai = static_cast<float>(a[r][i]);  // a scalar operand: one broadcast load
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) sum[r][v] = fma16(ai, bv[v], sum[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = sum[r][v];
}
#endif

// ---------------------------------------------------------------------------------------------
// Linear: out[m, n] = x[m, :] . w[n, :], one fused multiply-add per k, in order k = 0, 1, ...
//
// The weight is packed once per weight version (`pack_linear_weight`) into panels of kPanel
// columns, (panels, K, kPanel): the 64 weights one k step needs are one contiguous 256-byte run.
// A register block holds rows x 64 outputs; each k step broadcasts one x value per row and
// multiply-adds it into 4 vectors of outputs. There is no cross-lane reduction: every output is
// a chain of fmaf(x[m, k], w[n, k], acc) from acc = 0, whatever the block it sits in.

#if defined(MATCHED_AVX2)
template <int R, class TX, class TW, class TO>
MATCHED_INLINE void linear_block(const TX* x, const TW* panel, TO* out, int64_t N, int64_t K,
                                 int64_t cols) {
  const TX* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x + r * K;
  for (int64_t c = 0; c < cols; c += 16) {
    float part[R][16];
    outer_products_16<R>(rows, panel + c, kPanel, K, part);
    const int64_t width = std::min<int64_t>(16, cols - c);
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < width; ++j) out[r * N + c + j] = from_float<TO>(part[r][j]);
  }
}
#else
template <int R, class TX, class TW, class TO>
MATCHED_INLINE void linear_block(const TX* x, const TW* panel, TO* out, int64_t N, int64_t K,
                                 int64_t cols) {
  const TX* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = x + r * K;
  vf acc[R][4];
  outer_products<R>(rows, panel, kPanel, K, acc);
  for (int r = 0; r < R; ++r) {
    TO* o = out + r * N;
    if (std::is_same_v<TO, float> && cols == kPanel) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) store16(reinterpret_cast<float*>(o) + kLanes * v, acc[r][v]);
    } else {
      for (int64_t c = 0; c < cols; ++c) o[c] = from_float<TO>(acc[r][c / kLanes][c % kLanes]);
    }
  }
}

#endif

// Rows [m0, m_end) of one panel's 64 columns, six rows at a time, then the last 1-5.
template <class TX, class TW, class TO>
MATCHED_INLINE void linear_tile(const TX* x, const TW* packed, TO* out, int64_t N, int64_t K,
                                int64_t m0, int64_t m_end, int64_t panel) {
  const TW* p = packed + panel * K * kPanel;
  const int64_t n0 = panel * kPanel, cols = std::min(kPanel, N - n0);
  int64_t m = m0;
  for (; m + kBlockRows <= m_end; m += kBlockRows)
    linear_block<kBlockRows>(x + m * K, p, out + m * N + n0, N, K, cols);
  const TX* xm = x + m * K;
  TO* om = out + m * N + n0;
  switch (m_end - m) {
    case 5: linear_block<5>(xm, p, om, N, K, cols); break;
    case 4: linear_block<4>(xm, p, om, N, K, cols); break;
    case 3: linear_block<3>(xm, p, om, N, K, cols); break;
    case 2: linear_block<2>(xm, p, om, N, K, cols); break;
    case 1: linear_block<1>(xm, p, om, N, K, cols); break;
    default: break;
  }
}

#define LINEAR_TILE(NAME, TX, TW, TO)                                                       \
  MATCHED_CLONES void NAME(const TX* x, const TW* packed, TO* out, int64_t N, int64_t K,    \
                           int64_t m0, int64_t m_end, int64_t panel) {                      \
    linear_tile<TX, TW, TO>(x, packed, out, N, K, m0, m_end, panel);                        \
  }
LINEAR_TILE(linear_tile_f32, float, float, float)
LINEAR_TILE(linear_tile_bf16, bf16, bf16, bf16)
LINEAR_TILE(linear_tile_f32_bf16w, float, bf16, float)

// (N, K) -> (panels, K, 64): panel p holds columns 64p.. as rows of k; columns past N are 0.
at::Tensor pack_linear_weight(const at::Tensor& w_in) {
  TORCH_CHECK(w_in.dim() == 2 && (w_in.scalar_type() == at::kFloat ||
                                  w_in.scalar_type() == at::kBFloat16),
              "pack_linear_weight: a float32/bfloat16 weight (N, K) expected, got ",
              w_in.scalar_type(), " ", w_in.sizes());
  const int64_t N = w_in.size(0), K = w_in.size(1), panels = (N + kPanel - 1) / kPanel;
  return at::constant_pad_nd(w_in, {0, 0, 0, panels * kPanel - N})
      .view({panels, kPanel, K})
      .transpose(1, 2)
      .contiguous();
}

at::Tensor linear(const at::Tensor& x_in, const at::Tensor& packed_in, int64_t N) {
  TORCH_CHECK(x_in.dim() >= 1 && packed_in.dim() == 3 && packed_in.size(2) == kPanel &&
                  x_in.size(-1) == packed_in.size(1) &&
                  packed_in.size(0) == (N + kPanel - 1) / kPanel,
              "linear: x (..., K) and a weight packed by pack_linear_weight expected, got ",
              x_in.sizes(), " and ", packed_in.sizes(), " for N = ", N);
  const at::Tensor x = x_in.contiguous(), packed = packed_in.contiguous();
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0, panels = packed.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  at::Tensor out = at::empty(out_shape, x.options());
  if (M == 0 || N == 0) return out;
  // Tasks are (row tile, panel). Few row tiles (a decode step): panel-major, so the threads
  // stream disjoint halves of the weights. Many (a prefill): row-major, so a row tile stays in
  // cache while the panels pass. Tiling only groups outputs: no element's sum changes.
  const int64_t m_tiles = (M + kGemmRows - 1) / kGemmRows;
  const bool rows_outer = m_tiles >= 4 * at::get_num_threads();
  auto run = [&](auto tile_fn, auto* xp, auto* wp, auto* op) {
    at::parallel_for(0, m_tiles * panels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t mt = rows_outer ? t / panels : t % m_tiles;
        const int64_t panel = rows_outer ? t % panels : t / m_tiles;
        tile_fn(xp, wp, op, N, K, mt * kGemmRows, std::min(M, (mt + 1) * kGemmRows), panel);
      }
    });
  };
  const auto xt = x.scalar_type(), wt = packed.scalar_type();
  if (xt == at::kFloat && wt == at::kFloat) {
    run(linear_tile_f32, x.const_data_ptr<float>(), packed.const_data_ptr<float>(),
        out.mutable_data_ptr<float>());
  } else if (xt == at::kBFloat16 && wt == at::kBFloat16) {
    run(linear_tile_bf16, x.const_data_ptr<bf16>(), packed.const_data_ptr<bf16>(),
        out.mutable_data_ptr<bf16>());
  } else if (xt == at::kFloat && wt == at::kBFloat16) {
    run(linear_tile_f32_bf16w, x.const_data_ptr<float>(), packed.const_data_ptr<bf16>(),
        out.mutable_data_ptr<float>());
  } else {
    TORCH_CHECK(false, "linear: unsupported dtypes x ", xt, ", weight ", wt,
                " (float32/bfloat16 expected)");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm and silu(gate) * up.

template <class T>
MATCHED_INLINE void rms_norm_rows(const T* x, const T* w, T* out, int64_t begin, int64_t end,
                                  int64_t K, float eps) {
  const int64_t k_full = K / kLanes * kLanes, k_tail = K - k_full;
  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * K;
    vf acc = {};
    for (int64_t k = 0; k < k_full; k += kLanes) {
      const vf v = load16(xr + k);
      acc += v * v;
    }
    if (k_tail) {
      const vf v = load16_partial(xr + k_full, k_tail);
      acc += v * v;
    }
    const float inv_rms = 1.0f / std::sqrt(reduce16(acc) / static_cast<float>(K) + eps);
    T* o = out + row * K;
    for (int64_t k = 0; k < K; ++k) {
      const float normed = static_cast<float>(from_float<T>(static_cast<float>(xr[k]) * inv_rms));
      o[k] = from_float<T>(static_cast<float>(w[k]) * normed);
    }
  }
}

MATCHED_CLONES void rms_norm_rows_f32(const float* x, const float* w, float* out, int64_t b,
                                      int64_t e, int64_t K, float eps) {
  rms_norm_rows<float>(x, w, out, b, e, K, eps);
}
MATCHED_CLONES void rms_norm_rows_bf16(const bf16* x, const bf16* w, bf16* out, int64_t b,
                                       int64_t e, int64_t K, float eps) {
  rms_norm_rows<bf16>(x, w, out, b, e, K, eps);
}

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
  TORCH_CHECK(x_in.scalar_type() == w_in.scalar_type() && w_in.dim() == 1 &&
                  x_in.size(-1) == w_in.size(0),
              "rms_norm: x (..., K) and weight (K,) of one dtype expected");
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const int64_t K = x.size(-1), rows = K ? x.numel() / K : 0;
  at::Tensor out = at::empty_like(x);
  at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
    if (x.scalar_type() == at::kFloat)
      rms_norm_rows_f32(x.const_data_ptr<float>(), w.const_data_ptr<float>(),
                        out.mutable_data_ptr<float>(), b, e, K, static_cast<float>(eps));
    else
      rms_norm_rows_bf16(x.const_data_ptr<bf16>(), w.const_data_ptr<bf16>(),
                         out.mutable_data_ptr<bf16>(), b, e, K, static_cast<float>(eps));
  });
  return out;
}

template <class T>
MATCHED_INLINE void silu_mul_range(const T* g, const T* u, T* out, int64_t begin, int64_t end) {
  // Every element takes the same lane-wise path; a tail is padded, never computed differently.
  for (int64_t i = begin; i < end; i += kLanes) {
    const int64_t n = std::min(kLanes, end - i);
    const vf gv = n == kLanes ? load16(g + i) : load16_partial(g + i, n);
    const vf uv = n == kLanes ? load16(u + i) : load16_partial(u + i, n);
    const vf silu = gv / (1.0f + vexp(-gv));
    if constexpr (std::is_same_v<T, float>) {
      if (n == kLanes) {  // fp32 needs no rounding between the two steps
        store16(out + i, silu * uv);
        continue;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const float rounded = static_cast<float>(from_float<T>(lane(silu, static_cast<int>(j))));
      out[i + j] = from_float<T>(rounded * lane(uv, static_cast<int>(j)));
    }
  }
}

MATCHED_CLONES void silu_mul_f32(const float* g, const float* u, float* o, int64_t b, int64_t e) {
  silu_mul_range<float>(g, u, o, b, e);
}
MATCHED_CLONES void silu_mul_bf16(const bf16* g, const bf16* u, bf16* o, int64_t b, int64_t e) {
  silu_mul_range<bf16>(g, u, o, b, e);
}

at::Tensor silu_and_mul(const at::Tensor& g_in, const at::Tensor& u_in) {
  TORCH_CHECK(g_in.sizes() == u_in.sizes() && g_in.scalar_type() == u_in.scalar_type(),
              "silu_and_mul: gate and up of one shape and dtype expected");
  const at::Tensor g = g_in.contiguous(), u = u_in.contiguous();
  at::Tensor out = at::empty_like(g);
  const int64_t chunks = (g.numel() + 1023) / 1024;
  at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    const int64_t lo = b * 1024, hi = std::min(e * 1024, g.numel());
    if (g.scalar_type() == at::kFloat)
      silu_mul_f32(g.const_data_ptr<float>(), u.const_data_ptr<float>(),
                   out.mutable_data_ptr<float>(), lo, hi);
    else
      silu_mul_bf16(g.const_data_ptr<bf16>(), u.const_data_ptr<bf16>(),
                    out.mutable_data_ptr<bf16>(), lo, hi);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Attention. One task: a tile of up to kQueryTile consecutive queries of one sequence and one
// KV head, with the query heads that share it. Keys and values are read in place, in blocks of
// kKeyBlock absolute positions, and every (query, head) row runs the same online softmax over
// the blocks up to its own position. Keys are stored transposed, so a score is a sum over the
// head dim in order with the keys in the lanes, and a value sum adds the keys in order. A row's
// operations therefore depend on its position and its keys only: a decode step and a
// teacher-forced pass give the same bits, however rows are grouped to share loads.

struct AttentionShape {
  int64_t heads, kv_heads, dim;
  float scale;
};

// Where the keys and values of one sequence live. Keys are read as columns: dim d of key p at
// ld * d + p (relative to a block's start), so a score sums over d with the keys in the lanes.
// - contiguous (the learner's pass): k is a (kv_heads, D, padded length) transposed copy, v the
//   (T, kv_heads, D) values;
// - paged (the rollout's cache, blocks (blocks, 2, kv_heads, block_size, D)): within a block,
//   each head's keys are stored transposed, (D, block_size), and its values as rows
//   (block_size, D). Only these kernels read or write the blocks, so the layout is theirs.
template <class T>
struct KeySource {
  const T* k;
  const T* v;
  const int32_t* block_table;  // nullptr for contiguous
  int64_t block_size, length, padded;  // padded: contiguous keys' row length (a multiple of 64)

  // Key columns of the block of kKeyBlock positions at lo: returns p, ld with dim d of key
  // lo + j at p[d * ld + j]. Read in place when the block lies inside one cache block; gathered
  // into `buffer` (D x kKeyBlock, zeros past the sequence) when cache blocks are smaller.
  inline __attribute__((always_inline)) const T* key_columns(int64_t lo, int64_t h,
                                                             const AttentionShape& s, T* buffer,
                                                             int64_t* ld) const {
    const int64_t D = s.dim;
    if (!block_table) {
      *ld = padded;
      return k + h * D * padded + lo;
    }
    if (block_size % kKeyBlock == 0) {
      *ld = block_size;
      const int64_t page = block_table[lo / block_size];
      return k + (page * 2 * s.kv_heads + h) * block_size * D + lo % block_size;
    }
    *ld = kKeyBlock;
    const int64_t n = std::min(kKeyBlock, length - lo);
    for (int64_t j = 0; j < kKeyBlock; ++j) {
      if (j >= n) {
        for (int64_t d = 0; d < D; ++d) buffer[d * kKeyBlock + j] = T(0.0f);
        continue;
      }
      const int64_t page = block_table[(lo + j) / block_size], offset = (lo + j) % block_size;
      const T* column = k + (page * 2 * s.kv_heads + h) * block_size * D + offset;
      for (int64_t d = 0; d < D; ++d) buffer[d * kKeyBlock + j] = column[d * block_size];
    }
    return buffer;
  }

  // The value rows of positions lo .. lo + n - 1, walking the block table once.
  inline __attribute__((always_inline)) void value_rows(int64_t lo, int64_t n, int64_t h,
                                                        const AttentionShape& s,
                                                        const T** rows) const {
    if (!block_table) {
      for (int64_t j = 0; j < n; ++j) rows[j] = v + ((lo + j) * s.kv_heads + h) * s.dim;
      return;
    }
    int64_t entry = lo / block_size, offset = lo % block_size;
    for (int64_t j = 0; j < n; ++j, ++offset) {
      if (offset == block_size) {
        ++entry;
        offset = 0;
      }
      const int64_t page = block_table[entry];
      rows[j] = v + (((page * 2 + 1) * s.kv_heads + h) * block_size + offset) * s.dim;
    }
  }
};

// Scores of n (1-4) rows against the kKeyBlock keys of a block: lane j of sc[r][c] is row r's
// dot product with key 16 c + j, a chain of fused multiply-adds over d in order.
template <class T>
MATCHED_INLINE void block_scores_n(int64_t n, const float* const* q, const T* keys, int64_t ld,
                                   int64_t D, vf (*sc)[4]) {
  switch (n) {
    case 4: outer_products<4>(q, keys, ld, D, sc); break;
    case 3: outer_products<3>(q, keys, ld, D, sc); break;
    case 2: outer_products<2>(q, keys, ld, D, sc); break;
    default: outer_products<1>(q, keys, ld, D, sc); break;
  }
}

// pv[r] += sum over keys j in [begin, end) of p[r][j] * v_j, fused multiply-adds in key order,
// for NR rows at once, so each value vector is loaded once for all of them. The rows may belong
// to different queries: each row's sum is the same chain whichever rows share its loads.
template <int NR, class T>
MATCHED_INLINE void value_sums(float* const* pv, const float* const* weights,
                               const T* const* vrows, int64_t begin, int64_t end, int64_t D) {
  const int64_t dv = (D + kLanes - 1) / kLanes, d_full = D / kLanes, d_tail = D - d_full * kLanes;
  for (int64_t c0 = 0; c0 < dv; c0 += 4) {
    if (c0 + 4 <= d_full) {  // four whole vectors (head dims that are multiples of 64)
      vf sum[NR][4];
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) sum[r][c] = load16(pv[r] + (c0 + c) * kLanes);
      for (int64_t j = begin; j < end; ++j) {
        const T* vr = vrows[j] + c0 * kLanes;
        vf vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) vv[c] = load16(vr + c * kLanes);
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) {
          const float pj = weights[r][j];
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) sum[r][c] = fma16(pj, vv[c], sum[r][c]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) store16(pv[r] + (c0 + c) * kLanes, sum[r][c]);
      continue;
    }
    const int64_t n_c = std::min<int64_t>(4, dv - c0);
    for (int r = 0; r < NR; ++r)
      for (int64_t c = 0; c < n_c; ++c) {
        float* out = pv[r] + (c0 + c) * kLanes;
        vf sum = load16(out);
        for (int64_t j = begin; j < end; ++j) {
          const T* vr = vrows[j] + (c0 + c) * kLanes;
          const vf vv = c0 + c < d_full ? load16(vr) : load16_partial(vr, d_tail);
          sum = fma16(weights[r][j], vv, sum);
        }
        store16(out, sum);
      }
  }
}

template <class T>
MATCHED_INLINE void value_sums_n(int64_t n, float* const* pv, const float* const* weights,
                                 const T* const* vrows, int64_t begin, int64_t end, int64_t D) {
  switch (n) {
    case 4: value_sums<4>(pv, weights, vrows, begin, end, D); break;
    case 3: value_sums<3>(pv, weights, vrows, begin, end, D); break;
    case 2: value_sums<2>(pv, weights, vrows, begin, end, D); break;
    default: value_sums<1>(pv, weights, vrows, begin, end, D); break;
  }
}

template <class T>
MATCHED_INLINE void attend_tile(const T* q, T* out, const int64_t* tokens, const int64_t* positions,
                                int64_t rows, int64_t h, const KeySource<T>& keys,
                                const AttentionShape& s) {
  const int64_t group = s.heads / s.kv_heads, D = s.dim;
  const int64_t dv = (D + kLanes - 1) / kLanes;  // 16-lane vectors per head row
  const int64_t n_rows = rows * group;
  std::vector<float> qs(n_rows * D), acc(n_rows * dv * kLanes, 0.0f), pv(n_rows * dv * kLanes);
  std::vector<float> weights(n_rows * kKeyBlock);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> run_max(n_rows, neg_inf), run_sum(n_rows, 0.0f);
  std::vector<int64_t> active(n_rows);
  std::vector<T> gathered(keys.block_table && keys.block_size % kKeyBlock ? D * kKeyBlock : 0);
  const T* vrows[kKeyBlock];  // values are read in place: each row is contiguous
  int64_t last = 0;
  for (int64_t r = 0; r < rows; ++r) {
    last = std::max(last, positions[r]);
    for (int64_t g = 0; g < group; ++g) {
      const T* qr = q + (tokens[r] * s.heads + h * group + g) * D;
      float* qrow = qs.data() + (r * group + g) * D;
      for (int64_t d = 0; d < D; ++d) qrow[d] = static_cast<float>(qr[d]) * s.scale;
    }
  }
  for (int64_t lo = 0; lo <= last; lo += kKeyBlock) {
    const int64_t block_keys = std::min(kKeyBlock, std::min(last + 1, keys.length) - lo);
    int64_t ld = 0;
    const T* key_block = keys.key_columns(lo, h, s, gathered.data(), &ld);
    keys.value_rows(lo, block_keys, h, s, vrows);
    int64_t n_active = 0;  // rows whose position reaches this block
    for (int64_t r = 0; r < rows; ++r)
      if (positions[r] >= lo)
        for (int64_t g = 0; g < group; ++g) active[n_active++] = r * group + g;
    // Four rows at a time: their scores share each key load and their value sums each value
    // load (over the keys all four see; a row's own tail follows, only in its diagonal block).
    for (int64_t i0 = 0; i0 < n_active; i0 += 4) {
      const int64_t n = std::min<int64_t>(4, n_active - i0);
      const float* q_rows[4];
      for (int64_t i = 0; i < n; ++i) q_rows[i] = qs.data() + active[i0 + i] * D;
      vf sc[4][4];
      block_scores_n(n, q_rows, key_block, ld, D, sc);
      float* pv_rows[4];
      const float* weight_rows[4];
      int64_t visible[4], shared = kKeyBlock;
      float alpha[4];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = active[i0 + i];
        visible[i] = std::min(kKeyBlock, positions[row / group] - lo + 1);
        shared = std::min(shared, visible[i]);
        vi in_view[4];  // lanes of keys this row may see
        vf top = splat(neg_inf);
        for (int c = 0; c < 4; ++c) {
          in_view[c] = kLaneIndex + static_cast<int32_t>(c * kLanes) <
                       static_cast<int32_t>(visible[i]);
          const vf seen = in_view[c] ? sc[i][c] : splat(neg_inf);
          top = top > seen ? top : seen;  // a max is exact in any order
        }
        float block_max = neg_inf;
        for (int l = 0; l < kLanes; ++l) block_max = std::max(block_max, lane(top, l));
        const float new_max = std::max(run_max[row], block_max);
        alpha[i] = exp_scalar(run_max[row] - new_max);
        vf p[4];
        for (int c = 0; c < 4; ++c) p[c] = in_view[c] ? vexp(sc[i][c] - new_max) : vf{};
        const float block_sum = reduce16((p[0] + p[1]) + (p[2] + p[3]));
        run_sum[row] = run_sum[row] * alpha[i] + block_sum;
        run_max[row] = new_max;
        float* w = weights.data() + row * kKeyBlock;
        for (int c = 0; c < 4; ++c) store16(w + c * kLanes, p[c]);
        weight_rows[i] = w;
        pv_rows[i] = pv.data() + row * dv * kLanes;
        std::fill(pv_rows[i], pv_rows[i] + dv * kLanes, 0.0f);
      }
      value_sums_n(n, pv_rows, weight_rows, vrows, 0, shared, D);
      for (int64_t i = 0; i < n; ++i) {
        if (visible[i] > shared)
          value_sums<1>(pv_rows + i, weight_rows + i, vrows, shared, visible[i], D);
        float* a = acc.data() + active[i0 + i] * dv * kLanes;
        for (int64_t c = 0; c < dv * kLanes; c += kLanes)
          store16(a + c, load16(a + c) * alpha[i] + load16(pv_rows[i] + c));
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t row = r * group + g;
      T* o = out + (tokens[r] * s.heads + h * group + g) * D;
      for (int64_t d = 0; d < D; ++d)
        o[d] = from_float<T>(acc[row * dv * kLanes + d] / run_sum[row]);
    }
}

MATCHED_CLONES void attend_tile_f32(const float* q, float* out, const int64_t* tokens,
                                    const int64_t* positions, int64_t rows, int64_t h,
                                    const KeySource<float>& keys, const AttentionShape& s) {
  attend_tile<float>(q, out, tokens, positions, rows, h, keys, s);
}
MATCHED_CLONES void attend_tile_bf16(const bf16* q, bf16* out, const int64_t* tokens,
                                     const int64_t* positions, int64_t rows, int64_t h,
                                     const KeySource<bf16>& keys, const AttentionShape& s) {
  attend_tile<bf16>(q, out, tokens, positions, rows, h, keys, s);
}

struct Tile {
  int64_t sequence, begin, end;  // packed query rows [begin, end) of one sequence
};

// Runs every (kv head, tile) task, head-major so that consecutive tasks read the same head's
// keys (sequences of one RL group share their prompt's cache blocks, which then stay in L2).
// A sequence's tiles are visited from both ends alternately so that the static split of
// at::parallel_for gives each thread a similar amount of causal work.
template <class T>
void run_tiles(const at::Tensor& q, at::Tensor& out, const std::vector<Tile>& tiles,
               const int64_t* positions, const std::vector<KeySource<T>>& sources,
               const AttentionShape& s) {
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  std::vector<int64_t> order(n_tiles);
  for (int64_t first = 0, last = 0; first < n_tiles; first = last + 1) {
    last = first;
    while (last + 1 < n_tiles && tiles[last + 1].sequence == tiles[first].sequence) ++last;
    const int64_t n = last - first + 1;
    for (int64_t i = 0; i < n; ++i) order[first + i] = first + (i % 2 ? n - 1 - i / 2 : i / 2);
  }
  std::vector<int64_t> tokens(q.size(0));
  for (int64_t i = 0; i < q.size(0); ++i) tokens[i] = i;
  const T* qp = q.const_data_ptr<T>();
  T* op = out.mutable_data_ptr<T>();
  at::parallel_for(0, n_tiles * s.kv_heads, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const Tile& t = tiles[order[task % n_tiles]];
      const int64_t h = task / n_tiles;
      if constexpr (std::is_same_v<T, float>)
        attend_tile_f32(qp, op, tokens.data() + t.begin, positions + t.begin, t.end - t.begin, h,
                        sources[t.sequence], s);
      else
        attend_tile_bf16(qp, op, tokens.data() + t.begin, positions + t.begin, t.end - t.begin, h,
                         sources[t.sequence], s);
    }
  });
}

AttentionShape check_shape(const at::Tensor& q, int64_t kv_heads, int64_t dim, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.size(2) == dim && q.size(1) % kv_heads == 0,
              "attention: q (T, heads, D) with heads a multiple of kv_heads expected, got ",
              q.sizes(), " for ", kv_heads, " kv heads of dim ", dim);
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16,
              "attention: float32 or bfloat16 expected, got ", q.scalar_type());
  return {q.size(1), kv_heads, dim, static_cast<float>(scale)};
}

// Keys (T, kv_heads, D) as (kv_heads, D, padded) columns, zeros past T.
template <class T>
std::vector<T> transposed_keys(const T* k, int64_t length, int64_t kv_heads, int64_t D,
                           int64_t padded) {
  std::vector<T> columns(kv_heads * D * padded, T(0.0f));
  for (int64_t t = 0; t < length; ++t)
    for (int64_t h = 0; h < kv_heads; ++h)
      for (int64_t d = 0; d < D; ++d)
        columns[(h * D + d) * padded + t] = k[(t * kv_heads + h) * D + d];
  return columns;
}

std::vector<Tile> sequence_tiles(const std::vector<int64_t>& starts) {
  std::vector<Tile> tiles;
  for (size_t seq = 0; seq + 1 < starts.size(); ++seq)
    for (int64_t b = starts[seq]; b < starts[seq + 1]; b += kQueryTile)
      tiles.push_back({static_cast<int64_t>(seq), b, std::min(b + kQueryTile, starts[seq + 1])});
  return tiles;
}

at::Tensor attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                     double scale) {
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  TORCH_CHECK(k.dim() == 3 && k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "attention: k, v (T, kv_heads, D) matching q expected");
  const AttentionShape s = check_shape(q, k.size(1), k.size(2), scale);
  const int64_t length = q.size(0);
  at::Tensor out = at::empty_like(q);
  if (length == 0) return out;
  std::vector<int64_t> positions(length);
  for (int64_t i = 0; i < length; ++i) positions[i] = i;
  const std::vector<Tile> tiles = sequence_tiles({0, length});
  const int64_t padded = (length + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  auto run = [&](auto* k_data, auto* v_data) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(k_data)>>;
    const std::vector<T> columns = transposed_keys(k_data, length, s.kv_heads, s.dim, padded);
    const KeySource<T> keys{columns.data(), v_data, nullptr, 0, length, padded};
    run_tiles<T>(q, out, tiles, positions.data(), {keys}, s);
  };
  if (q.scalar_type() == at::kFloat)
    run(k.const_data_ptr<float>(), v.const_data_ptr<float>());
  else
    run(k.const_data_ptr<bf16>(), v.const_data_ptr<bf16>());
  return out;
}

at::Tensor paged_attention(const at::Tensor& q_in, const at::Tensor& cache,
                           const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
                           const at::Tensor& positions_in, const at::Tensor& block_table_in,
                           double scale) {
  TORCH_CHECK(cache.dim() == 5 && cache.size(1) == 2 && cache.is_contiguous() &&
                  cache.scalar_type() == q_in.scalar_type(),
              "paged_attention: contiguous cache (blocks, 2, kv_heads, block_size, D) of q's "
              "dtype expected, got ", cache.sizes(), " ", cache.scalar_type());
  const at::Tensor q = q_in.contiguous();
  const AttentionShape s = check_shape(q, cache.size(2), cache.size(4), scale);
  const at::Tensor starts_t = query_start_loc.to(at::kLong).contiguous();
  const at::Tensor lens_t = seq_lens.to(at::kLong).contiguous();
  const at::Tensor positions = positions_in.to(at::kLong).contiguous();
  const at::Tensor table = block_table_in.to(at::kInt).contiguous();
  const int64_t n_seqs = lens_t.numel();
  TORCH_CHECK(starts_t.numel() == n_seqs + 1 && table.size(0) >= n_seqs &&
                  positions.numel() == q.size(0),
              "paged_attention: query_start_loc (S+1), seq_lens (S), block_table (>=S, blocks) "
              "and one position per query expected");
  const int64_t* sp = starts_t.const_data_ptr<int64_t>();
  const std::vector<int64_t> starts(sp, sp + n_seqs + 1);
  TORCH_CHECK(starts.back() == q.size(0), "paged_attention: query_start_loc ends at ",
              starts.back(), " but q holds ", q.size(0), " tokens");
  const int64_t* lens = lens_t.const_data_ptr<int64_t>();
  const int64_t* pos = positions.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n_seqs; ++i)
    for (int64_t t = starts[i]; t < starts[i + 1]; ++t)
      TORCH_CHECK(pos[t] >= 0 && pos[t] < lens[i], "paged_attention: query at position ", pos[t],
                  " of a sequence of length ", lens[i]);
  at::Tensor out = at::empty_like(q);
  const std::vector<Tile> tiles = sequence_tiles(starts);
  const int32_t* tp = table.const_data_ptr<int32_t>();
  const int64_t block_size = cache.size(3), width = table.size(1);
  auto sources_of = [&](auto* base) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(base)>>;
    std::vector<KeySource<T>> sources;
    for (int64_t i = 0; i < n_seqs; ++i)
      sources.push_back({base, base, tp + i * width, block_size, lens[i], 0});
    return sources;
  };
  if (q.scalar_type() == at::kFloat)
    run_tiles<float>(q, out, tiles, pos, sources_of(cache.const_data_ptr<float>()), s);
  else
    run_tiles<bf16>(q, out, tiles, pos, sources_of(cache.const_data_ptr<bf16>()), s);
  return out;
}

// Stores new keys and values at their slots, in the block layout KeySource reads: each head's
// keys transposed, (D, block_size), its values as rows. Negative slots (padding) are skipped.
void write_paged_kv(const at::Tensor& cache, const at::Tensor& k_in, const at::Tensor& v_in,
                    const at::Tensor& slot_mapping) {
  TORCH_CHECK(cache.dim() == 5 && cache.size(1) == 2 && cache.is_contiguous() &&
                  (cache.scalar_type() == at::kFloat || cache.scalar_type() == at::kBFloat16),
              "write_paged_kv: contiguous float32/bfloat16 cache (blocks, 2, kv_heads, "
              "block_size, D) expected, got ", cache.sizes(), " ", cache.scalar_type());
  const int64_t blocks = cache.size(0), kv_heads = cache.size(2), block_size = cache.size(3),
                D = cache.size(4);
  const at::Tensor k = k_in.to(cache.scalar_type()).contiguous();
  const at::Tensor v = v_in.to(cache.scalar_type()).contiguous();
  const at::Tensor slots = slot_mapping.to(at::kLong).contiguous();
  TORCH_CHECK(k.dim() == 3 && k.size(1) == kv_heads && k.size(2) == D && v.sizes() == k.sizes() &&
                  slots.numel() == k.size(0),
              "write_paged_kv: k, v (tokens, ", kv_heads, ", ", D, ") and one slot per token "
              "expected, got ", k.sizes(), ", ", v.sizes(), " and ", slots.numel(), " slots");
  const int64_t* sp = slots.const_data_ptr<int64_t>();
  auto write = [&](auto* base, auto* kp, auto* vp) {
    for (int64_t t = 0; t < k.size(0); ++t) {
      const int64_t slot = sp[t];
      if (slot < 0) continue;
      TORCH_CHECK(slot < blocks * block_size, "write_paged_kv: slot ", slot, " outside a cache of ",
                  blocks, " blocks of ", block_size);
      const int64_t block = slot / block_size, offset = slot % block_size;
      for (int64_t h = 0; h < kv_heads; ++h) {
        auto* key_block = base + (block * 2 * kv_heads + h) * block_size * D;
        for (int64_t d = 0; d < D; ++d)
          key_block[d * block_size + offset] = kp[(t * kv_heads + h) * D + d];
        auto* value_row = base + (((block * 2 + 1) * kv_heads + h) * block_size + offset) * D;
        std::copy(vp + (t * kv_heads + h) * D, vp + (t * kv_heads + h + 1) * D, value_row);
      }
    }
  };
  if (cache.scalar_type() == at::kFloat)
    write(cache.mutable_data_ptr<float>(), k.const_data_ptr<float>(), v.const_data_ptr<float>());
  else
    write(cache.mutable_data_ptr<bf16>(), k.const_data_ptr<bf16>(), v.const_data_ptr<bf16>());
}

at::Tensor exp_fp32(const at::Tensor& x_in) {
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
  const float* xp = x.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = exp_scalar(xp[i]);
  return out;
}

}  // namespace

TORCH_LIBRARY(agent_rl_matched, m) {
  m.def("linear(Tensor x, Tensor packed, int n) -> Tensor", &linear);
  m.def("pack_linear_weight(Tensor weight) -> Tensor", &pack_linear_weight);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("silu_and_mul(Tensor gate, Tensor up) -> Tensor", &silu_and_mul);
  m.def("attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor", &attention);
  m.def("paged_attention(Tensor q, Tensor kv_cache, Tensor query_start_loc, Tensor seq_lens, "
        "Tensor positions, Tensor block_table, float scale) -> Tensor",
        &paged_attention);
  m.def("write_paged_kv(Tensor(a!) kv_cache, Tensor k, Tensor v, Tensor slot_mapping) -> ()",
        &write_paged_kv);
  m.def("exp(Tensor x) -> Tensor", &exp_fp32);
}
