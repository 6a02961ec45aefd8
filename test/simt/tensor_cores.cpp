// The warp-level tensor-core instructions of cuda/tensor_cores.cuh for the SIMT emulation, from the
// PTX ISA: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16, with the fragment layouts the ISA
// documents (and kernels may rely on). Each lane puts its operands into its warp's staging
// area and joins the warp operation; the last lane to arrive computes every lane's result
// (warp_matrix_operation, scheduler.cpp), which each lane then takes back. Results are kept
// apart from operands, so a lane that runs ahead into the next instruction cannot overwrite
// what a slower lane has yet to read.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "counting.h"
#include "internal.h"
#include "simt.h"

namespace simt {
namespace {

constexpr int kLanes = 32;
constexpr int kMaxWarps = 1024 / kLanes;  // blocks run one at a time: one area per warp of a block

unsigned lane_of_running_thread() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % kLanes;
}

// A bf16 held in the low (half 0) or high (half 1) 16 bits of a register, as a float.
float bf16_half(std::uint32_t reg, int half) {
  const std::uint32_t bits = (half == 0 ? reg & 0xffffu : reg >> 16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ----------------------------------------

struct MmaStaging {
  std::uint32_t a[kLanes][4], b[kLanes][2];
  float c[kLanes][4], d[kLanes][4];
};
MmaStaging mma_staging[kMaxWarps];

// Element (row, k) of the 16×16 A and (k, n) of the 16×8 B, from the lanes' fragments
// (g = lane / 4, t = lane % 4): A's register j of lane (g, t) holds row g + 8·(j % 2), columns
// 2t + 8·(j / 2) and one more; B's register j holds rows 2t + 8·j and one more of column g.
float a_element(const MmaStaging& s, int row, int k) {
  const int lane = (row % 8) * 4 + (k % 8) / 2, reg = row / 8 + 2 * (k / 8);
  return bf16_half(s.a[lane][reg], k % 2);
}
float b_element(const MmaStaging& s, int k, int n) {
  const int lane = n * 4 + (k % 8) / 2, reg = k / 8;
  return bf16_half(s.b[lane][reg], k % 2);
}

// d = a·b + c for the whole warp: element i of lane (g, t) is row g + 8·(i / 2), column
// 2t + i % 2; the 16 products summed in fp32 in order of k, then c added.
void complete_mma(unsigned warp) {
  MmaStaging& s = mma_staging[warp];
  for (int lane = 0; lane < kLanes; lane++)
    for (int i = 0; i < 4; i++) {
      const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
      float sum = 0.0f;
      for (int k = 0; k < 16; k++) sum += a_element(s, row, k) * b_element(s, k, col);
      s.d[lane][i] = sum + s.c[lane][i];
    }
}

// ---- ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 ---------------------------------------

struct LdmatrixStaging {
  const unsigned char* row[kLanes];
  int count;
  bool transpose;
  std::uint32_t r[kLanes][4];
};
LdmatrixStaging ldmatrix_staging[kMaxWarps];

std::uint16_t element(const unsigned char* row, int column) {
  std::uint16_t bits;
  std::memcpy(&bits, row + 2 * column, sizeof bits);
  return bits;
}

// Register i of lane (g, t) = elements (g, 2t) and (g, 2t + 1) of matrix i, whose row r lane
// 8i + r addresses; transposed, elements (2t, g) and (2t + 1, g). The first is the low half.
void complete_ldmatrix(unsigned warp) {
  LdmatrixStaging& s = ldmatrix_staging[warp];
  note_ldmatrix(s.row, s.count);
  for (int lane = 0; lane < kLanes; lane++)
    for (int i = 0; i < s.count; i++) {
      const int g = lane / 4, t = lane % 4;
      const unsigned char* const* rows = s.row + 8 * i;
      const std::uint16_t low = s.transpose ? element(rows[2 * t], g) : element(rows[g], 2 * t);
      const std::uint16_t high = s.transpose ? element(rows[2 * t + 1], g) : element(rows[g], 2 * t + 1);
      s.r[lane][i] = (std::uint32_t)high << 16 | low;
    }
}

std::string lane_text(unsigned lane) { return "lane " + std::to_string(lane); }

}  // namespace

void mma_m16n8k16_bf16(float* d, const std::uint32_t* a, const std::uint32_t* b) {
  const unsigned warp = warp_of_running_thread(), lane = lane_of_running_thread();
  MmaStaging& s = mma_staging[warp];
  std::memcpy(s.a[lane], a, sizeof s.a[lane]);
  std::memcpy(s.b[lane], b, sizeof s.b[lane]);
  std::memcpy(s.c[lane], d, sizeof s.c[lane]);
  warp_matrix_operation(WarpOp::kMma, 0, complete_mma);
  std::memcpy(d, s.d[lane], sizeof s.d[lane]);
}

void ldmatrix(std::uint32_t* r, int count, bool transpose, const void* row) {
  if (count != 1 && count != 2 && count != 4)
    throw std::logic_error("ldmatrix: .x" + std::to_string(count) + " is not a shape (.x1, .x2 or .x4)");
  const unsigned warp = warp_of_running_thread(), lane = lane_of_running_thread();
  // Lanes 8·count and up give no address; the rows of the others must be 16 bytes in shared memory.
  if (lane < 8u * count) {
    if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0)
      throw std::logic_error("ldmatrix: " + lane_text(lane) + "'s row address is not 16-byte aligned");
    if (!is_shared_range(row, 16))
      throw std::logic_error("ldmatrix: " + lane_text(lane) + "'s row of 16 bytes is not in shared memory");
  }
  LdmatrixStaging& s = ldmatrix_staging[warp];
  s.row[lane] = static_cast<const unsigned char*>(row);
  s.count = count, s.transpose = transpose;
  warp_matrix_operation(WarpOp::kLdmatrix, 2 * count + (transpose ? 1 : 0), complete_ldmatrix);
  std::memcpy(r, s.r[lane], count * sizeof(std::uint32_t));
}

}  // namespace simt
