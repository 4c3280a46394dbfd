// SPDX-License-Identifier: MIT
// One group of `lanes` threads (a power of two, at most a warp) per point; the group's threads walk
// the point's F channels together, kVec channels per load, so every warp reads contiguous runs of
// each corner's row (coalesced along F) rather than one point per thread at a stride of 8 * F.
#include "../trilinear_interpolation.h"

#include <initializer_list>
#include <type_traits>

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

// Where a thread sits: its lane in its point's group, its first point, and the point stride.
struct PointGroups {
  int lanes_log2;
  int lane;
  int64_t first_point;
  int64_t point_stride;

  __device__ explicit PointGroups(int lanes_log2_)
      : lanes_log2(lanes_log2_),
        lane(threadIdx.x & ((1 << lanes_log2_) - 1)),
        first_point((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2_),
        point_stride((static_cast<int64_t>(gridDim.x) * blockDim.x) >> lanes_log2_) {}

  __device__ int lanes() const { return 1 << lanes_log2; }
};

template <typename scalar_t, int kVec>
__device__ __forceinline__ void load_corners(const Vec<scalar_t, kVec>* corners, int64_t f_vecs, int64_t c,
                                             Vec<scalar_t, kVec> loaded[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) loaded[k] = corners[k * f_vecs + c];
}

template <typename acc_t, typename scalar_t, int kVec>
__device__ __forceinline__ void channel_values(const Vec<scalar_t, kVec> loaded[8], int e, acc_t values[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) values[k] = to_acc(loaded[k].v[e]);
}

// feats: [N, 8, F], points: [N, 3], out: [N, F]; F = f_vecs * kVec.
template <typename scalar_t, int kVec>
__global__ void trilinear_forward_kernel(const scalar_t* __restrict__ feats, const scalar_t* __restrict__ points,
                                         scalar_t* __restrict__ out, int64_t n, int64_t f_vecs, int lanes_log2) {
  using acc_t = acc_type<scalar_t>;
  using V = Vec<scalar_t, kVec>;
  const PointGroups groups(lanes_log2);
  for (int64_t i = groups.first_point; i < n; i += groups.point_stride) {
    const TrilinearCell<acc_t> cell(to_acc(points[3 * i]), to_acc(points[3 * i + 1]), to_acc(points[3 * i + 2]));
    const V* corners = reinterpret_cast<const V*>(feats) + i * 8 * f_vecs;
    V* row = reinterpret_cast<V*>(out) + i * f_vecs;
    for (int64_t c = groups.lane; c < f_vecs; c += groups.lanes()) {
      V loaded[8];
      load_corners(corners, f_vecs, c, loaded);
      V result;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        acc_t values[8];
        channel_values(loaded, e, values);
        result.v[e] = from_acc<scalar_t>(cell.interpolate(values));
      }
      row[c] = result;
    }
  }
}

// grad_out: [N, F] -> grad_feats: [N, 8, F] and, with kPointsGrad, grad_points: [N, 3] (each
// point's channels summed within its group by warp shuffles).
template <typename scalar_t, int kVec, bool kPointsGrad>
__global__ void trilinear_backward_kernel(const scalar_t* __restrict__ grad_out, const scalar_t* __restrict__ feats,
                                          const scalar_t* __restrict__ points, scalar_t* __restrict__ grad_feats,
                                          scalar_t* __restrict__ grad_points, int64_t n, int64_t f_vecs,
                                          int lanes_log2) {
  using acc_t = acc_type<scalar_t>;
  using V = Vec<scalar_t, kVec>;
  const PointGroups groups(lanes_log2);
  // The lanes of this thread's group within its warp: groups of one warp may leave the point loop
  // at different times, so each shuffles only with its own lanes.
  const int lanes = groups.lanes();
  const unsigned group_mask =
      lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << ((threadIdx.x % 32) & ~static_cast<unsigned>(lanes - 1));
  for (int64_t i = groups.first_point; i < n; i += groups.point_stride) {
    const TrilinearCell<acc_t> cell(to_acc(points[3 * i]), to_acc(points[3 * i + 1]), to_acc(points[3 * i + 2]));
    const V* g_row = reinterpret_cast<const V*>(grad_out) + i * f_vecs;
    V* g_corners = reinterpret_cast<V*>(grad_feats) + i * 8 * f_vecs;
    const V* corners = reinterpret_cast<const V*>(feats) + i * 8 * f_vecs;
    acc_t grad_uvw[3] = {0, 0, 0};
    for (int64_t c = groups.lane; c < f_vecs; c += lanes) {
      const V g = g_row[c];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        V weighted;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          weighted.v[e] = from_acc<scalar_t>(cell.weight[k] * to_acc(g.v[e]));
        }
        g_corners[k * f_vecs + c] = weighted;
      }
      if constexpr (kPointsGrad) {
        V loaded[8];
        load_corners(corners, f_vecs, c, loaded);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          acc_t values[8];
          channel_values(loaded, e, values);
          cell.accumulate_uvw_grad(values, to_acc(g.v[e]), grad_uvw);
        }
      }
    }
    if constexpr (kPointsGrad) {
      for (int offset = lanes / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int axis = 0; axis < 3; ++axis) {
          grad_uvw[axis] += __shfl_xor_sync(group_mask, grad_uvw[axis], offset, lanes);
        }
      }
      // u = (x + 1) / 2, so d/dx = d/du / 2.
      if (groups.lane == 0) {
        for (int axis = 0; axis < 3; ++axis) grad_points[3 * i + axis] = from_acc<scalar_t>(grad_uvw[axis] / 2);
      }
    }
  }
}

// How one launch covers [N, F]: kVec channels per load when F and every row allow it, and a group
// of up to 32 lanes per point, no wider than the row.
struct LaunchShape {
  bool vectorized;
  int64_t f_vecs;
  int lanes_log2;
  int blocks;
};

template <typename scalar_t>
LaunchShape launch_shape(int64_t n, int64_t f, std::initializer_list<const void*> rows) {
  constexpr int vec = max_vec_size<scalar_t>();
  bool vectorized = f % vec == 0;
  for (const void* p : rows) vectorized = vectorized && is_aligned(p);
  const int64_t f_vecs = vectorized ? f / vec : f;
  int lanes_log2 = 0;
  while (lanes_log2 < 5 && (int64_t{1} << lanes_log2) < f_vecs) ++lanes_log2;
  return {vectorized, f_vecs, lanes_log2, grid_size(n << lanes_log2, kThreads)};
}

// Calls fn with std::integral_constant<int, kVec>: the 16-byte vector width, or 1.
template <typename scalar_t, typename Fn>
void with_vec_size(bool vectorized, Fn&& fn) {
  if (vectorized) {
    fn(std::integral_constant<int, max_vec_size<scalar_t>()>{});
  } else {
    fn(std::integral_constant<int, 1>{});
  }
}

}  // namespace

template <typename T>
void trilinear_interpolation_cuda(const T* feats_t, const T* points_t, T* out_t, int64_t n, int64_t f,
                                  CudaStream stream) {
  using scalar_t = CudaType<T>;
  if (n == 0 || f == 0) return;
  const scalar_t* feats = cuda_ptr(feats_t);
  scalar_t* out = cuda_ptr(out_t);
  const LaunchShape shape = launch_shape<scalar_t>(n, f, {feats, out});
  with_vec_size<scalar_t>(shape.vectorized, [&](auto vec) {
    trilinear_forward_kernel<scalar_t, decltype(vec)::value>
        <<<shape.blocks, kThreads, 0, stream>>>(feats, cuda_ptr(points_t), out, n, shape.f_vecs, shape.lanes_log2);
    JITOPS_CHECK_LAUNCH();
  });
}

template <typename T>
void trilinear_interpolation_backward_cuda(const T* grad_out_t, const T* feats_t, const T* points_t, T* grad_feats_t,
                                           T* grad_points_t, int64_t n, int64_t f, CudaStream stream) {
  using scalar_t = CudaType<T>;
  if (n == 0) return;
  const scalar_t* grad_out = cuda_ptr(grad_out_t);
  const scalar_t* feats = cuda_ptr(feats_t);
  const scalar_t* points = cuda_ptr(points_t);
  scalar_t* grad_feats = cuda_ptr(grad_feats_t);
  scalar_t* grad_points = cuda_ptr(grad_points_t);
  const LaunchShape shape = launch_shape<scalar_t>(n, f, {grad_out, feats, grad_feats});
  with_vec_size<scalar_t>(shape.vectorized, [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    if (grad_points != nullptr) {
      trilinear_backward_kernel<scalar_t, kVec, true><<<shape.blocks, kThreads, 0, stream>>>(
          grad_out, feats, points, grad_feats, grad_points, n, shape.f_vecs, shape.lanes_log2);
    } else {
      trilinear_backward_kernel<scalar_t, kVec, false><<<shape.blocks, kThreads, 0, stream>>>(
          grad_out, feats, points, grad_feats, grad_points, n, shape.f_vecs, shape.lanes_log2);
    }
    JITOPS_CHECK_LAUNCH();
  });
}

#define JITOPS_INSTANTIATE(T)                                                                                    \
  template void trilinear_interpolation_cuda<T>(const T*, const T*, T*, int64_t, int64_t, CudaStream);           \
  template void trilinear_interpolation_backward_cuda<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                                         CudaStream);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
