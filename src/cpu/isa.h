/*
 * isa.h — the runtime ISA dispatch of the fused CPU backend's kernel files (dense.c + gemm_kern.h,
 * view.c + cvt_kern.h, loha.c). Not a public header.
 *
 * The pattern (one, shared): the kernels are written once in a header with names through KN(name)
 * and included twice by their .c file — once between
 *     #pragma GCC push_options
 *     #pragma GCC target("arch=x86-64-v3")       (AVX2 + FMA + F16C + BMI)
 *     #define KN(name) name##_v3  …  #pragma GCC pop_options
 * and once plainly with KN(name) name##_base (portable x86-64 / any target) — and a small wrapper
 * calls the _v3 copy when cpu_have_v3() says the CPU has it (AVX-512 machines run the v3 code too).
 *
 * Why not CPU_HOT (cpu.h: GCC target_clones): GCC 12 compiles the GCC vector types and intrinsics
 * of always_inline helpers inlined into a target_clones / target("…") function as 128-bit halves
 * (broadcasts as vbroadcastss xmm + vinsertf128, insert chains, spills); under the target pragma
 * the helpers themselves are compiled for the ISA and the code is clean 256-bit AVX2
 * (docs/bench-cpu.md, "GEMM rewrite").
 *
 * CPU_V3 is defined where the v3 copy exists (GCC on x86-64; clang and other targets build only
 * the portable copy).
 */
#ifndef LYCO_CPU_ISA_H
#define LYCO_CPU_ISA_H

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_V3 1
#include <immintrin.h>

/* Whether this CPU runs x86-64-v3 code; asked once per translation unit, then a relaxed atomic
   load (the conversions call this per run: on a 1-value run the cpuid query showed). */
static inline bool cpu_have_v3(void) {
    static int known; /* 0 unknown, 1 no, 2 yes */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k == 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("x86-64-v3") ? 2 : 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}
#endif

#endif
