// SPDX-License-Identifier: MIT
// Two kernels. The tiled one serves StyleGAN2's resamplers (up 2, down 2, or neither, with a
// square filter of 1 or 4 taps, in float32, float16 or bfloat16): a block stages its tile of input
// (with the halo the filter reaches) in shared memory, zeros where the padding is (16-byte cp.async
// where it can: stage_tile), and each thread computes consecutive rows of outputs from a window of
// input rows in registers, every tap in registers too (with up 2, a row's two column phases,
// written as one vector store). Everything else takes the general kernel: one thread per output column of a run
// of rows, its taps computed once and reused down the rows, the reads served by L1. Both sum an
// output's taps in the same order (input rows, then columns, ascending), so the two agree bit for
// bit (the tiled one adds the padding's zeros, which changes nothing but, at most, the sign of a
// zero). Index arithmetic within a plane is 32-bit where the sizes allow (a 64-bit division per
// pixel costs more than the pixel's loads).
#include "../upfirdn2d.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerThread = 4;  // general kernel: enough work per thread to amortise its column taps
constexpr int64_t kMaxGridYZ = 65535;

template <typename index_t>
struct Shape {
  int64_t planes;
  index_t in_h, in_w, out_h, out_w, fh, fw;
};

template <typename scalar_t, typename index_t>
__global__ void upfirdn2d_kernel(const scalar_t* __restrict x, const scalar_t* __restrict f, scalar_t* __restrict out,
                                 Shape<index_t> s, Upfirdn2dParams p) {
  using acc_t = acc_type<scalar_t>;
  const index_t ox = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ox >= s.out_w) return;
  const AxisTaps<index_t> col = axis_taps<index_t>(ox, p.upx, p.downx, p.padx0, s.fw, s.in_w, p.flip_filter);
  const acc_t gain(p.gain);
  const index_t row_stride = static_cast<index_t>(gridDim.y) * blockDim.y;
  for (int64_t plane = blockIdx.z; plane < s.planes; plane += gridDim.z) {
    const scalar_t* in = x + plane * s.in_h * s.in_w;
    scalar_t* o = out + plane * s.out_h * s.out_w + ox;
    for (index_t oy = static_cast<index_t>(blockIdx.y) * blockDim.y + threadIdx.y; oy < s.out_h; oy += row_stride) {
      const AxisTaps<index_t> row = axis_taps<index_t>(oy, p.upy, p.downy, p.pady0, s.fh, s.in_h, p.flip_filter);
      o[oy * s.out_w] = from_acc<scalar_t>(
          gain * upfirdn2d_pixel<acc_t>(in, s.in_w, f, s.fw, row, col, [](scalar_t v) { return to_acc(v); }));
    }
  }
}

template <typename scalar_t, typename index_t>
void launch(const scalar_t* x, const scalar_t* f, scalar_t* out, const Upfirdn2dSizes& z, const Upfirdn2dParams& p,
            CudaStream stream) {
  const Shape<index_t> s{z.planes,
                         static_cast<index_t>(z.in_h),
                         static_cast<index_t>(z.in_w),
                         static_cast<index_t>(z.out_h),
                         static_cast<index_t>(z.out_w),
                         static_cast<index_t>(z.fh),
                         static_cast<index_t>(z.fw)};
  // Narrow images get narrower, taller blocks, so that few threads idle past the last column.
  int threads_x = 1;
  while (threads_x < 32 && threads_x < z.out_w) threads_x *= 2;
  const dim3 block(threads_x, kThreads / threads_x);
  const dim3 grid(ceil_div<int64_t>(z.out_w, threads_x),
                  std::min(ceil_div<int64_t>(z.out_h, block.y * kRowsPerThread), kMaxGridYZ),
                  std::min(z.planes, kMaxGridYZ));
  upfirdn2d_kernel<scalar_t, index_t><<<grid, block, 0, stream>>>(x, f, out, s, p);
  JITOPS_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// The tiled kernel. A block of 32 x 8 threads computes a tile of kOutW x kOutH outputs of one
// plane; thread (tx, ty) computes outputs (up * tx + p, ty + 8 i) for p < up. The tile starts on
// an output whose first tap lands on a real (not inserted) sample, so an output's phase, hence its
// taps, depends on the parity of its place in the tile only: a thread's rows, 8 apart, share their
// row phase, and its up column phases are one each.
// ---------------------------------------------------------------------------------------------

template <int kUp, int kDown, int kTaps>
struct Tile {
  static_assert(kTaps % kUp == 0, "every phase must use the same number of taps");
  static constexpr int kThreadsX = 32, kThreadsY = 8;
  static constexpr int kRows = kDown == 2 ? 4 : 8;  // consecutive output rows per thread (kUp outputs each)
  static constexpr int kOutW = kThreadsX * kUp, kOutH = kThreadsY * kRows;
  static constexpr int kTapsPerPhase = kTaps / kUp;
  // A thread's output row i (of kRows, from an even row) reads input rows first_row(i) ..
  // last_row(i) of its window (with up 2, row 2 n + py starts at tap py: (i + py) / 2).
  __host__ __device__ static constexpr int first_row(int i) { return kUp == 2 ? (i + (i & 1)) / 2 : i * kDown; }
  __host__ __device__ static constexpr int last_row(int i) { return first_row(i) + kTapsPerPhase - 1; }
  static constexpr int kWindowRows = last_row(kRows - 1) + 1;
  static constexpr int kWindowCols = kTapsPerPhase + kUp - 1;  // the columns of a row's kUp outputs
  // The input samples under the tile: output o's last tap reads sample (o * down + taps - 1) / up.
  static constexpr int kInW = ((kOutW - 1) * kDown + kTaps - 1) / kUp + 1;
  static constexpr int kInH = ((kOutH - 1) * kDown + kTaps - 1) / kUp + 1;
};

// cp.async (global to shared memory without registers) exists from sm_80 on.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kCpAsync = false;
#else
constexpr bool kCpAsync = true;
#endif

// Blocks resident per SM that the register budget must allow: 4 (64 registers a thread). With
// down 2, a block reads 4 inputs per output, so more of them in flight pay most: 6 (40 registers)
// where the tile is staged with cp.async (stage_tile; its register path for rows of odd length
// stages in batches small enough for that budget), else 3.
template <int kDown>
constexpr int min_blocks() {
  return kDown != 2 ? 4 : kCpAsync ? 6 : 3;
}

// The tile in shared memory, row after row: float32 as float32, the 16-bit types as they are (2
// bytes each, converted as they are read). A row starts `shift` columns before the tile's first
// input column: the staging copies whole aligned pieces of the input (16-byte chunks, or 4-byte
// pairs of 16-bit values) into aligned places, so a row holds up to kVector - 1 columns more than
// the tile needs. (With down 2 a warp's threads read every other float32 column: two shared-memory
// wavefronts a read instead of one. An even/odd split of the rows avoided that, but ruled out
// 16-byte copies, and the staging's instructions, not shared memory, bound the kernel: down 2 is
// faster without the split; docs/history/BENCHMARKS-history.md, issue 12's second pass.)
template <typename T, typename scalar_t>
struct TileLayout {
  using value_t = std::conditional_t<sizeof(scalar_t) == 2, scalar_t, float>;
  static constexpr bool kPairs = sizeof(scalar_t) == 2;
  static constexpr int kVector = 16 / sizeof(value_t);  // values in a 16-byte chunk
  static constexpr int kPitch = ceil_div(T::kInW + kVector - 1, kVector) * kVector;
};

struct TiledShape {
  int64_t planes;
  int in_h, in_w, out_h, out_w;
  int tiles_x;           // tiles along x; blockIdx.x = tile_y * tiles_x + tile_x
  int shift_x, shift_y;  // the first tile starts this many outputs before output 0
  int pad_x0, pad_y0;
  bool pair_stores;    // up 2: each output pair (2 m, 2 m + 1) of a tile is one aligned vector store
  bool pair_copies;    // 16-bit types: rows of even length from a 4-byte aligned x, copied in pairs
  bool vector_copies;  // rows of whole 16-byte chunks from a 16-byte aligned x, copied by chunk
};

// The cells e = thread, thread + kThreads, ... of a grid kCols wide, as (row, column) kept by
// increments: a division per cell, and the address arithmetic around it, would make the staging
// bound by the integer pipeline rather than by memory (as Nsight Compute showed).
template <int kCols, int kThreads>
struct CellCursor {
  static constexpr int kStepRows = kThreads / kCols, kStepCols = kThreads % kCols;
  int r, c;
  __device__ explicit CellCursor(int thread) : r(thread / kCols), c(thread - thread / kCols * kCols) {}
  __device__ void advance() {
    r += kStepRows;
    c += kStepCols;
    if (c >= kCols) {
      c -= kCols;
      ++r;
    }
  }
};

// Whether input (iy, ix) lies in the plane (one unsigned comparison per axis).
__device__ __forceinline__ bool in_plane(int iy, int ix, const TiledShape& s) {
  return static_cast<unsigned>(iy) < static_cast<unsigned>(s.in_h) &&
         static_cast<unsigned>(ix) < static_cast<unsigned>(s.in_w);
}

// cp.async of kBytes (4 or 16, both addresses aligned to it) from src to the shared-memory address
// dst, or, where inside is false, none read and the kBytes zero-filled. 16-byte copies are cached
// in L2 only: the tile is its own cache, and neighbouring tiles read its halo from L2. (Unused
// where kCpAsync is false.)
template <int kBytes>
[[maybe_unused]] __device__ __forceinline__ void copy_async(void* dst, const void* src, bool inside) {
  static_assert(kBytes == 4 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes; the staging uses 4 and 16");
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src), "r"(inside ? 16 : 0));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared), "l"(src), "r"(inside ? 4 : 0));
  }
}

// Copies the tile's rows in pieces of kValues values each, kPieces a row, with cp.async, and waits
// for them: piece q of row r holds input columns ix0 - shift + kValues q onwards, all inside the
// plane or all outside (the callers pick kValues so that the plane's rows split into whole pieces).
// Not unrolled: a copy in flight holds no register, so nothing is gained by hoisting the address
// arithmetic of all of them, and that would spill.
template <typename T, int kValues, int kPieces, typename scalar_t, typename value_t>
__device__ __forceinline__ void copy_rows_async(value_t* tile, const scalar_t* in, int iy0, int ix0, int shift,
                                                const TiledShape& s, int thread) {
  using L = TileLayout<T, scalar_t>;
#pragma unroll 1
  for (CellCursor<kPieces, T::kThreadsX * T::kThreadsY> cell(thread); cell.r < T::kInH; cell.advance()) {
    const int iy = iy0 + cell.r, ix = ix0 - shift + kValues * cell.c;
    const bool inside = in_plane(iy, ix, s);
    copy_async<kValues * sizeof(value_t)>(tile + cell.r * L::kPitch + kValues * cell.c,
                                          in + (inside ? iy * s.in_w + ix : 0), inside);
  }
  asm volatile("cp.async.wait_all;\n" ::);
}

// Fills the tile with input rows iy0.. and columns ix0.. of one plane (TileLayout), zeros outside
// it. On sm_80 and later, float32 and (where pair_copies) the 16-bit types copy with cp.async,
// which holds no register while a copy is in flight, so a block keeps its whole tile in flight and
// more blocks fit per SM. Otherwise every load of a batch is issued first, into registers, then
// its stores to shared memory: loads and stores interleaved would wait out one memory latency per
// element (a third of the bandwidth with down 2). Returns once this thread's part is in shared
// memory (the caller syncs the block).
template <typename T, typename scalar_t, typename value_t>
__device__ __forceinline__ void stage_tile(value_t* tile, const scalar_t* in, int iy0, int ix0, int shift,
                                           const TiledShape& s, int thread) {
  using L = TileLayout<T, scalar_t>;
  constexpr int kThreads = T::kThreadsX * T::kThreadsY;
  if constexpr (kCpAsync) {
    if (s.vector_copies) {  // 16-byte chunks: the plane's rows are whole chunks
      return copy_rows_async<T, L::kVector, L::kPitch / L::kVector>(tile, in, iy0, ix0, shift, s, thread);
    }
    if constexpr (L::kPairs) {
      if (s.pair_copies) {  // pairs of 16-bit values: the plane's rows have even length
        return copy_rows_async<T, 2, L::kPitch / 2>(tile, in, iy0, ix0, shift, s, thread);
      }
    }
  }
  if constexpr (kCpAsync && !L::kPairs) {  // float32 by the value (shift is 0 here)
    copy_rows_async<T, 1, T::kInW>(tile, in, iy0, ix0, shift, s, thread);
  } else {
    // In batches of 4 elements: loads before stores, in as few registers as the 16-bit types'
    // cp.async path needs beside it (this path serves rows of odd length and GPUs before sm_80).
    constexpr int kBatch = 4;
    CellCursor<T::kInW, kThreads> cell(thread);
#pragma unroll 1
    while (cell.r < T::kInH) {
      CellCursor<T::kInW, kThreads> batch = cell;
      value_t staged[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k, cell.advance()) {
        const int iy = iy0 + cell.r, ix = ix0 + cell.c;
        const bool inside = cell.r < T::kInH && in_plane(iy, ix, s);
        if constexpr (L::kPairs) {
          staged[k] = inside ? in[iy * s.in_w + ix] : from_acc<scalar_t>(0.0f);
        } else {
          staged[k] = inside ? to_acc(in[iy * s.in_w + ix]) : value_t(0);
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k, batch.advance()) {
        if (batch.r < T::kInH) tile[batch.r * L::kPitch + batch.c + shift] = staged[k];
      }
    }
  }
}

template <typename scalar_t, int kUp, int kDown, int kTaps>
__global__ void __launch_bounds__(256, (min_blocks<kDown>()))
    upfirdn2d_tiled_kernel(const scalar_t* __restrict x, const scalar_t* __restrict f, scalar_t* __restrict out,
                           TiledShape s, bool flip_filter, float gain) {
  using T = Tile<kUp, kDown, kTaps>;
  using L = TileLayout<T, scalar_t>;
  using acc_t = acc_type<scalar_t>;
  __shared__ __align__(16) typename L::value_t tile[T::kInH * L::kPitch];

  const int tx = threadIdx.x, ty = threadIdx.y, thread = ty * T::kThreadsX + tx;
  const int tile_y = blockIdx.x / s.tiles_x, tile_x = blockIdx.x - tile_y * s.tiles_x;
  const int ox0 = tile_x * T::kOutW - s.shift_x, oy0 = tile_y * T::kOutH - s.shift_y;
  // ox0 * down - pad is a multiple of up: the tile's first input sample, exactly.
  const int ix0 = (ox0 * kDown - s.pad_x0) / kUp, iy0 = (oy0 * kDown - s.pad_y0) / kUp;
  // The tile's column of input column ix0 (TileLayout): where the staging's first copy starts.
  const int shift = s.vector_copies ? ix0 & (L::kVector - 1) : L::kPairs ? ix0 & 1 : 0;

  // This thread's taps, in the order the general kernel reads them (upfirdn2d.h: axis_taps): for
  // each row phase py and column phase px (with up 2, output row 2 n + py starts at tap py, and
  // likewise for columns), kTapsPerPhase rows of kTapsPerPhase taps.
  acc_t w[kUp][T::kTapsPerPhase][kUp][T::kTapsPerPhase];
#pragma unroll
  for (int py = 0; py < kUp; ++py) {
#pragma unroll
    for (int t = 0; t < T::kTapsPerPhase; ++t) {
#pragma unroll
      for (int px = 0; px < kUp; ++px) {
#pragma unroll
        for (int u = 0; u < T::kTapsPerPhase; ++u) {
          const int ky = py + t * kUp, kx = px + u * kUp;
          w[py][t][px][u] =
              to_acc(f[(flip_filter ? ky : kTaps - 1 - ky) * kTaps + (flip_filter ? kx : kTaps - 1 - kx)]);
        }
      }
    }
  }

  for (int64_t plane = blockIdx.z; plane < s.planes; plane += gridDim.z) {
    stage_tile<T>(tile, x + plane * s.in_h * s.in_w, iy0, ix0, shift, s, thread);
    __syncthreads();

    // This thread's kRows consecutive output rows, and in each the kUp adjacent outputs lx = kUp m
    // + px (with up 2, 3 loads serve both phases). Consecutive rows share input rows, so each input
    // row is read from the tile once, into registers, as the rows that use it are computed (all
    // indices are constants, the loops unrolled: the window is registers, not an array).
    const int ly0 = ty * T::kRows, m = tx, lx0 = kUp * m, ox = ox0 + lx0;
    const int row0 = (ly0 * kDown) / kUp;  // the tile row of the first row's first tap (ly0 is even)
    const int col0 = (lx0 * kDown) / kUp;  // the tile column of px = 0's first tap
    const typename L::value_t* window_origin = tile + row0 * L::kPitch;
    acc_t v[T::kWindowRows][T::kWindowCols];
    scalar_t* o = out + plane * s.out_h * s.out_w;
#pragma unroll
    for (int k = 0; k < T::kWindowRows; ++k) {
#pragma unroll
      for (int c = 0; c < T::kWindowCols; ++c) v[k][c] = to_acc(window_origin[k * L::kPitch + col0 + c + shift]);
#pragma unroll
      for (int i = 0; i < T::kRows; ++i) {
        if (T::last_row(i) != k) continue;  // output row i is computed once its last input row is in
        const int py = kUp == 2 ? (i & 1) : 0, first = T::first_row(i), oy = oy0 + ly0 + i;
        acc_t sums[kUp];
#pragma unroll
        for (int px = 0; px < kUp; ++px) {
          sums[px] = 0;
#pragma unroll
          for (int t = 0; t < T::kTapsPerPhase; ++t) {
#pragma unroll
            for (int u = 0; u < T::kTapsPerPhase; ++u) sums[px] += v[first + t][px + u] * w[py][t][px][u];
          }
        }
        if (oy < 0 || oy >= s.out_h) continue;
        scalar_t* row = o + oy * s.out_w;
        if (kUp == 2 && s.pair_stores && ox >= 0 && ox + 1 < s.out_w) {
          Vec<scalar_t, 2> pair;
          pair.v[0] = from_acc<scalar_t>(acc_t(gain) * sums[0]);
          pair.v[1] = from_acc<scalar_t>(acc_t(gain) * sums[kUp - 1]);
          *reinterpret_cast<Vec<scalar_t, 2>*>(row + ox) = pair;  // 4 or 8 bytes, aligned (pair_stores)
        } else {
#pragma unroll
          for (int px = 0; px < kUp; ++px) {
            if (ox + px >= 0 && ox + px < s.out_w) row[ox + px] = from_acc<scalar_t>(acc_t(gain) * sums[px]);
          }
        }
      }
    }
    __syncthreads();  // the tile is read by every thread before the next plane overwrites it
  }
}

// Launches the tiled kernel and returns true; or, with auto_pick and planes too small for a tile to
// pay, returns false: most of such a block's staging and threads would fall outside the plane, and
// the general kernel is faster there. On an H200 (examples/upfirdn2d_sweep.py) the tiled kernel
// wins from half a tile along each axis, with down 2 (four inputs staged per output) from a whole one.
template <typename scalar_t, int kUp, int kDown, int kTaps>
bool launch_tiled(const scalar_t* x, const scalar_t* f, scalar_t* out, const Upfirdn2dSizes& z,
                  const Upfirdn2dParams& p, CudaStream stream, bool auto_pick) {
  using T = Tile<kUp, kDown, kTaps>;
  const int64_t min_tiles_2x = kDown == 2 ? 2 : 1;  // twice the share of a tile the plane must fill
  if (auto_pick && (2 * z.out_w < min_tiles_2x * T::kOutW || 2 * z.out_h < min_tiles_2x * T::kOutH)) return false;
  // The first tile starts `shift` outputs early where that puts its first tap on a real sample
  // (with up 2: an output whose position o * down - pad is even).
  const int shift_x = kUp == 2 ? static_cast<int>(p.padx0 & 1) : 0;
  const int shift_y = kUp == 2 ? static_cast<int>(p.pady0 & 1) : 0;
  const int tiles_x = static_cast<int>(ceil_div<int64_t>(z.out_w + shift_x, T::kOutW));
  const int64_t tiles = tiles_x * ceil_div<int64_t>(z.out_h + shift_y, T::kOutH);
  const TiledShape s{z.planes, static_cast<int>(z.in_h), static_cast<int>(z.in_w), static_cast<int>(z.out_h),
                     static_cast<int>(z.out_w), tiles_x, shift_x, shift_y, static_cast<int>(p.padx0),
                     static_cast<int>(p.pady0),
                     // Pairs start on even columns of even-length rows of an aligned output.
                     shift_x == 0 && z.out_w % 2 == 0 && is_aligned(out, 2 * sizeof(scalar_t)),
                     z.in_w % 2 == 0 && is_aligned(x, 4), z.in_w * sizeof(scalar_t) % 16 == 0 && is_aligned(x, 16)};
  const dim3 block(T::kThreadsX, T::kThreadsY);
  // A block computes its tile in up to kPlanesPerBlock planes, which spreads the cost of its filter
  // taps and index arithmetic; only where the grid keeps kBlocksWanted blocks, so that the last wave
  // of blocks stays a small share of the work.
  constexpr int64_t kPlanesPerBlock = 8, kBlocksWanted = 8192;
  const int64_t planes_per_block = std::clamp<int64_t>(tiles * z.planes / kBlocksWanted, 1, kPlanesPerBlock);
  const int64_t grid_planes = std::min(ceil_div<int64_t>(z.planes, planes_per_block), kMaxGridYZ);
  const dim3 grid(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(grid_planes));
  upfirdn2d_tiled_kernel<scalar_t, kUp, kDown, kTaps>
      <<<grid, block, 0, stream>>>(x, f, out, s, p.flip_filter, static_cast<float>(p.gain));
  JITOPS_CHECK_LAUNCH();
  return true;
}

// Whether every position a plane's index arithmetic reaches fits in 32 bits.
bool fits_32_bits(const Upfirdn2dSizes& z, const Upfirdn2dParams& p) {
  const int64_t largest = std::max({z.in_h * z.in_w, z.out_h * z.out_w, z.in_h * p.upy + std::abs(p.pady0) + z.fh,
                                    z.in_w * p.upx + std::abs(p.padx0) + z.fw, z.out_h * p.downy + std::abs(p.pady0),
                                    z.out_w * p.downx + std::abs(p.padx0)});
  return largest < (int64_t{1} << 31);
}

// The tiled kernel for this call, if one is compiled for it (and, with auto_pick, if the planes are
// large enough for it to pay): returns whether it launched. float64 keeps the general kernel (the
// slow, exact dtype, where a smaller build counts more than speed).
template <typename scalar_t>
bool try_tiled(const scalar_t* x, const scalar_t* f, scalar_t* out, const Upfirdn2dSizes& z, const Upfirdn2dParams& p,
               CudaStream stream, bool auto_pick) {
  if constexpr (std::is_same<scalar_t, double>::value) {
    return false;
  } else {
    if (p.upx != p.upy || p.downx != p.downy || z.fh != z.fw || !fits_32_bits(z, p)) return false;
    const int64_t up = p.upx, down = p.downx, taps = z.fh;
    if (up == 1 && down == 1 && taps == 1) return launch_tiled<scalar_t, 1, 1, 1>(x, f, out, z, p, stream, auto_pick);
    if (up == 1 && down == 1 && taps == 4) return launch_tiled<scalar_t, 1, 1, 4>(x, f, out, z, p, stream, auto_pick);
    if (up == 2 && down == 1 && taps == 4) return launch_tiled<scalar_t, 2, 1, 4>(x, f, out, z, p, stream, auto_pick);
    if (up == 1 && down == 2 && taps == 4) return launch_tiled<scalar_t, 1, 2, 4>(x, f, out, z, p, stream, auto_pick);
    return false;
  }
}

}  // namespace

template <typename T>
void upfirdn2d_cuda(const T* x, const T* f, T* out, const Upfirdn2dSizes& sizes, const Upfirdn2dParams& params,
                    CudaStream stream, Upfirdn2dKernel kernel) {
  if (sizes.planes * sizes.out_h * sizes.out_w == 0) return;
  using scalar_t = CudaType<T>;
  if (kernel != Upfirdn2dKernel::kGeneral &&
      try_tiled<scalar_t>(cuda_ptr(x), cuda_ptr(f), cuda_ptr(out), sizes, params, stream,
                          /*auto_pick=*/kernel == Upfirdn2dKernel::kAuto)) {
    return;
  }
  if (kernel == Upfirdn2dKernel::kTiled) {
    throw std::runtime_error("jitops: upfirdn2d has no tiled kernel for this dtype, filter, up and down");
  }
  if (fits_32_bits(sizes, params)) {
    launch<scalar_t, int32_t>(cuda_ptr(x), cuda_ptr(f), cuda_ptr(out), sizes, params, stream);
  } else {
    launch<scalar_t, int64_t>(cuda_ptr(x), cuda_ptr(f), cuda_ptr(out), sizes, params, stream);
  }
}

#define JITOPS_INSTANTIATE(T)                                                                                        \
  template void upfirdn2d_cuda<T>(const T*, const T*, T*, const Upfirdn2dSizes&, const Upfirdn2dParams&, CudaStream, \
                                  Upfirdn2dKernel);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
