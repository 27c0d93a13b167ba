/*
 * adapter_file.h — the adapter-file loader (ALGORITHMS.md §3) and the mapping of adapter modules
 * onto a base checkpoint's tensors.
 *
 * Loader: lyco_af_open() opens a LyCORIS/kohya safetensors file with the strict reader, splits
 * every key into <module>.<param> (kohya names have no dot in the module part; plain dotted module
 * paths are split at the longest known parameter suffix), groups the keys per module, detects
 * each module's algorithm from its keys in upstream's order (LoCon → LoHa → IA3 → LoKr → Full →
 * Norm → Diag-OFT → BOFT → GLoRA) and reads every dimension from the tensors themselves: rank,
 * Tucker, DoRA, LoKr factors, OFT blocks, the O, I·K (and I and kernel where the tensors carry
 * them) the base weight must have. Metadata is never consulted. `alpha` may be 0-dim or [1] of
 * any numeric dtype; missing means α = r. IA3's `on_input` is read. Keys whose parameter suffix
 * is unknown, or that the detected algorithm does not use, are listed (never silently dropped).
 * DyLoRA files carry LoCon keys and load as LoCon (§2.8).
 *
 * Mapping: lyco_af_map() maps each module to a base tensor name: the kohya prefixes lora_unet_,
 * lora_te_, lora_te1_/lora_te2_ and LyCORIS's lycoris_, and plain module paths, against
 * diffusers-layout, LDM/SGM-layout (SD1.5 / SDXL single-file: model.diffusion_model.,
 * cond_stage_model.transformer., conditioner.embedders.N.…) and plain transformer checkpoints.
 * kohya UNet names in diffusers layout are renamed to the SGM layout when the base has it
 * (ALGORITHMS.md §6 table), and SDXL's OpenCLIP text encoder (lora_te2_…q_proj/k_proj/v_proj →
 * a row slice of …attn.in_proj_weight). Each module gets a target (weight, optional bias, row
 * slice) or a problem: matched nothing, or the base tensor's shape disagrees with the adapter's.
 *
 * Binding: lyco_af_bind() builds the lyco_adapter for one target: layer geometry from the base
 * tensor's shape (2-D linear, 3–5-D conv with groups 1, 1-D norm), tensor views (copied only when
 * misaligned), alpha, OFT/BOFT constraint = alpha·O, IA3 on_input, and runs the library's shape
 * rules (so everything a merge would refuse is refused here, before any output is written).
 *
 * Errors: LYCO_ERR_FORMAT (a malformed adapter: module, key and rule named), LYCO_ERR_SHAPE
 * (binding: the base disagrees), LYCO_ERR_DTYPE (adapter tensors must be F16/BF16/F32), plus the
 * reader's. Nothing here prints.
 */
#ifndef LYCO_IO_ADAPTER_FILE_H
#define LYCO_IO_ADAPTER_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "lyco.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One module of an adapter file. Pointers stay valid until lyco_af_close. */
typedef struct {
    const char *name;                          /* the module name as in the file (lora_name) */
    lyco_algo algo;                            /* LYCO_ALGO_NONE: no detection key present */
    const lyco_st_tensor *slot[LYCO_SLOT_COUNT]; /* file tensor of each slot (NULL unused) */
    const lyco_st_tensor *alpha_key;           /* NULL when absent */
    const lyco_st_tensor *on_input_key;        /* IA3 */
    double alpha;                              /* the file's alpha; NaN when absent */
    int ia3_on_input;                          /* IA3: on_input ≠ 0 */
    bool tucker, dora;
    int64_t rank, rank2;                       /* LoCon/GLoRA/LoKr r; LoHa r of w1 and w2; 0 none */
    int64_t out_dim;                           /* O (C for Norm); -1 unknown (never after open) */
    int64_t in_dim;                            /* I; -1 when the tensors do not say */
    int64_t cols;                              /* I·K; -1 when the tensors do not say */
    int32_t kdims;                             /* kernel dims carried by the tensors; -1 unknown */
    int64_t kernel[3];
    int64_t lk_a, lk_b, lk_c, lk_dk;           /* LoKr: W1 a×c, W2 b×(d·K) */
    int64_t nb, bs, stages;                    /* Diag-OFT nb×bs×bs; BOFT stages×nb×bs×bs */
    int64_t params;                            /* elements of the module's tensors (alpha and
                                                  on_input excluded) */
    uint32_t dtype_mask;                       /* bit lyco_st_dtype of every tensor used */
} lyco_af_module;

typedef struct lyco_af_file lyco_af_file;

lyco_status lyco_af_open(const char *path, lyco_af_file **out);
void lyco_af_close(lyco_af_file *f);                      /* NULL: no-op */
const lyco_st_file *lyco_af_st(const lyco_af_file *f);    /* the underlying safetensors file */
int64_t lyco_af_count(const lyco_af_file *f);             /* modules, in first-key order */
const lyco_af_module *lyco_af_get(const lyco_af_file *f, int64_t i);
/* Keys no module uses, with the reason ("unknown parameter suffix", "not used by loha", …). */
int64_t lyco_af_unused_count(const lyco_af_file *f);
const char *lyco_af_unused_key(const lyco_af_file *f, int64_t i);
const char *lyco_af_unused_why(const lyco_af_file *f, int64_t i);

/* The scale s a loader gives the module (ALGORITHMS.md §1.2 "Loading": α/r, α = r when absent;
   LoKr with both halves full: 1; DyLoRA files load as LoCon), NaN for algorithms without one. */
double lyco_af_scale(const lyco_af_module *m);

/* ---- mapping onto a base checkpoint ---- */
typedef struct {
    const char *name;
    int32_t ndim;
    const int64_t *shape;
} lyco_af_base_tensor;

typedef enum {
    LYCO_AF_MAPPED = 0,
    LYCO_AF_UNMATCHED = 1,      /* no base tensor has this module's name */
    LYCO_AF_SHAPE_MISMATCH = 2, /* found, but its shape disagrees with the adapter's tensors */
    LYCO_AF_NOT_MERGEABLE = 3   /* no algorithm detected for the module */
} lyco_af_problem;

typedef struct {
    int64_t module;             /* index into the adapter file */
    int64_t weight;             /* index into the base list (-1 when not mapped) */
    int64_t bias;               /* the base bias the module also changes (Full diff_b, Norm
                                   b_norm); -1 none */
    int64_t row0, rows;         /* rows = 0: the whole weight; else rows row0..row0+rows-1 */
    lyco_af_problem problem;
    char why[256];
} lyco_af_target;

/* Fills out[i] for module i (out has lyco_af_count(f) entries). Never fails for unmatched
   modules (their problem says so); fails only on allocation or NULL arguments. */
lyco_status lyco_af_map(const lyco_af_file *f, const lyco_af_base_tensor *base, int64_t nbase,
                        lyco_af_target *out);

/* ---- binding one module to one base tensor ---- */
typedef struct {
    lyco_adapter a;
    DLTensor view[LYCO_SLOT_COUNT];
    void *owned[LYCO_SLOT_COUNT];
    int64_t shape[2];           /* storage for lyco_af_bind_bias's O×1 view */
} lyco_af_bound;

/* Builds b->a for module m merged into a base tensor of shape (ndim, shape) — for a row slice,
   pass the slice's shape — with multiplier `mult` and LYCO_FLAG_* `flags`, and checks it with the
   library's shape rules. widen_f32: every adapter tensor is handed over as an exact fp32 copy
   (the merge tool does this, as upstream's merge script does, so that any base dtype can take
   any adapter dtype and the merge runs in fp32). On failure nothing stays allocated. */
lyco_status lyco_af_bind(const lyco_af_module *m, int32_t ndim, const int64_t *shape, double mult,
                         uint32_t flags, bool widen_f32, lyco_af_bound *b);
void lyco_af_unbind(lyco_af_bound *b);

/* The module's bias change as an adapter of its own: a Full adapter over a linear O×1 "weight"
   whose diff is the module's diff_b (Full) or b_norm (Norm), so that lyco_merge_fwd on the base
   bias viewed as O×1 gives b + m·diff_b (or its unmerge). Tensors widened to fp32 as by bind. */
lyco_status lyco_af_bind_bias(const lyco_af_module *m, double mult, uint32_t flags, lyco_af_bound *b);

/* The layer a base tensor of this shape is: 2-D linear, 3–5-D conv (groups 1, unit stride),
   1-D norm (LayerNorm over C). */
lyco_status lyco_af_layer(int32_t ndim, const int64_t *shape, lyco_layer *out);

#ifdef __cplusplus
}
#endif
#endif /* LYCO_IO_ADAPTER_FILE_H */
