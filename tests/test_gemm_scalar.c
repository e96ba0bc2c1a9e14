/* tests/test_gemm_scalar.c - the GEMM tests again on the portable scalar
   micro-kernel (MHE_NO_SIMD), which builds without intrinsics elsewhere. */
#define MHE_NO_SIMD
#include "test_gemm.c"
