// The WMMA warp matrix operations (nvcuda::wmma, 16×16×16, bf16 inputs, fp32 accumulators) that
// the attention kernels use, alone, against plain loops: load_matrix_sync of row- and
// column-major tiles with leading dimensions wider than the tile, mma_sync accumulating onto a
// loaded accumulator, an element-wise operation over the fragment, fill_fragment, and
// store_matrix_sync in both layouts. Natively this pins the emulation (test/simt/wmma.h) to what
// the tensor cores do; emulated, it also checks that misuse is refused.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_test_util.h"

namespace {

namespace wmma = nvcuda::wmma;
constexpr int kTile = 16;

// Two warps, each on its own set of matrices (`set_stride` elements apart), so that the warps'
// exchanges cannot mix: d = scale·(a·b + c), with a and b loaded in layouts LA and LB, c loaded
// and d stored row or column major.
template <class LA, class LB>
__global__ void mma_kernel(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, int lda,
                           int ldb, int ldc, int ldd, bool c_row, bool d_row, float scale, int set_stride) {
    const int set = threadIdx.x / 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a + set * set_stride, lda);
    wmma::load_matrix_sync(fb, b + set * set_stride, ldb);
    wmma::load_matrix_sync(acc, c + set * set_stride, ldc, c_row ? wmma::mem_row_major : wmma::mem_col_major);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= scale;
    wmma::store_matrix_sync(d + set * set_stride, acc, ldd, d_row ? wmma::mem_row_major : wmma::mem_col_major);
}

// d (16×16, row major, leading dimension 16) = value everywhere, through fill_fragment.
__global__ void fill_kernel(float* d, float value) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, value);
    wmma::store_matrix_sync(d, acc, kTile, wmma::mem_row_major);
}

// Offset of element (row, col) of a matrix stored row or column major with leading dimension ld.
size_t at(int row, int col, bool row_major, int ld) { return row_major ? (size_t)row * ld + col : (size_t)col * ld + row; }

// Small multiples of 1/8 are exact in bf16 and their products and sums exact in fp32, so the
// expected values below are exact whatever order the hardware adds in.
float exact_value(int i, int seed) { return (float)((i * 7 + seed * 5) % 17 - 8) / 8.0f; }

// One mma_kernel run with the given layouts against Σ_k a[r][k]·b[k][c] + c[r][c], scaled.
template <class LA, class LB>
void check_mma(bool c_row, bool d_row) {
    constexpr bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    const int lda = 24, ldb = 40, ldc = 20, ldd = 28;  // every one wider than the tile
    const int set_stride = kTile * 48, sets = 2;
    const float scale = 0.5f;
    const size_t n = (size_t)set_stride * sets;
    std::vector<__nv_bfloat16> a(n), b(n);
    std::vector<float> c(n), want(n, -1.0f);
    for (size_t i = 0; i < n; i++) {
        a[i] = __float2bfloat16(exact_value((int)i, 1));
        b[i] = __float2bfloat16(exact_value((int)i, 2));
        c[i] = exact_value((int)i, 3);
    }
    for (int s = 0; s < sets; s++)
        for (int r = 0; r < kTile; r++)
            for (int col = 0; col < kTile; col++) {
                double sum = c[s * set_stride + at(r, col, c_row, ldc)];
                for (int k = 0; k < kTile; k++)
                    sum += (double)__bfloat162float(a[s * set_stride + at(r, k, a_row, lda)]) *
                           __bfloat162float(b[s * set_stride + at(k, col, b_row, ldb)]);
                want[s * set_stride + at(r, col, d_row, ldd)] = (float)(scale * sum);
            }
    __nv_bfloat16 *d_a = to_device(a), *d_b = to_device(b);
    float *d_c = to_device(c), *d_d = to_device(std::vector<float>(n, -1.0f));
    mma_kernel<LA, LB><<<1, 32 * sets>>>(d_d, d_a, d_b, d_c, lda, ldb, ldc, ldd, c_row, d_row, scale, set_stride);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = to_host(d_d, n);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]) << "element " << i;  // untouched ones stay -1
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_d);
}

TEST(Wmma, RowMajorTimesRowMajor) {
    REQUIRE_CUDA_DEVICE();
    check_mma<wmma::row_major, wmma::row_major>(true, true);
}
TEST(Wmma, RowMajorTimesColMajor) {
    REQUIRE_CUDA_DEVICE();
    check_mma<wmma::row_major, wmma::col_major>(true, false);
}
TEST(Wmma, ColMajorTimesRowMajor) {
    REQUIRE_CUDA_DEVICE();
    check_mma<wmma::col_major, wmma::row_major>(false, true);
}
TEST(Wmma, ColMajorTimesColMajor) {
    REQUIRE_CUDA_DEVICE();
    check_mma<wmma::col_major, wmma::col_major>(false, false);
}

TEST(Wmma, FillFragment) {
    REQUIRE_CUDA_DEVICE();
    float* d = to_device(std::vector<float>(kTile * kTile, 0.0f));
    fill_kernel<<<1, 32>>>(d, 2.5f);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (float v : to_host(d, kTile * kTile)) ASSERT_EQ(v, 2.5f);
    cudaFree(d);
}

#ifdef SIMT_EMULATION
// Half of the warp skips the load: a collective operation that not all lanes reach.
__global__ void half_warp_load_kernel(const __nv_bfloat16* a) {
    if (threadIdx.x >= 16) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a, kTile);
}

// A tile loaded from a pointer that is not 32-byte aligned.
__global__ void misaligned_load_kernel(const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + 1, kTile);
}

std::string kernel_error_of(void (*kernel)(const __nv_bfloat16*), const __nv_bfloat16* a) {
    try {
        kernel<<<1, 32>>>(a);
    } catch (const simt::KernelError& error) {
        return error.what();
    }
    return "";
}

TEST(WmmaCatches, LoadNotReachedByAllLanes) {
    __nv_bfloat16* a = to_device(std::vector<__nv_bfloat16>(2 * kTile * kTile, __float2bfloat16(1.0f)));
    EXPECT_NE(kernel_error_of(half_warp_load_kernel, a), "");
    cudaFree(a);
}

TEST(WmmaCatches, MisalignedPointer) {
    __nv_bfloat16* a = to_device(std::vector<__nv_bfloat16>(2 * kTile * kTile, __float2bfloat16(1.0f)));
    const std::string message = kernel_error_of(misaligned_load_kernel, a);
    EXPECT_NE(message.find("aligned"), std::string::npos) << message;
    cudaFree(a);
}
#endif  // SIMT_EMULATION

}  // namespace
