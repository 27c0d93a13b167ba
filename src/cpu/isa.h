/*
 * isa.h — the runtime ISA dispatch of the fused CPU backend's kernel files (dense.c + gemm_kern.h,
 * view.c + cvt_kern.h, stream.c + stream_kern.h, loha.c, …). Not a public header.
 *
 * The pattern (one, shared): the kernels are written once in a header with names through KN(name)
 * and included twice by their .c file — once between
 *     #pragma GCC push_options
 *     #pragma GCC target("arch=x86-64-v3")       (AVX2 + FMA + F16C + BMI)
 *     #define KN(name) name##_v3  …  #pragma GCC pop_options
 * and once plainly with KN(name) name##_base (portable x86-64 / any target) — and a small wrapper
 * calls the _v3 copy when cpu_have_v3() says the CPU has it. dense.c's GEMM kernels and
 * stream.c's merge rows have a third copy, _v4 under target("arch=x86-64-v4") with 16-lane vectors,
 * taken when cpu_isa() ≥ 2 (the streaming merge converts and rounds every element: at memory speed
 * on one core it was bound by its vector instructions, half of them with 16 lanes); the other
 * kernel files run their v3 copy on AVX-512 machines. LYCO_CPU_ISA=base|v3|v4 caps the level
 * (tests run the lower copies with it).
 *
 * isa_each.h writes those blocks once for kernel headers that need only KN and the CK_V4 / CK_V3
 * flags (view.c's cvt_kern.h, stream.c's stream_kern.h, lokr.c's lokr_bwd_kern.h).
 *
 * Why not CPU_HOT (cpu.h: GCC target_clones): GCC 12 compiles the GCC vector types and intrinsics
 * of always_inline helpers inlined into a target_clones / target("…") function as 128-bit halves
 * (broadcasts as vbroadcastss xmm + vinsertf128, insert chains, spills); under the target pragma
 * the helpers themselves are compiled for the ISA and the code is clean 256-bit AVX2
 * (docs/bench-cpu.md, "GEMM rewrite").
 *
 * CPU_V3 / CPU_V4 are defined where those copies exist (GCC on x86-64; clang and other targets
 * build only the portable copy).
 */
#ifndef LYCO_CPU_ISA_H
#define LYCO_CPU_ISA_H

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_V3 1
#define CPU_V4 1 /* dense.c's GEMM kernels and stream.c's rows also have an x86-64-v4 (AVX-512) copy */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instruction-set level the kernels run: 0 portable, 1 x86-64-v3 (AVX2 + FMA + F16C),
   2 x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) — the CPU's, or lower when LYCO_CPU_ISA says so ("base",
   "v3", "v4": for tests and A/B timing; a level the CPU lacks is never taken). Asked once per
   translation unit, then a relaxed atomic load (the conversions call this per run: on a 1-value
   run the cpuid query showed). */
static inline int cpu_isa(void) {
    static int known; /* 0 unknown, else level + 1 */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k == 0) {
        __builtin_cpu_init();
        int hw = __builtin_cpu_supports("x86-64-v4") ? 2 : __builtin_cpu_supports("x86-64-v3") ? 1 : 0, want = hw;
        const char *e = getenv("LYCO_CPU_ISA");
        if (e && *e) {
            want = !strcmp(e, "base") ? 0 : !strcmp(e, "v3") ? 1 : !strcmp(e, "v4") ? 2 : -1;
            if (want < 0) {
                static int warned;
                if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                    fprintf(stderr, "lyco: LYCO_CPU_ISA=\"%s\" ignored (expected base, v3 or v4)\n", e);
                want = hw;
            }
        }
        k = (want < hw ? want : hw) + 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k - 1;
}
/* Whether the x86-64-v3 copies run (AVX-512 machines run them too where no v4 copy exists). */
static inline bool cpu_have_v3(void) { return cpu_isa() >= 1; }
#endif

/* Call the copy of a kernel with _v4, _v3 and _base copies (isa_each.h) that this CPU runs, as a
   statement: CPU_DISPATCH(kernel, args...); */
#if defined(CPU_V4)
#define CPU_DISPATCH(name, ...) \
    (cpu_isa() >= 2 ? name##_v4(__VA_ARGS__) : cpu_have_v3() ? name##_v3(__VA_ARGS__) : name##_base(__VA_ARGS__))
#else
#define CPU_DISPATCH(name, ...) name##_base(__VA_ARGS__)
#endif

#endif
