/*
 * test_adapter_file.c — tests of the adapter-file loader and the base-name mapping
 * (src/io/adapter_file.c; ALGORITHMS.md §3, §6).
 *
 *   - detection of every algorithm from its keys (kohya names and plain dotted module paths),
 *     the dimensions read from the tensors (rank, Tucker, DoRA, LoKr factors, OFT/BOFT blocks,
 *     IA3 on_input, O and I·K), alpha as [] or [1] of any dtype, missing alpha (s = 1), the
 *     scale, and the report of unused keys;
 *   - malformed modules (rank mismatch, half a Tucker pair) fail with LYCO_ERR_FORMAT naming the
 *     file, the module and the key;
 *   - mapping onto SD1.5 (LDM), SDXL (SGM + OpenCLIP fused q/k/v slice), diffusers and plain
 *     transformer base names; unmatched modules and shape disagreements are reported;
 *   - binding: a LoCon merged through the bound adapter equals W + m·(α/r)·U·D computed here in
 *     fp64 (fresh random data, seed printed); OFT gets constraint = alpha·O.
 * Synthetic files are written with lyco_st_write into a fresh temp dir (removed on success).
 * Prints one line per check and "N passed, M failed"; exits non-zero on failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "io/adapter_file.h"

static int g_pass, g_fail;
static char g_dir[256];
static lyco_rng g_rng;

static void check(bool ok, const char *fmt, ...) LYCO_PRINTF(2, 3);
static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf("  [last error: %s]", lyco_last_error());
    printf("\n");
    if (ok) g_pass++;
    else g_fail++;
}

static void *xcalloc(size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s);
    if (!p) { fprintf(stderr, "test: out of memory\n"); exit(1); }
    return p;
}

/* ---- a tiny builder of synthetic adapter files ---- */
#define MAXE 64
typedef struct {
    lyco_st_entry e[MAXE];
    int64_t shapes[MAXE][5];
    void *data[MAXE];
    int n;
} builder;

static void add(builder *b, const char *name, lyco_st_dtype dt, int ndim, const int64_t *shape) {
    lyco_st_entry *e = &b->e[b->n];
    int64_t cnt = 1;
    for (int i = 0; i < ndim; i++) { b->shapes[b->n][i] = shape[i]; cnt *= shape[i]; }
    size_t es = (size_t)lyco_st_dtype_bits(dt) / 8;
    b->data[b->n] = xcalloc((size_t)cnt, es);
    for (int64_t i = 0; i < cnt; i++) {
        float v = (float)(lyco_rng_uniform(&g_rng) * 2 - 1);
        if (dt == LYCO_ST_F32) memcpy((char *)b->data[b->n] + 4 * i, &v, 4);
        else if (dt == LYCO_ST_BF16) { uint16_t h = lyco_f32_to_bf16(v); memcpy((char *)b->data[b->n] + 2 * i, &h, 2); }
        else if (dt == LYCO_ST_F16) { uint16_t h = lyco_f32_to_f16(v); memcpy((char *)b->data[b->n] + 2 * i, &h, 2); }
    }
    *e = (lyco_st_entry){strdup(name), dt, ndim, b->shapes[b->n], b->data[b->n], (uint64_t)cnt * es};
    b->n++;
}
#define ADD(b, name, dt, ...) do { int64_t s_[] = {__VA_ARGS__}; add(b, name, dt, (int)(sizeof s_ / sizeof s_[0]), s_); } while (0)

static void add_scalar(builder *b, const char *name, lyco_st_dtype dt, double v, bool one_dim) {
    int64_t one = 1;
    add(b, name, dt, one_dim ? 1 : 0, &one);
    void *p = b->data[b->n - 1];
    if (dt == LYCO_ST_F32) { float f = (float)v; memcpy(p, &f, 4); }
    else if (dt == LYCO_ST_BF16) { uint16_t h = lyco_f32_to_bf16((float)v); memcpy(p, &h, 2); }
    else if (dt == LYCO_ST_I64) { int64_t x = (int64_t)v; memcpy(p, &x, 8); }
}

static void write_file(builder *b, const char *path) {
    if (lyco_st_write(path, b->e, b->n, NULL)) {
        fprintf(stderr, "test: cannot write %s: %s\n", path, lyco_last_error());
        exit(1);
    }
}

static void free_builder(builder *b) {
    for (int i = 0; i < b->n; i++) { free((void *)b->e[i].name); free(b->data[i]); }
    b->n = 0;
}

static const lyco_af_module *find_mod(const lyco_af_file *f, const char *name) {
    for (int64_t i = 0; i < lyco_af_count(f); i++)
        if (!strcmp(lyco_af_get(f, i)->name, name)) return lyco_af_get(f, i);
    return NULL;
}

/* ---- detection and dimensions ---- */
static void test_detection(void) {
    builder b = {0};
    /* LoCon linear 320→640 r 8, alpha 4 (bf16 0-dim) */
    ADD(&b, "lora_unet_a.lora_down.weight", LYCO_ST_F32, 8, 320);
    ADD(&b, "lora_unet_a.lora_up.weight", LYCO_ST_F32, 640, 8);
    add_scalar(&b, "lora_unet_a.alpha", LYCO_ST_BF16, 4.0, false);
    /* LoCon conv Tucker 3x3, DoRA out */
    ADD(&b, "lora_unet_c.lora_down.weight", LYCO_ST_F16, 4, 16, 1, 1);
    ADD(&b, "lora_unet_c.lora_mid.weight", LYCO_ST_F16, 4, 4, 3, 3);
    ADD(&b, "lora_unet_c.lora_up.weight", LYCO_ST_F16, 32, 4, 1, 1);
    ADD(&b, "lora_unet_c.dora_scale", LYCO_ST_F16, 32, 1, 1, 1);
    add_scalar(&b, "lora_unet_c.alpha", LYCO_ST_F32, 2.0, true);
    /* LoHa plain, no alpha */
    ADD(&b, "lora_te_h.hada_w1_a", LYCO_ST_BF16, 64, 6);
    ADD(&b, "lora_te_h.hada_w1_b", LYCO_ST_BF16, 6, 48);
    ADD(&b, "lora_te_h.hada_w2_a", LYCO_ST_BF16, 64, 6);
    ADD(&b, "lora_te_h.hada_w2_b", LYCO_ST_BF16, 6, 48);
    /* LoKr: w1 full 4x8, w2 decomposed 16x r2 x 6 */
    ADD(&b, "lycoris_k.lokr_w1", LYCO_ST_F32, 4, 8);
    ADD(&b, "lycoris_k.lokr_w2_a", LYCO_ST_F32, 16, 2);
    ADD(&b, "lycoris_k.lokr_w2_b", LYCO_ST_F32, 2, 6);
    add_scalar(&b, "lycoris_k.alpha", LYCO_ST_F32, 1.0, false);
    /* Diag-OFT 4 blocks of 8; BOFT 2 stages x 4 x 8 */
    ADD(&b, "lycoris_o.oft_blocks", LYCO_ST_F32, 4, 8, 8);
    add_scalar(&b, "lycoris_o.alpha", LYCO_ST_F32, 0.5, false);
    ADD(&b, "lycoris_bo.oft_blocks", LYCO_ST_F32, 2, 4, 8, 8);
    ADD(&b, "lycoris_bo.rescale", LYCO_ST_F32, 32, 1);
    /* IA3 on input (int64 flag) */
    ADD(&b, "lycoris_i.weight", LYCO_ST_F32, 24);
    add_scalar(&b, "lycoris_i.on_input", LYCO_ST_I64, 1, false);
    /* GLoRA */
    ADD(&b, "lycoris_g.a1.weight", LYCO_ST_F32, 20, 3);
    ADD(&b, "lycoris_g.a2.weight", LYCO_ST_F32, 3, 20);
    ADD(&b, "lycoris_g.b1.weight", LYCO_ST_F32, 10, 3);
    ADD(&b, "lycoris_g.b2.weight", LYCO_ST_F32, 3, 20);
    add_scalar(&b, "lycoris_g.alpha", LYCO_ST_I64, 6, false);
    /* Full with bias; Norm */
    ADD(&b, "lycoris_f.diff", LYCO_ST_F32, 12, 5);
    ADD(&b, "lycoris_f.diff_b", LYCO_ST_F32, 12);
    ADD(&b, "lycoris_n.w_norm", LYCO_ST_F32, 7);
    ADD(&b, "lycoris_n.b_norm", LYCO_ST_F32, 7);
    /* plain dotted module path, an unknown key, an ignored sparse-bias key */
    ADD(&b, "blocks.0.attn.qkv.lora_down.weight", LYCO_ST_F32, 2, 10);
    ADD(&b, "blocks.0.attn.qkv.lora_up.weight", LYCO_ST_F32, 30, 2);
    ADD(&b, "something.else", LYCO_ST_F32, 3);
    ADD(&b, "lora_unet_a.bias_indices", LYCO_ST_I16, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/det.safetensors", g_dir);
    write_file(&b, path);
    free_builder(&b);

    lyco_af_file *f = NULL;
    lyco_status st = lyco_af_open(path, &f);
    check(st == LYCO_OK && f, "open a synthetic file with every algorithm");
    if (!f) return;
    check(lyco_af_count(f) == 11, "11 modules found (got %lld)", (long long)lyco_af_count(f));
    const lyco_af_module *m = find_mod(f, "lora_unet_a");
    check(m && m->algo == LYCO_ALGO_LOCON && m->rank == 8 && m->out_dim == 640 && m->cols == 320 && m->alpha == 4.0 &&
              fabs(lyco_af_scale(m) - 0.5) < 1e-12 && m->params == 8 * 320 + 640 * 8,
          "locon linear: r 8, O 640, I·K 320, alpha 4 (bf16 0-dim), scale 0.5, params");
    m = find_mod(f, "lora_unet_c");
    check(m && m->algo == LYCO_ALGO_LOCON && m->tucker && m->dora && m->rank == 4 && m->out_dim == 32 && m->in_dim == 16 &&
              m->cols == 16 * 9 && m->kdims == 2 && m->kernel[0] == 3 && m->alpha == 2.0,
          "locon conv Tucker + DoRA: r 4, O 32, I 16, kernel 3x3, alpha [1]");
    m = find_mod(f, "lora_te_h");
    check(m && m->algo == LYCO_ALGO_LOHA && m->rank == 6 && m->rank2 == 6 && m->out_dim == 64 && m->cols == 48 &&
              isnan(m->alpha) && lyco_af_scale(m) == 1.0,
          "loha: r 6/6, O 64, I·K 48, no alpha → scale 1");
    m = find_mod(f, "lycoris_k");
    check(m && m->algo == LYCO_ALGO_LOKR && m->rank == 2 && m->lk_a == 4 && m->lk_c == 8 && m->lk_b == 16 && m->lk_dk == 6 &&
              m->out_dim == 64 && m->cols == 48 && fabs(lyco_af_scale(m) - 0.5) < 1e-12,
          "lokr: W1 4x8 full, W2 16x6 rank 2, O 64, I·K 48, scale α/r = 0.5");
    m = find_mod(f, "lycoris_o");
    check(m && m->algo == LYCO_ALGO_DIAG_OFT && m->nb == 4 && m->bs == 8 && m->out_dim == 32 && isnan(lyco_af_scale(m)),
          "diag-oft: 4 blocks of 8, O 32, no scale");
    m = find_mod(f, "lycoris_bo");
    check(m && m->algo == LYCO_ALGO_BOFT && m->stages == 2 && m->nb == 4 && m->bs == 8 && m->slot[LYCO_RESCALE],
          "boft: 2 stages x 4 blocks of 8, rescale");
    m = find_mod(f, "lycoris_i");
    check(m && m->algo == LYCO_ALGO_IA3 && m->ia3_on_input == 1 && m->in_dim == 24 && m->out_dim == -1,
          "ia3: on_input read (int64 1), D = I = 24");
    m = find_mod(f, "lycoris_g");
    check(m && m->algo == LYCO_ALGO_GLORA && m->rank == 3 && m->in_dim == 20 && m->out_dim == 10 && m->alpha == 6.0 &&
              fabs(lyco_af_scale(m) - 2.0) < 1e-12,
          "glora: r 3, I 20, O 10, alpha 6 (int64) → scale 2");
    m = find_mod(f, "lycoris_f");
    check(m && m->algo == LYCO_ALGO_FULL && m->out_dim == 12 && m->cols == 5 && m->slot[LYCO_DIFF_B], "full: diff 12x5 + diff_b");
    m = find_mod(f, "lycoris_n");
    check(m && m->algo == LYCO_ALGO_NORM && m->out_dim == 7 && m->slot[LYCO_B_NORM], "norm: C 7 + b_norm");
    m = find_mod(f, "blocks.0.attn.qkv");
    check(m && m->algo == LYCO_ALGO_LOCON && m->rank == 2 && m->out_dim == 30, "plain dotted module path split at the suffix");
    bool unk = false, ign = false;
    for (int64_t i = 0; i < lyco_af_unused_count(f); i++) {
        unk |= !strcmp(lyco_af_unused_key(f, i), "something.else");
        ign |= !strcmp(lyco_af_unused_key(f, i), "lora_unet_a.bias_indices");
    }
    check(unk && ign && lyco_af_unused_count(f) == 2, "unused keys reported: unknown suffix and ignored sparse bias (%lld)",
          (long long)lyco_af_unused_count(f));

    /* ---- mapping ---- */
    int64_t sh_a[2] = {640, 320}, sh_c[4] = {32, 16, 3, 3}, sh_h[2] = {64, 48}, sh_k[2] = {64, 48}, sh_o[2] = {32, 5},
            sh_bo[4] = {32, 3, 1, 1}, sh_i[2] = {9, 24}, sh_g[2] = {10, 20}, sh_f[2] = {12, 5}, sh_fb[1] = {12},
            sh_n[1] = {7}, sh_nb[1] = {7}, sh_q[2] = {30, 11};
    lyco_af_base_tensor base[] = {
        {"model.diffusion_model.a.weight", 2, sh_a},
        {"model.diffusion_model.c.weight", 4, sh_c},
        {"cond_stage_model.transformer.h.weight", 2, sh_h},
        {"k.weight", 2, sh_k},
        {"o.weight", 2, sh_o},
        {"bo.weight", 4, sh_bo},
        {"i.weight", 2, sh_i},
        {"g.weight", 2, sh_g},
        {"f.weight", 2, sh_f},
        {"f.bias", 1, sh_fb},
        {"n.weight", 1, sh_n},
        {"n.bias", 1, sh_nb},
        {"blocks.0.attn.qkv.weight", 2, sh_q},   /* wrong in-features: 11, adapter says 10 */
    };
    int64_t nb = (int64_t)(sizeof base / sizeof base[0]);
    lyco_af_target *t = xcalloc((size_t)lyco_af_count(f), sizeof *t);
    st = lyco_af_map(f, base, nb, t);
    check(st == LYCO_OK, "map onto a mixed base list");
    const char *want[][2] = {
        {"lora_unet_a", "model.diffusion_model.a.weight"}, {"lora_unet_c", "model.diffusion_model.c.weight"},
        {"lora_te_h", "cond_stage_model.transformer.h.weight"}, {"lycoris_k", "k.weight"}, {"lycoris_o", "o.weight"},
        {"lycoris_bo", "bo.weight"}, {"lycoris_i", "i.weight"}, {"lycoris_g", "g.weight"}, {"lycoris_f", "f.weight"},
        {"lycoris_n", "n.weight"},
    };
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int64_t i;
        for (i = 0; i < lyco_af_count(f) && strcmp(lyco_af_get(f, i)->name, want[w][0]); i++) {}
        bool ok = i < lyco_af_count(f) && t[i].problem == LYCO_AF_MAPPED && t[i].weight >= 0 && !strcmp(base[t[i].weight].name, want[w][1]);
        check(ok, "%s → %s%s%s", want[w][0], want[w][1], ok ? "" : "  got: ", ok ? "" : (i < lyco_af_count(f) ? t[i].why : "module missing"));
        if (ok && !strcmp(want[w][0], "lycoris_f"))
            check(t[i].bias >= 0 && !strcmp(base[t[i].bias].name, "f.bias"), "full diff_b → f.bias");
    }
    for (int64_t i = 0; i < lyco_af_count(f); i++)
        if (!strcmp(lyco_af_get(f, i)->name, "blocks.0.attn.qkv"))
            check(t[i].problem == LYCO_AF_SHAPE_MISMATCH && strstr(t[i].why, "blocks.0.attn.qkv.weight"),
                  "a base whose shape disagrees is reported (%s)", t[i].why);
    /* unmatched: map against an empty base */
    lyco_af_map(f, base, 0, t);
    check(t[0].problem == LYCO_AF_UNMATCHED, "no base tensors: every module unmatched");

    /* ---- binding: OFT constraint = alpha·O; LoCon numeric ---- */
    lyco_af_bound bd;
    m = find_mod(f, "lycoris_o");
    st = lyco_af_bind(m, 2, sh_o, 1.0, 0, false, &bd);
    check(st == LYCO_OK && fabs(bd.a.constraint - 0.5 * 32) < 1e-12, "diag-oft bind: constraint = alpha·O = 16");
    if (!st) lyco_af_unbind(&bd);
    m = find_mod(f, "lycoris_i");
    st = lyco_af_bind(m, 2, sh_i, 1.0, 0, false, &bd);
    check(st == LYCO_OK && bd.a.ia3_on_input == 1, "ia3 bind: on_input carried");
    if (!st) lyco_af_unbind(&bd);
    int64_t wrong[2] = {640, 321};
    m = find_mod(f, "lora_unet_a");
    st = lyco_af_bind(m, 2, wrong, 1.0, 0, false, &bd);
    check(st == LYCO_ERR_SHAPE && strstr(lyco_last_error(), "lora_unet_a"), "bind onto a wrong shape fails naming the module");
    st = lyco_af_bind(m, 2, sh_a, 0.75, 0, false, &bd);
    check(st == LYCO_OK, "locon bind");
    if (!st) {
        float *W = xcalloc(640 * 320, 4), *out = xcalloc(640 * 320, 4);
        for (int i = 0; i < 640 * 320; i++) W[i] = (float)(lyco_rng_uniform(&g_rng) - 0.5);
        DLTensor tw = lyco_host_tensor(W, LYCO_F32, 2, sh_a), to = lyco_host_tensor(out, LYCO_F32, 2, sh_a);
        lyco_ctx *ctx = NULL;
        lyco_merge_args ma = {&tw, NULL, LYCO_MERGE_WEIGHT};
        st = lyco_ctx_create(&ctx);
        if (!st) st = lyco_ctx_set_backend(ctx, LYCO_BACKEND_CPU);
        if (!st) st = lyco_merge_fwd(ctx, &to, NULL, &bd.a, &ma);
        const float *D = bd.view[LYCO_LORA_DOWN].data, *U = bd.view[LYCO_LORA_UP].data;
        double maxerr = 0;
        for (int o = 0; o < 640 && !st; o++)
            for (int i = 0; i < 320; i++) {
                double acc = 0;
                for (int r = 0; r < 8; r++) acc += (double)U[o * 8 + r] * D[r * 320 + i];
                double ref = W[o * 320 + i] + 0.75 * 0.5 * acc, e = fabs(out[o * 320 + i] - ref) / lyco_ulp(1.0, LYCO_F32);
                if (e > maxerr) maxerr = e;
            }
        check(st == LYCO_OK && maxerr < 64, "locon merged through the bound adapter = W + m·(α/r)·U·D (max err %.1f ulp(1))", maxerr);
        lyco_ctx_destroy(ctx);
        free(W);
        free(out);
        lyco_af_unbind(&bd);
    }
    free(t);
    lyco_af_close(f);
}

/* ---- SD / SDXL / diffusers / transformer name mapping ---- */
static void test_sd_names(void) {
    builder b = {0};
    static const char *mods[] = {
        "lora_unet_down_blocks_0_attentions_1_transformer_blocks_0_attn1_to_q",   /* → input_blocks_2_1_… */
        "lora_unet_down_blocks_1_resnets_0_conv1",                                /* → input_blocks_4_0_in_layers_2 */
        "lora_unet_mid_block_resnets_1_time_emb_proj",                            /* → middle_block_2_emb_layers_1 */
        "lora_unet_up_blocks_0_upsamplers_0_conv",                                /* SD1.5: output_blocks_2_1_conv */
        "lora_unet_up_blocks_1_attentions_2_proj_out",                            /* → output_blocks_5_1_proj_out */
        "lora_unet_down_blocks_2_downsamplers_0_conv",                            /* → input_blocks_9_0_op */
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj",                  /* SDXL te1 */
        "lora_te2_text_model_encoder_layers_3_self_attn_v_proj",                  /* SDXL te2: in_proj rows 2D..3D */
        "lora_te2_text_model_encoder_layers_3_mlp_fc1",                           /* SDXL te2: mlp.c_fc */
        "lora_unet_time_embedding_linear_2",                                      /* time_embed_2 */
    };
    const int nm = (int)(sizeof mods / sizeof mods[0]);
    char name[256];
    for (int i = 0; i < nm; i++) {
        snprintf(name, sizeof name, "%s.lora_down.weight", mods[i]);
        ADD(&b, name, LYCO_ST_F32, 2, 8);
        snprintf(name, sizeof name, "%s.lora_up.weight", mods[i]);
        ADD(&b, name, LYCO_ST_F32, 8, 2);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/sd.safetensors", g_dir);
    write_file(&b, path);
    free_builder(&b);
    int64_t s88[2] = {8, 8}, s248[2] = {24, 8};
    lyco_af_base_tensor base[] = {
        {"model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn1.to_q.weight", 2, s88},
        {"model.diffusion_model.input_blocks.4.0.in_layers.2.weight", 2, s88},
        {"model.diffusion_model.middle_block.2.emb_layers.1.weight", 2, s88},
        {"model.diffusion_model.output_blocks.2.1.conv.weight", 2, s88},
        {"model.diffusion_model.output_blocks.5.1.proj_out.weight", 2, s88},
        {"model.diffusion_model.input_blocks.9.0.op.weight", 2, s88},
        {"conditioner.embedders.0.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight", 2, s88},
        {"conditioner.embedders.1.model.transformer.resblocks.3.attn.in_proj_weight", 2, s248},
        {"conditioner.embedders.1.model.transformer.resblocks.3.mlp.c_fc.weight", 2, s88},
        {"model.diffusion_model.time_embed.2.weight", 2, s88},
    };
    lyco_af_file *f = NULL;
    if (lyco_af_open(path, &f)) { check(false, "open SD-name file"); return; }
    lyco_af_target t[16];
    check(lyco_af_map(f, base, nm, t) == LYCO_OK, "map SD names");
    for (int i = 0; i < nm; i++) {
        const lyco_af_module *m = lyco_af_get(f, i);
        int want = -1;
        for (int j = 0; j < nm; j++)
            if (!strcmp(m->name, mods[j])) want = j;
        bool ok = t[i].problem == LYCO_AF_MAPPED && t[i].weight == want;
        check(ok, "%s → %s%s%s", m->name, want >= 0 ? base[want].name : "?", ok ? "" : "  got: ", ok ? "" : t[i].why);
        if (ok && strstr(m->name, "v_proj"))
            check(t[i].row0 == 16 && t[i].rows == 8, "te2 v_proj → in_proj rows 16..23");
    }
    /* the same adapter against diffusers-layout names */
    lyco_af_base_tensor dif[] = {{"down_blocks.0.attentions.1.transformer_blocks.0.attn1.to_q.weight", 2, s88}};
    check(lyco_af_map(f, dif, 1, t) == LYCO_OK, "map against a diffusers UNet");
    int hits = 0;
    for (int i = 0; i < nm; i++) hits += t[i].problem == LYCO_AF_MAPPED;
    check(hits == 1, "diffusers UNet: the one module present maps, the rest are unmatched (%d mapped)", hits);
    lyco_af_close(f);
}

/* ---- malformed modules ---- */
static void test_malformed(void) {
    builder b = {0};
    ADD(&b, "lora_unet_x.lora_down.weight", LYCO_ST_F32, 4, 16);
    ADD(&b, "lora_unet_x.lora_up.weight", LYCO_ST_F32, 8, 5);
    char path[512];
    snprintf(path, sizeof path, "%s/bad1.safetensors", g_dir);
    write_file(&b, path);
    free_builder(&b);
    lyco_af_file *f = NULL;
    lyco_status st = lyco_af_open(path, &f);
    check(st == LYCO_ERR_FORMAT && !f && strstr(lyco_last_error(), "lora_unet_x") && strstr(lyco_last_error(), "lora_up") &&
              strstr(lyco_last_error(), "bad1.safetensors"),
          "locon rank mismatch: LYCO_ERR_FORMAT naming file, module and key");
    ADD(&b, "lora_unet_y.hada_w1_a", LYCO_ST_F32, 8, 2);
    ADD(&b, "lora_unet_y.hada_w1_b", LYCO_ST_F32, 2, 4);
    ADD(&b, "lora_unet_y.hada_w2_a", LYCO_ST_F32, 8, 2);
    ADD(&b, "lora_unet_y.hada_w2_b", LYCO_ST_F32, 2, 4);
    ADD(&b, "lora_unet_y.hada_t1", LYCO_ST_F32, 2, 2, 3, 3);
    snprintf(path, sizeof path, "%s/bad2.safetensors", g_dir);
    write_file(&b, path);
    free_builder(&b);
    st = lyco_af_open(path, &f);
    check(st == LYCO_ERR_FORMAT && strstr(lyco_last_error(), "hada_t2"), "loha with hada_t1 but no hada_t2 is refused");
    ADD(&b, "lora_unet_z.lora_down.weight", LYCO_ST_F32, 4, 16);
    ADD(&b, "lora_unet_z.lora_up.weight", LYCO_ST_F32, 8, 4);
    ADD(&b, "lora_unet_z.alpha", LYCO_ST_F32, 2);
    snprintf(path, sizeof path, "%s/bad3.safetensors", g_dir);
    write_file(&b, path);
    free_builder(&b);
    st = lyco_af_open(path, &f);
    check(st == LYCO_ERR_FORMAT && strstr(lyco_last_error(), "alpha"), "alpha with 2 elements is refused");
    snprintf(path, sizeof path, "%s/missing.safetensors", g_dir);
    st = lyco_af_open(path, &f);
    check(st == LYCO_ERR_IO, "a missing file is an I/O error");
}

int main(void) {
    uint64_t seed = lyco_seed_from_env();
    printf("seed %llu (LYCO_SEED reproduces)\n", (unsigned long long)seed);
    lyco_rng_seed(&g_rng, seed);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/lyco-af-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    test_detection();
    test_sd_names();
    test_malformed();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    if (!g_fail) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "test: could not remove %s\n", g_dir);
    } else printf("files kept in %s\n", g_dir);
    return g_fail ? 1 : 0;
}
