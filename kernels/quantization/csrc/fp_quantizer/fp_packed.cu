// Grouped quantize / dequantize of small float formats with bit-packed codes (rules in
// gpu_fp_quantizer.h and gpu_fp_format.h): FP8 e4m3 / e5m2 (for stochastic rounding and the
// selective dequantize; fp_quantizer.cu keeps the round-to-nearest FP8 path), FP6 e3m2 / e2m3,
// FP4 e2m1 and the 12-bit e4m7.
//
// Work layout from gpu_quant_common.h: a sub-warp of `lanes` threads owns one group at a time,
// each lane owning "slots" of VEC consecutive elements. On the fast path a slot is 16 bytes of
// x / y (one 128-bit access) and VEC * bits / 8 bytes of codes, written and read with the
// widest accesses that size allows (q aligned to them). Otherwise (a group_size that is no
// multiple of 16 bytes of x, or x / y / q misaligned) a slot is the fewest codes that fill
// whole bytes, accessed element by element and byte by byte.
//
// Quantize: a first pass reduces max |x| over the group (the first kBatch slots of each lane
// stay in registers, so a group of at most kBatch * lanes slots is read once), a second encodes
// (reading the rest of a larger group again, from L1 / L2). Per element: one IEEE division (the
// codes round the exact quotient x / scale, which stochastic rounding needs to its last bit:
// no reciprocal shortcut as in fp_quantizer.cu), the integer encode of gpu_fp_format.h, and with
// stochastic rounding a quarter of a Philox4x32-10 call.
// Dequantize: one output group per sub-warp; its input group from the layout or, with an index,
// from the row named.
#include "gpu_fp_quantizer.h"
#include "gpu_compat.h"
#include "gpu_fp_format.h"
#include "gpu_quant_common.h"

namespace {

// Codes of `bits` bits that fill whole bytes: 2 (4 and 12 bits), 4 (6 bits) or 1 (8 bits).
constexpr int pack_codes(int bits) { return bits == 6 ? 4 : bits == 8 ? 1 : 2; }

// The widest access (bytes, at most 8) that tiles `bytes` bytes.
constexpr int access_width(int bytes) {
  return bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : bytes % 2 == 0 ? 2 : 1;
}

// A slot's VEC codes of BITS bits: kBytes bytes, held as little-endian 32-bit words. A slot
// starts at a multiple of kBytes in q (its first element's index is a multiple of VEC), so q
// aligned to kWidth makes every slot's accesses aligned; the unaligned path takes bytes.
template <int VEC, int BITS, bool ALIGNED>
struct Packed {
  static_assert(VEC * BITS % 8 == 0, "a slot fills whole bytes");
  static constexpr int kBytes = VEC * BITS / 8;
  static constexpr int kWords = (kBytes + 3) / 4;
  static constexpr int kWidth = ALIGNED ? access_width(kBytes) : 1;
};

// Code k at bits [k * BITS, (k + 1) * BITS) of the words: least significant bit first.
template <int VEC, int BITS, int WORDS>
__device__ __forceinline__ void pack(const uint32_t (&codes)[VEC], uint32_t (&w)[WORDS]) {
#pragma unroll
  for (int i = 0; i < WORDS; ++i) w[i] = 0;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int pos = k * BITS;
    w[pos / 32] |= codes[k] << (pos % 32);
    if (pos % 32 + BITS > 32) w[pos / 32 + 1] |= codes[k] >> (32 - pos % 32);
  }
}

template <int VEC, int BITS, int WORDS>
__device__ __forceinline__ void unpack(const uint32_t (&w)[WORDS], uint32_t (&codes)[VEC]) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int pos = k * BITS;
    uint32_t c = w[pos / 32] >> (pos % 32);
    if (pos % 32 + BITS > 32) c |= w[pos / 32 + 1] << (32 - pos % 32);
    codes[k] = c & ((1u << BITS) - 1u);
  }
}

// BYTES bytes of words at p in WIDTH-byte accesses (p aligned to WIDTH).
template <int BYTES, int WIDTH, int WORDS>
__device__ __forceinline__ void store_words(uint8_t* p, const uint32_t (&w)[WORDS]) {
#pragma unroll
  for (int b = 0; b < BYTES; b += WIDTH) {
    if constexpr (WIDTH == 8) {
      *reinterpret_cast<uint2*>(p + b) = make_uint2(w[b / 4], w[b / 4 + 1]);
    } else if constexpr (WIDTH == 4) {
      *reinterpret_cast<uint32_t*>(p + b) = w[b / 4];
    } else if constexpr (WIDTH == 2) {
      *reinterpret_cast<uint16_t*>(p + b) = static_cast<uint16_t>(w[b / 4] >> (8 * (b % 4)));
    } else {
      p[b] = static_cast<uint8_t>(w[b / 4] >> (8 * (b % 4)));
    }
  }
}

template <int BYTES, int WIDTH, int WORDS>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[WORDS]) {
#pragma unroll
  for (int i = 0; i < WORDS; ++i) w[i] = 0;
#pragma unroll
  for (int b = 0; b < BYTES; b += WIDTH) {
    if constexpr (WIDTH == 8) {
      const uint2 v = *reinterpret_cast<const uint2*>(p + b);
      w[b / 4] = v.x;
      w[b / 4 + 1] = v.y;
    } else if constexpr (WIDTH == 4) {
      w[b / 4] = *reinterpret_cast<const uint32_t*>(p + b);
    } else if constexpr (WIDTH == 2) {
      w[b / 4] |= static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p + b)) << (8 * (b % 4));
    } else {
      w[b / 4] |= static_cast<uint32_t>(p[b]) << (8 * (b % 4));
    }
  }
}

// A slot of x: one 16-byte load when ALIGNED, else element by element.
template <bool ALIGNED, typename T, int VEC>
__device__ __forceinline__ void load_slot(GpuVec<T, VEC>& slot, const T* p) {
  if constexpr (ALIGNED) {
    slot = *reinterpret_cast<const GpuVec<T, VEC>*>(p);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) slot.v[k] = p[k];
  }
}

// The random words of elements first .. first + VEC - 1 (flat indices). VEC is a multiple of 4
// with `first` one too (the fast path's 4 or 8 elements, 6-bit's 4 codes: group_size is a
// multiple of VEC), or 1 or 2 with `first` a multiple of VEC: one Philox block holds the slot.
template <int VEC>
__device__ __forceinline__ void slot_random(uint64_t first, uint64_t seed, uint32_t (&r)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC / 4; ++j) {
      const gpu_fpf::Words4 words = gpu_fpf::random_block(first / 4 + j, seed);
#pragma unroll
      for (int i = 0; i < 4; ++i) r[4 * j + i] = words.v[i];
    }
  } else {
    static_assert(VEC == 1 || VEC == 2, "slots of 1, 2 or a multiple of 4 elements");
    const gpu_fpf::Words4 words = gpu_fpf::random_block(first >> 2, seed);
    const int at = static_cast<int>(first & 3u);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      // Selects, not words.v[at + k]: a dynamic index would put the words in local memory.
      const int i = at + k;
      r[k] = i == 0 ? words.v[0] : i == 1 ? words.v[1] : i == 2 ? words.v[2] : words.v[3];
    }
  }
}

constexpr int kBatch = 4;  // slots per lane per batch: 16-byte loads in flight, and the cache

template <bool ALIGNED, typename T, int VEC>
__device__ __forceinline__ void load_batch(GpuVec<T, VEC> (&raw)[kBatch], const T* xg, int64_t base, int lanes,
                                           int64_t slots) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int64_t slot = base + static_cast<int64_t>(b) * lanes;
    if (slot < slots) load_slot<ALIGNED>(raw[b], xg + slot * VEC);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void add_batch(GroupAbsMax& stat, const GpuVec<T, VEC> (&raw)[kBatch], int64_t base,
                                          int lanes, int64_t slots) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    if (base + static_cast<int64_t>(b) * lanes < slots) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) stat.add(to_float(raw[b].v[k]));
    }
  }
}

// ---- quantize

template <typename T, int VEC, bool ALIGNED, int EXP, int MAN>
__global__ void __launch_bounds__(kBlock)
    fp_quantize_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale_out,
                       int64_t groups, int64_t group_size, int lanes, bool stochastic, uint64_t seed) {
  using F = gpu_fpf::Format<EXP, MAN>;
  using P = Packed<VEC, F::kBits, ALIGNED>;
  using Slot = GpuVec<T, VEC>;
  const auto [lane, per_block, sub] = sub_warp(lanes);
  const int64_t slots = group_size / VEC;
  const int64_t group_bytes = group_size * F::kBits / 8;
  const int64_t batch = static_cast<int64_t>(kBatch) * lanes;
  const int64_t step = static_cast<int64_t>(gridDim.x) * per_block;
  // `first` is the same in the whole block, so the loop (and with it every shuffle) is taken
  // by all threads together; groups past the end only skip their loads and stores.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block; first < groups; first += step) {
    const int64_t group = first + sub;
    const bool active = group < groups;
    const T* xg = x + (active ? group : 0) * group_size;
    Slot raw[kBatch];
    GroupAbsMax stat;
    if (active) {
      load_batch<ALIGNED>(raw, xg, lane, lanes, slots);
      add_batch(stat, raw, lane, lanes, slots);
#pragma unroll 1
      for (int64_t base = lane + batch; base < slots; base += batch) {
        Slot more[kBatch];
        load_batch<ALIGNED>(more, xg, base, lanes, slots);
        add_batch(stat, more, base, lanes, slots);
      }
    }
    merge_stat(stat, lanes);
    // Only the last loop step has inactive groups: leaving early skips no one's shuffle.
    if (!active) continue;
    const float scale = gpu_div_rn(stat.value(), F::kMax);
    if (lane == 0) scale_out[group] = scale;
    const bool live = scale > 0.0f;  // else (0, or NaN from a NaN) every code of the group is 0
    uint8_t* qg = q + group * group_bytes;
#pragma unroll 1
    for (int64_t base = lane; base < slots; base += batch) {
      if (base != lane && live) load_batch<ALIGNED>(raw, xg, base, lanes, slots);  // past the cached batch
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t slot = base + static_cast<int64_t>(b) * lanes;
        if (slot >= slots) continue;
        uint32_t codes[VEC];
        if (live) {
          uint32_t random[VEC];
          if (stochastic) {
            slot_random<VEC>(static_cast<uint64_t>(group * group_size + slot * VEC), seed, random);
          } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) random[k] = 0;
          }
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            codes[k] = gpu_fpf::encode<EXP, MAN>(gpu_div_rn(to_float(raw[b].v[k]), scale), stochastic, random[k]);
          }
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) codes[k] = 0;
        }
        uint32_t words[P::kWords];
        pack<VEC, F::kBits>(codes, words);
        store_words<P::kBytes, P::kWidth>(qg + slot * P::kBytes, words);
      }
    }
  }
}

// ---- dequantize

// Stores of y: a slot at once when ALIGNED, else element by element.
template <typename T, int VEC, bool ALIGNED, int EXP, int MAN>
__global__ void __launch_bounds__(kBlock)
    fp_dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, T* __restrict__ y,
                         int64_t out_groups, int64_t group_size, int lanes, const int64_t* __restrict__ index,
                         int64_t row_groups, int64_t rows) {
  using F = gpu_fpf::Format<EXP, MAN>;
  using P = Packed<VEC, F::kBits, ALIGNED>;
  constexpr int kStore = ALIGNED ? VEC : 1;
  const auto [lane, per_block, sub] = sub_warp(lanes);
  const int64_t slots = group_size / VEC;
  const int64_t group_bytes = group_size * F::kBits / 8;
  const int64_t step = static_cast<int64_t>(gridDim.x) * per_block;
  // No shuffles here: each sub-warp walks its own groups.
  for (int64_t group = static_cast<int64_t>(blockIdx.x) * per_block + sub; group < out_groups; group += step) {
    int64_t src = group;
    bool valid = true;
    if (index != nullptr) {
      const int64_t r = group / row_groups;
      const int64_t row = index[r];
      valid = row >= 0 && row < rows;
      src = valid ? row * row_groups + (group - r * row_groups) : 0;
    }
    // An index the caller failed to check reads nothing out of bounds: its rows come out NaN.
    const float s = valid ? scale[src] : gpu_fpf::bits_float(0x7FC00000u);
    const uint8_t* qg = q + src * group_bytes;
    T* yg = y + group * group_size;
#pragma unroll 1
    for (int64_t slot = lane; slot < slots; slot += lanes) {
      uint32_t words[P::kWords] = {};
      if (valid) load_words<P::kBytes, P::kWidth>(qg + slot * P::kBytes, words);
      uint32_t codes[VEC];
      unpack<VEC, F::kBits>(words, codes);
      float out[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = gpu_fpf::decode<EXP, MAN>(codes[k]) * s;
      store_as<VEC, kStore>(yg + slot * VEC, out);
    }
  }
}

// ---- launch helpers (host)

template <int EXP, int MAN>
struct FormatTag {
  static constexpr int kExp = EXP;
  static constexpr int kMan = MAN;
  static constexpr int kBits = 1 + EXP + MAN;
};

template <typename Fn>
gpuError_t with_format(gpu_ops::FpFormat format, Fn&& fn) {
  switch (format) {
    case gpu_ops::FpFormat::kE4M3:
      return fn(FormatTag<4, 3>{});
    case gpu_ops::FpFormat::kE5M2:
      return fn(FormatTag<5, 2>{});
    case gpu_ops::FpFormat::kE3M2:
      return fn(FormatTag<3, 2>{});
    case gpu_ops::FpFormat::kE2M3:
      return fn(FormatTag<2, 3>{});
    case gpu_ops::FpFormat::kE2M1:
      return fn(FormatTag<2, 1>{});
    case gpu_ops::FpFormat::kE4M7:
      return fn(FormatTag<4, 7>{});
  }
  return gpuErrorInvalidValue;
}

// One instantiation per kernel, so the occupancy query (static) runs once per kernel and
// process; only the grid depends on it, never a result.
template <typename T, int VEC, bool ALIGNED, int EXP, int MAN>
void launch_quantize(const T* x, uint8_t* q, float* scale, int64_t groups, int64_t group_size, bool stochastic,
                     uint64_t seed, gpuStream_t stream) {
  static const int per_sm = resident_blocks_per_sm(fp_quantize_kernel<T, VEC, ALIGNED, EXP, MAN>);
  const int lanes = lanes_for(group_size / VEC);
  const unsigned grid = persistent_grid(gpu_ceil_div(groups, kBlock / lanes), per_sm);
  fp_quantize_kernel<T, VEC, ALIGNED, EXP, MAN>
      <<<grid, kBlock, 0, stream>>>(x, q, scale, groups, group_size, lanes, stochastic, seed);
}

template <typename T, int VEC, bool ALIGNED, int EXP, int MAN>
void launch_dequantize(const uint8_t* q, const float* scale, T* y, int64_t out_groups, int64_t group_size,
                       const int64_t* index, int64_t row_groups, int64_t rows, gpuStream_t stream) {
  static const int per_sm = resident_blocks_per_sm(fp_dequantize_kernel<T, VEC, ALIGNED, EXP, MAN>);
  const int lanes = lanes_for(group_size / VEC);
  const unsigned grid = persistent_grid(gpu_ceil_div(out_groups, kBlock / lanes), per_sm);
  fp_dequantize_kernel<T, VEC, ALIGNED, EXP, MAN>
      <<<grid, kBlock, 0, stream>>>(q, scale, y, out_groups, group_size, lanes, index, row_groups, rows);
}

}  // namespace

namespace gpu_ops {

gpuError_t fp_quantize(const void* x, uint8_t* q, float* scale, int64_t groups, int64_t group_size,
                       FpFormat format, bool stochastic, uint64_t seed, DType dtype, gpuStream_t stream) {
  if (groups == 0) return gpuSuccess;
  if (group_size <= 0 || group_size * fp_format_bits(format) % 8 != 0) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = kVecOf<T>;
    const T* xt = static_cast<const T*>(x);
    return with_format(format, [&](auto fmt) {
      using Fmt = decltype(fmt);
      constexpr int kPack = pack_codes(Fmt::kBits);
      const bool fast = group_size % kVec == 0 && gpu_is_aligned(xt, kVec) &&
                        gpu_is_aligned(q, Packed<kVec, Fmt::kBits, true>::kWidth);
      if (fast) {
        launch_quantize<T, kVec, true, Fmt::kExp, Fmt::kMan>(xt, q, scale, groups, group_size, stochastic, seed,
                                                             stream);
      } else {
        launch_quantize<T, kPack, false, Fmt::kExp, Fmt::kMan>(xt, q, scale, groups, group_size, stochastic, seed,
                                                               stream);
      }
      return gpuGetLastError();
    });
  });
}

gpuError_t fp_dequantize(const uint8_t* q, const float* scale, void* y, int64_t out_groups, int64_t group_size,
                         FpFormat format, const int64_t* index, int64_t row_groups, int64_t rows, DType dtype,
                         gpuStream_t stream) {
  if (out_groups == 0) return gpuSuccess;
  if (group_size <= 0 || group_size * fp_format_bits(format) % 8 != 0) return gpuErrorInvalidValue;
  if (index != nullptr && row_groups <= 0) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = kVecOf<T>;
    T* yt = static_cast<T*>(y);
    return with_format(format, [&](auto fmt) {
      using Fmt = decltype(fmt);
      constexpr int kPack = pack_codes(Fmt::kBits);
      const bool fast = group_size % kVec == 0 && gpu_is_aligned(yt, kVec) &&
                        gpu_is_aligned(q, Packed<kVec, Fmt::kBits, true>::kWidth);
      if (fast) {
        launch_dequantize<T, kVec, true, Fmt::kExp, Fmt::kMan>(q, scale, yt, out_groups, group_size, index,
                                                               row_groups, rows, stream);
      } else {
        launch_dequantize<T, kPack, false, Fmt::kExp, Fmt::kMan>(q, scale, yt, out_groups, group_size, index,
                                                                 row_groups, rows, stream);
      }
      return gpuGetLastError();
    });
  });
}

}  // namespace gpu_ops
