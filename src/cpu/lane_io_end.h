/*
 * lane_io_end.h — the end of a lane_io.h user: #undefs the SK_ macros lane_io.h defined, so the
 * next ISA copy (isa_each.h includes a kernel header once per ISA) defines them afresh. Not a
 * public header; no include guard.
 */
#undef SK_N
#undef SK_V
#undef SK_SET1
#undef SK_ZERO
#undef SK_MUL
#undef SK_ADD
#undef SK_SUB
