// The warp matrix operations of CUDA's WMMA API (nvcuda::wmma, <mma.h>) for the SIMT emulation,
// implemented from their documented matrix-level semantics, for the 16×16×16 shape:
//
//   load_matrix_sync(frag, p, ldm[, layout])   the warp loads one 16×16 tile from p, rows (row
//                                               major) or columns (column major) ldm elements apart
//   store_matrix_sync(p, acc, ldm, layout)     the warp stores an accumulator tile the same way
//   fill_fragment(frag, v)                     every element of the tile becomes v
//   mma_sync(d, a, b, c)                       d = a·b + c: products of the inputs summed in fp32
//
// A fragment holds num_elements values per lane; which tile element each one is stays
// unspecified in CUDA, so kernels may only apply the same operation to every x[i]. The emulation
// deals the 256 elements of a tile out round robin (lane l holds elements l, l + 32, ... in row
// major order), which is not the hardware's layout: a kernel that relies on the hardware's
// layout computes different results here. Every operation is collective: it waits for all 32
// lanes of the warp (a lane that does not call it is an error, as for shuffles), and mma_sync
// passes the tiles between the lanes through a per-warp staging area. The documented
// requirements are checked: full warps, a 256-bit aligned pointer, ldm a multiple of 16 bytes.
// Included by simt.h; the toolkit's <mma.h> declares nothing outside nvcc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

constexpr int kTile = 16;                      // the one shape emulated: m = n = k = 16
constexpr int kTileElements = kTile * kTile;
constexpr int kLanes = 32;

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == kTile && N == kTile && K == kTile, "the SIMT emulation has the 16x16x16 WMMA shape only");
  static constexpr int num_elements = kTileElements / kLanes;
  using element_type = T;
  T x[num_elements];
};

namespace detail {

// Row-major index (row·16 + col) of element i of this lane's fragment.
inline int tile_index(int lane, int i) { return i * kLanes + lane; }

inline int lane_id() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return (int)(linear % kLanes);
}
inline int warp_id() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return (int)(linear / kLanes);
}

// Waits for every lane of the warp; a block whose size is not a multiple of 32 has a partial
// warp, which WMMA does not allow.
inline void warp_barrier(const char* what) {
  if (blockDim.x * blockDim.y * blockDim.z % kLanes != 0)
    throw std::logic_error(std::string(what) + ": WMMA needs whole warps (block size a multiple of 32)");
  __syncwarp(0xffffffffu);
}

template <class T>
void check_memory(const char* what, const T* p, unsigned ldm) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0)
    throw std::logic_error(std::string(what) + ": the pointer must be 256-bit (32-byte) aligned");
  if (ldm * sizeof(T) % 16 != 0)
    throw std::logic_error(std::string(what) + ": ldm must be a multiple of 16 bytes");
}

// Offset in memory of tile element (row, col) for the given layout and leading dimension.
inline std::size_t offset(int row, int col, bool row_major_layout, unsigned ldm) {
  return row_major_layout ? (std::size_t)row * ldm + col : (std::size_t)col * ldm + row;
}

template <class T>
void load(T* x, int n, const T* p, unsigned ldm, bool row_major_layout) {
  check_memory("wmma::load_matrix_sync", p, ldm);
  warp_barrier("wmma::load_matrix_sync");
  const int lane = lane_id();
  for (int i = 0; i < n; i++) {
    const int e = tile_index(lane, i);
    x[i] = p[offset(e / kTile, e % kTile, row_major_layout, ldm)];
  }
  warp_barrier("wmma::load_matrix_sync");
}

// The tiles of one warp's mma_sync while its lanes exchange them.
struct Staging {
  float a[kTileElements], b[kTileElements], c[kTileElements];
};
constexpr int kMaxWarps = 1024 / kLanes;
inline Staging staging[kMaxWarps];  // blocks run one at a time, so one per warp of a block

}  // namespace detail

template <class T, class Layout>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout>& a, const T* p, unsigned ldm) {
  detail::load(a.x, a.num_elements, p, ldm, std::is_same<Layout, row_major>::value);
}
template <class T, class Layout>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout>& b, const T* p, unsigned ldm) {
  detail::load(b.x, b.num_elements, p, ldm, std::is_same<Layout, row_major>::value);
}
template <class T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& c, const T* p, unsigned ldm, layout_t layout) {
  detail::load(c.x, c.num_elements, p, ldm, layout == mem_row_major);
}

template <class T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& c, unsigned ldm, layout_t layout) {
  detail::check_memory("wmma::store_matrix_sync", p, ldm);
  detail::warp_barrier("wmma::store_matrix_sync");
  const int lane = detail::lane_id();
  for (int i = 0; i < c.num_elements; i++) {
    const int e = detail::tile_index(lane, i);
    p[detail::offset(e / kTile, e % kTile, layout == mem_row_major, ldm)] = c.x[i];
  }
  detail::warp_barrier("wmma::store_matrix_sync");
}

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const T& value) {
  for (T& v : f.x) v = value;
}

// d = a·b + c. Each lane puts its elements of a, b and c into the warp's staging area, every
// lane then computes its elements of d from the whole tiles (Σ_k a[r][k]·b[k][col] in fp32, in
// k order, then + c), and the warp waits once more before the area can be reused.
template <class TA, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TA, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  detail::warp_barrier("wmma::mma_sync");
  detail::Staging& s = detail::staging[detail::warp_id()];
  const int lane = detail::lane_id();
  for (int i = 0; i < d.num_elements; i++) {
    const int e = detail::tile_index(lane, i);
    s.a[e] = (float)a.x[i];
    s.b[e] = (float)b.x[i];
    s.c[e] = c.x[i];
  }
  detail::warp_barrier("wmma::mma_sync");
  for (int i = 0; i < d.num_elements; i++) {
    const int e = detail::tile_index(lane, i), row = e / kTile, col = e % kTile;
    float sum = 0.0f;
    for (int k = 0; k < kTile; k++) sum += s.a[row * kTile + k] * s.b[k * kTile + col];
    d.x[i] = sum + s.c[e];
  }
  detail::warp_barrier("wmma::mma_sync");
}

}  // namespace wmma
}  // namespace nvcuda
