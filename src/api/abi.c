/*
 * abi.c — lyco_abi_layout: the size and field offsets of every public struct, as this build of
 * the library laid them out, so a binding that mirrors the structs by hand (python/lyco's ctypes
 * mirror) can check its copy against the real thing before it passes one across the ABI.
 */
#include <stddef.h>
#include <string.h>

#include "lyco.h"

#define SZ(T) {#T, (int64_t)sizeof(T)}
#define OF(T, f) {#T "." #f, (int64_t)offsetof(T, f)}

static const struct { const char *name; int64_t value; } layout[] = {
    SZ(DLDevice), OF(DLDevice, device_type), OF(DLDevice, device_id),
    SZ(DLDataType), OF(DLDataType, code), OF(DLDataType, bits), OF(DLDataType, lanes),
    SZ(DLTensor), OF(DLTensor, data), OF(DLTensor, device), OF(DLTensor, ndim), OF(DLTensor, dtype),
    OF(DLTensor, shape), OF(DLTensor, strides), OF(DLTensor, byte_offset),
    SZ(lyco_path), OF(lyco_path, kind), OF(lyco_path, backend), OF(lyco_path, why), OF(lyco_path, fallbacks),
    SZ(lyco_layer), OF(lyco_layer, kind), OF(lyco_layer, out_features), OF(lyco_layer, in_features),
    OF(lyco_layer, conv_dims), OF(lyco_layer, kernel), OF(lyco_layer, stride), OF(lyco_layer, padding),
    OF(lyco_layer, dilation), OF(lyco_layer, groups), OF(lyco_layer, norm_kind),
    OF(lyco_layer, norm_groups), OF(lyco_layer, norm_eps),
    SZ(lyco_adapter), OF(lyco_adapter, algo), OF(lyco_adapter, layer), OF(lyco_adapter, tensor),
    OF(lyco_adapter, alpha), OF(lyco_adapter, scale), OF(lyco_adapter, multiplier),
    OF(lyco_adapter, constraint), OF(lyco_adapter, wd_on_out), OF(lyco_adapter, ia3_on_input),
    OF(lyco_adapter, dylora_block_size), OF(lyco_adapter, dylora_active_blocks), OF(lyco_adapter, flags),
    SZ(lyco_grads), OF(lyco_grads, grad),
    SZ(lyco_merge_args), OF(lyco_merge_args, weight), OF(lyco_merge_args, bias), OF(lyco_merge_args, mode),
    SZ(lyco_bypass_args), OF(lyco_bypass_args, x), OF(lyco_bypass_args, y0), OF(lyco_bypass_args, weight),
    OF(lyco_bypass_args, flags),
    SZ(lyco_dtypes), OF(lyco_dtypes, compute), OF(lyco_dtypes, output),
    {"LYCO_SLOT_COUNT", LYCO_SLOT_COUNT}, {"LYCO_ALGO_COUNT", LYCO_ALGO_COUNT},
    {"LYCO_STATUS_COUNT", LYCO_STATUS_COUNT}, {"enum", (int64_t)sizeof(lyco_algo)},
};

int64_t lyco_abi_layout(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++)
        if (!strcmp(name, layout[i].name)) return layout[i].value;
    return -1;
}

const char *lyco_abi_layout_name(int index) {
    if (index < 0 || (size_t)index >= sizeof layout / sizeof layout[0]) return NULL;
    return layout[index].name;
}
