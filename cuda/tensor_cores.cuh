// cuda/tensor_cores.cuh — the two warp-level tensor-core instructions the attention kernels use, as
// device functions over their PTX (PTX ISA, "Warp-level matrix instructions"):
//
//   mma_m16n8k16_bf16(d, a, b)   d (16×8, fp32) += a (16×16, bf16) · b (16×8, bf16):
//                                mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
//   ldmatrix<N>(r, row)          N = 1, 2 or 4 matrices of 8×8 bf16 from shared memory into
//   ldmatrix_trans<N>(r, row)    this lane's fragments: ldmatrix.sync.aligned.m8n8.xN[.trans]
//
// Every lane of the warp calls each of them (.sync.aligned). The element each lane holds is
// fixed by the PTX ISA, and the kernels rely on it. With g = lane / 4, t = lane % 4, a register
// holds two bf16, the lower column (or row) in its low half:
//
//   a[0..3]   rows g, g+8, g, g+8; columns 2t, 2t+1 (a[0], a[1]) or 2t+8, 2t+9 (a[2], a[3])
//   b[0..1]   rows (k) 2t, 2t+1 (b[0]) or 2t+8, 2t+9 (b[1]); column (n) g
//   d[0..3]   rows g, g, g+8, g+8; columns 2t, 2t+1, 2t, 2t+1
//   ldmatrix  r[i] = row g, columns 2t, 2t+1 of matrix i, whose 8 rows (16 bytes each, 16-byte
//             aligned, in shared memory) lanes 8i … 8i+7 address; with .trans, rows 2t, 2t+1 of
//             column g instead (the matrix transposed on the way)
//
// So the d of two neighbouring 16×8 products, rounded to bf16 pairs, is the a of a product over
// their 16 columns, and a row-major 16×16 tile read by ldmatrix<4> (lanes 0-15 addressing rows
// 0-15 at column 0, lanes 16-31 rows 0-15 at column 8) is an a fragment.
//
// On the CPU (the SIMT emulation, docs/simt.md) test/simt/tensor_cores.cuh stands in for this
// file, with the same functions implemented from these semantics.
#pragma once
#include <cstdint>

// d += a·b, one warp-wide 16×8×16 product (fragments as above), fp32 accumulation.
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// r[i] = this lane's fragment of the 8×8 matrix i (i < N) whose rows lanes 8i … 8i+7 point to.
template <int N>
__device__ inline void ldmatrix(uint32_t (&r)[N], const void* row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices (.x1, .x2, .x4)");
    const uint32_t at = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(at) : "memory");
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(at)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at)
                     : "memory");
}

// The same with .trans: each matrix transposed as it is loaded.
template <int N>
__device__ inline void ldmatrix_trans(uint32_t (&r)[N], const void* row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices (.x1, .x2, .x4)");
    const uint32_t at = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(at) : "memory");
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(at)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at)
                     : "memory");
}
