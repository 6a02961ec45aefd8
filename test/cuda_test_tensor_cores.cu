// The tensor-core instructions of cuda/tensor_cores.cuh that the attention kernels use, alone, against
// plain loops: mma.sync m16n8k16 (bf16 in, fp32 accumulate) on fragments that each lane gathers
// by the PTX ISA's documented layout; ldmatrix .x1, .x2, .x4, with and without .trans, from rows
// scattered through shared memory; and the two together as the kernels combine them (an A tile
// and a B tile stored either way, read by ldmatrix). Natively this pins the emulation
// (test/simt/tensor_cores.cpp) to the hardware; emulated, it also checks that misuse is refused:
// a lane that does not take part, lanes that disagree, rows not 16-byte aligned or outside
// shared memory, a block that is not whole warps, and a shape other than .x1, .x2, .x4.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "cuda/tensor_cores.cuh"

namespace {

// Small multiples of 1/8 are exact in bf16, and their products and sums exact in fp32, so the
// expected values are exact whatever order the hardware adds in.
float exact_value(int i, int seed) { return (float)((i * 7 + seed * 5) % 17 - 8) / 8.0f; }

// Two bf16 of a row-major matrix with leading dimension ld, (row, col) and (row, col + 1) or
// (row + 1, col) when `down`, packed as a fragment register: the first in the low half.
__device__ uint32_t pair_of(const __nv_bfloat16* m, int ld, int row, int col, bool down) {
    const __nv_bfloat16 low = m[row * ld + col], high = down ? m[(row + 1) * ld + col] : m[row * ld + col + 1];
    uint16_t lo, hi;
    memcpy(&lo, &low, 2);
    memcpy(&hi, &high, 2);
    return (uint32_t)hi << 16 | lo;
}

// ---- mma alone ------------------------------------------------------------------------------

// Warp w: d_w = a_w·b_w·2 + c_w (the product accumulated twice onto c), A 16×16, B 16×8 (k×n)
// and C, D 16×8, all row major and `set` elements apart per warp; each lane gathers its
// fragments by the documented layout (g = lane / 4, t = lane % 4) and scatters d the same way.
__global__ void mma_kernel(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, int set) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    a += warp * set, b += warp * set, c += warp * set, d += warp * set;
    const uint32_t fa[4] = {pair_of(a, 16, g, 2 * t, false), pair_of(a, 16, g + 8, 2 * t, false),
                            pair_of(a, 16, g, 2 * t + 8, false), pair_of(a, 16, g + 8, 2 * t + 8, false)};
    const uint32_t fb[2] = {pair_of(b, 8, 2 * t, g, true), pair_of(b, 8, 2 * t + 8, g, true)};
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    mma_m16n8k16_bf16(acc, fa, fb);
    mma_m16n8k16_bf16(acc, fa, fb);
    d[g * 8 + 2 * t] = acc[0], d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2], d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

TEST(TensorCores, MmaOnDocumentedFragments) {
    REQUIRE_CUDA_DEVICE();
    const int set = 256, warps = 2;
    std::vector<__nv_bfloat16> a(set * warps), b(set * warps);
    std::vector<float> c(set * warps), want(set * warps, -1.0f);
    for (int i = 0; i < set * warps; i++) {
        a[i] = __float2bfloat16(exact_value(i, 1));
        b[i] = __float2bfloat16(exact_value(i, 2));
        c[i] = exact_value(i, 3);
    }
    for (int w = 0; w < warps; w++)
        for (int row = 0; row < 16; row++)
            for (int n = 0; n < 8; n++) {
                double sum = 0;
                for (int k = 0; k < 16; k++)
                    sum += (double)__bfloat162float(a[w * set + row * 16 + k]) * __bfloat162float(b[w * set + k * 8 + n]);
                want[w * set + row * 8 + n] = (float)(2 * sum + c[w * set + row * 8 + n]);
            }
    __nv_bfloat16 *d_a = to_device(a), *d_b = to_device(b);
    float *d_c = to_device(c), *d_d = to_device(std::vector<float>(set * warps, -1.0f));
    mma_kernel<<<1, 32 * warps>>>(d_d, d_a, d_b, d_c, set);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = to_host(d_d, set * warps);
    for (int i = 0; i < set * warps; i++) ASSERT_EQ(got[i], want[i]) << "element " << i;  // untouched ones stay -1
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_d);
}

// ---- ldmatrix alone -------------------------------------------------------------------------

constexpr int kRowStride = 24;  // elements (48 bytes) between the row slots in shared memory

// Matrix i's row r (8 elements, value 64i + 8r + column) sits in row slot (8i + r)·5 mod 32 of
// shared memory, so no two rows are neighbours; lane l addresses row l % 8 of matrix l / 8
// (lanes past 8N give an address too, which ldmatrix ignores). out[lane·4 + i] = r[i].
template <int N, bool TRANS>
__global__ void ldmatrix_kernel(uint32_t* out, const __nv_bfloat16* matrices) {
    __shared__ __align__(16) __nv_bfloat16 slots[32 * kRowStride];
    const int lane = threadIdx.x;
    for (int e = lane; e < 32 * 8; e += 32) {
        const int row = e / 8, slot = row * 5 % 32;
        slots[slot * kRowStride + e % 8] = matrices[e];
    }
    __syncwarp();
    const int my_row = lane % (8 * N);
    uint32_t r[N];
    if (TRANS) ldmatrix_trans<N>(r, slots + (my_row * 5 % 32) * kRowStride);
    else ldmatrix<N>(r, slots + (my_row * 5 % 32) * kRowStride);
    for (int i = 0; i < N; i++) out[lane * 4 + i] = r[i];
}

// The bf16 whose bits are `bits`, as a float.
float half_value(uint32_t bits) {
    __nv_bfloat16_raw raw;
    raw.x = (unsigned short)bits;
    return __bfloat162float(__nv_bfloat16(raw));
}

template <int N, bool TRANS>
void check_ldmatrix() {
    std::vector<__nv_bfloat16> matrices(32 * 8);
    for (int e = 0; e < 32 * 8; e++) matrices[e] = __float2bfloat16((float)e);  // integers to 255: exact
    __nv_bfloat16* d_matrices = to_device(matrices);
    uint32_t* d_out = to_device(std::vector<uint32_t>(32 * 4, 0xdeadbeef));
    ldmatrix_kernel<N, TRANS><<<1, 32>>>(d_out, d_matrices);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint32_t> got = to_host(d_out, 32 * 4);
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const uint32_t reg = got[lane * 4 + i];
            if (i >= N) {
                ASSERT_EQ(reg, 0xdeadbeefu) << "lane " << lane << " register " << i;
                continue;
            }
            const int g = lane / 4, t = lane % 4;
            // (row, column) of the low and high halves in matrix i.
            const int low_row = TRANS ? 2 * t : g, low_col = TRANS ? g : 2 * t;
            const int high_row = TRANS ? 2 * t + 1 : g, high_col = TRANS ? g : 2 * t + 1;
            ASSERT_EQ(half_value(reg & 0xffff), (float)(64 * i + 8 * low_row + low_col)) << "lane " << lane << " matrix " << i;
            ASSERT_EQ(half_value(reg >> 16), (float)(64 * i + 8 * high_row + high_col)) << "lane " << lane << " matrix " << i;
        }
    cudaFree(d_matrices), cudaFree(d_out);
}

TEST(TensorCores, LdmatrixX1) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<1, false>();
}
TEST(TensorCores, LdmatrixX2) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<2, false>();
}
TEST(TensorCores, LdmatrixX4) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<4, false>();
}
TEST(TensorCores, LdmatrixX1Trans) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<1, true>();
}
TEST(TensorCores, LdmatrixX2Trans) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<2, true>();
}
TEST(TensorCores, LdmatrixX4Trans) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix<4, true>();
}

// ---- the two together, as the attention kernels use them -----------------------------------

constexpr int kLd = 24;  // shared leading dimension (elements) of the tiles: 48-byte rows

// d (16×8) = a·b with A (16×16) and B (16×8) in shared memory, read by ldmatrix: A row major
// through ldmatrix<4>; B either stored as its transpose (8 rows of 16 k: `b_by_columns`, read by
// ldmatrix<2>) or row major (16 rows of 8 n: read by ldmatrix_trans<2>).
__global__ void ldmatrix_mma_kernel(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, bool b_by_columns) {
    __shared__ __align__(16) __nv_bfloat16 a_tile[16 * kLd];
    __shared__ __align__(16) __nv_bfloat16 b_tile[16 * kLd];
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (int e = lane; e < 256; e += 32) a_tile[e / 16 * kLd + e % 16] = a[e];
    for (int e = lane; e < 128; e += 32) {
        const int k = e / 8, n = e % 8;  // b is k×n row major in global memory
        if (b_by_columns) b_tile[n * kLd + k] = b[e];
        else b_tile[k * kLd + n] = b[e];
    }
    __syncwarp();
    uint32_t fa[4], fb[2];
    ldmatrix<4>(fa, a_tile + (lane % 16) * kLd + 8 * (lane / 16));
    const int l = lane % 16;  // lanes 16-31 repeat the addresses of 0-15 (ignored by .x2)
    if (b_by_columns) ldmatrix<2>(fb, b_tile + (l % 8) * kLd + 8 * (l / 8));
    else ldmatrix_trans<2>(fb, b_tile + l * kLd);
    float acc[4] = {0, 0, 0, 0};
    mma_m16n8k16_bf16(acc, fa, fb);
    d[g * 8 + 2 * t] = acc[0], d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2], d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

void check_ldmatrix_mma(bool b_by_columns) {
    std::vector<__nv_bfloat16> a(256), b(128);
    for (int i = 0; i < 256; i++) a[i] = __float2bfloat16(exact_value(i, 4));
    for (int i = 0; i < 128; i++) b[i] = __float2bfloat16(exact_value(i, 5));
    std::vector<float> want(128);
    for (int row = 0; row < 16; row++)
        for (int n = 0; n < 8; n++) {
            double sum = 0;
            for (int k = 0; k < 16; k++) sum += (double)__bfloat162float(a[row * 16 + k]) * __bfloat162float(b[k * 8 + n]);
            want[row * 8 + n] = (float)sum;
        }
    __nv_bfloat16 *d_a = to_device(a), *d_b = to_device(b);
    float* d_d = to_device(std::vector<float>(128, -1.0f));
    ldmatrix_mma_kernel<<<1, 32>>>(d_d, d_a, d_b, b_by_columns);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = to_host(d_d, 128);
    for (int i = 0; i < 128; i++) ASSERT_EQ(got[i], want[i]) << "element " << i;
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_d);
}

TEST(TensorCores, LdmatrixFeedsMmaWithBStoredByColumns) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix_mma(true);
}
TEST(TensorCores, LdmatrixTransFeedsMmaWithBStoredByRows) {
    REQUIRE_CUDA_DEVICE();
    check_ldmatrix_mma(false);
}

#ifdef SIMT_EMULATION
// ---- misuse, refused by the emulation ----------------------------------------------------------

// `how` picks the misuse; every kernel runs with one warp unless said otherwise.
__global__ void misuse_kernel(int how, const __nv_bfloat16* global) {
    __shared__ __align__(16) __nv_bfloat16 tile[16 * kLd];
    const int lane = threadIdx.x % 32;
    for (int e = lane; e < 16 * kLd; e += 32) tile[e] = __float2bfloat16(0.0f);
    __syncwarp();
    uint32_t r[4] = {0, 0, 0, 0}, b[2] = {0, 0}, one[1] = {0};
    float acc[4] = {0, 0, 0, 0};
    switch (how) {
        case 0:  // lane 3 leaves before the mma
            if (lane == 3) return;
            mma_m16n8k16_bf16(acc, r, b);
            break;
        case 1:  // the upper half warp loads .x2 while the lower loads .x4
            if (lane < 16) ldmatrix<4>(r, tile + (lane % 16) * kLd);
            else ldmatrix<2>(b, tile + (lane % 16) * kLd);
            break;
        case 2:  // lane 5's row starts 2 bytes past a 16-byte boundary
            ldmatrix<4>(r, tile + (lane % 16) * kLd + (lane == 5 ? 1 : 0));
            break;
        case 3:  // rows in global memory
            ldmatrix<1>(one, global + lane * 8);
            break;
        case 4:  // half the warp calls ldmatrix, the other half the mma
            if (lane < 16) ldmatrix<4>(r, tile + (lane % 16) * kLd);
            else mma_m16n8k16_bf16(acc, r, b);
            break;
        case 5:  // a shape ldmatrix does not have (the templates refuse it at compile time)
            simt::ldmatrix(r, 3, false, tile + (lane % 16) * kLd);
            break;
        default:  // well formed: .x4 over 16 rows, then an mma (the misaligned lane of case 2 is
                  // past .x1's 8 lanes, so .x1 accepts it)
            ldmatrix<4>(r, tile + (lane % 16) * kLd);
            ldmatrix<1>(one, tile + (lane % 16) * kLd + (lane >= 8 ? 1 : 0));
            mma_m16n8k16_bf16(acc, r, b);
    }
}

std::string kernel_error_of(int how, int threads, const __nv_bfloat16* global) {
    try {
        misuse_kernel<<<1, threads>>>(how, global);
    } catch (const simt::KernelError& error) {
        return error.what();
    }
    return "";
}

class TensorCoresCatch : public ::testing::Test {
protected:
    __nv_bfloat16* global = nullptr;
    void SetUp() override { global = to_device(std::vector<__nv_bfloat16>(32 * 8, __float2bfloat16(1.0f))); }
    void TearDown() override { cudaFree(global); }
    void expect_refused(int how, int threads, const char* reason) {
        const std::string message = kernel_error_of(how, threads, global);
        EXPECT_NE(message.find(reason), std::string::npos) << "case " << how << ": " << message;
    }
};

TEST_F(TensorCoresCatch, WellFormedUseRuns) { EXPECT_EQ(kernel_error_of(6, 32, global), ""); }
TEST_F(TensorCoresCatch, LaneThatLeaves) { expect_refused(0, 32, "exited"); }
TEST_F(TensorCoresCatch, LanesWithOtherQualifiers) { expect_refused(1, 32, "waits at ldmatrix"); }
TEST_F(TensorCoresCatch, MisalignedRow) { expect_refused(2, 32, "lane 5's row address is not 16-byte aligned"); }
TEST_F(TensorCoresCatch, RowOutsideSharedMemory) { expect_refused(3, 32, "not in shared memory"); }
TEST_F(TensorCoresCatch, LanesInDifferentInstructions) { expect_refused(4, 32, "instead"); }
TEST_F(TensorCoresCatch, ShapeNotX1X2X4) { expect_refused(5, 32, ".x3 is not a shape"); }
TEST_F(TensorCoresCatch, PartialWarp) { expect_refused(6, 16, "beyond the end of the block"); }
#endif  // SIMT_EMULATION

}  // namespace
