/*
 * isa_each.h — isa.h's per-ISA copies of a kernel header, written once. Not a public header; no
 * include guard (it is included once per kernel header). Set before including it:
 *   ISA_EACH_HEADER  the kernel header, a string ("stream_kern.h")
 *   ISA_EACH_V4 1    also an x86-64-v4 copy (KN(name) = name##_v4, CK_V4 defined) where CPU_V4
 *   ISA_EACH_BASE 1  also the portable copy (KN(name) = name##_base)
 * and always an x86-64-v3 copy (KN(name) = name##_v3, CK_V3 defined) where CPU_V3. It undefines
 * its parameters at the end. Kernel headers that need more per-ISA macros than KN and the CK_V*
 * flags (dense.c's gemm_kern.h, loha.c's loha_kern.h, lokr.c's lokr_kern.h: vector widths and
 * types) keep their own blocks.
 */
#if defined(ISA_EACH_V4) && defined(CPU_V4)
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define KN(name) name##_v4
#define CK_V4 1
#include ISA_EACH_HEADER
#undef CK_V4
#undef KN
#pragma GCC pop_options
#endif
#ifdef CPU_V3
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define KN(name) name##_v3
#define CK_V3 1
#include ISA_EACH_HEADER
#undef CK_V3
#undef KN
#pragma GCC pop_options
#endif
#ifdef ISA_EACH_BASE
#define KN(name) name##_base
#include ISA_EACH_HEADER
#undef KN
#endif
#undef ISA_EACH_HEADER
#undef ISA_EACH_V4
#undef ISA_EACH_BASE
