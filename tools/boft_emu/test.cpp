/*
 * test.cpp — drives bg_fwd / bg_bwd (host emulation, tools/boft_emu) on random data and compares
 * with a direct model of the stage-per-launch kernels (k_bs_stage order, ALGORITHMS.md §2.5 via
 * k_boft_tab's index formula): forward Y and backward GX bitwise, ∂L/∂R (m = 1) and the ρ-gradient
 * against double sums (relative 1e-5). Args: b nb M ncol dtype ct layout delta rho [sms [want_dB]].
 */
#include "cuda/boft_group.cuh"
#include <random>
extern float *g_Nm; extern std::vector<float> g_GR; extern std::vector<double> g_grho;
static std::mt19937 rng(1);
static float urand(float s) { return std::uniform_real_distribution<float>(-s, s)(rng); }
static long tabf(long i, long p, long b) { long h = (1L << i) * (b / 2), ch = p / (2 * h), r = p % (2 * h); return ch * 2 * h + (r % 2) * h + r / 2; }
struct Buf { std::vector<char> d; int dt; };
static void fill(Buf &B, size_t n, int dt, float s) {
    B.dt = dt; B.d.assign(n * dt_size(dt), 0);
    for (size_t i = 0; i < n; i++) { float v = urand(s); if (i % 97 == 5) v = -0.0f; if (i % 89 == 3) v = 0.0f; st_elem(B.d.data() + i * dt_size(dt), dt, false, v); }
}
static lk_rows mkrows(Buf &B, i64 O, i64 ncol, bool rowfast) {
    lk_rows r; memset(&r, 0, sizeof r); r.p = B.d.data(); r.dt = B.dt; r.SP = 1;
    if (rowfast == 2) { r.SP = 5; r.sc = 5; r.sn = O * 5; r.sp = 1; }   /* conv-like (N, O, 5 positions) */
    else if (rowfast) { r.sc = 1; r.sn = O; } else { r.sc = ncol; r.sn = 1; }
    return r;
}
int main(int argc, char **argv) {
    int b = atoi(argv[1]), nb = atoi(argv[2]), M = atoi(argv[3]), ncol = atoi(argv[4]);
    int xdt = atoi(argv[5]), ct = atoi(argv[6]), rowfast = atoi(argv[7]), delta = atoi(argv[8]), hasrho = atoi(argv[9]);
    int sms = argc > 10 ? atoi(argv[10]) : 132;
    long O = (long)nb * b, nop = (long)M * nb * b * b;
    std::vector<float> Nm(nop); for (auto &v : Nm) v = urand(0.3f);
    g_Nm = Nm.data();
    Buf X, Y, GY, GX, R; fill(X, O * ncol, xdt, 1.0f); fill(GY, O * ncol, xdt, 1.0f); fill(R, O, xdt, 1.5f);
    Y.dt = xdt; Y.d.assign(O * ncol * dt_size(xdt), 0); GX.dt = xdt; GX.d.assign(O * ncol * dt_size(xdt), 0);
    lk_oft_args a; memset(&a, 0, sizeof a);
    a.ct = ct; a.O = O; a.nb = nb; a.bs = b; a.M = M; a.ncol = ncol; a.m = 1.0; a.delta = delta;
    a.X = mkrows(X, O, ncol, rowfast); a.Y = mkrows(Y, O, ncol, rowfast);
    a.GY = mkrows(GY, O, ncol, rowfast); a.GX = mkrows(GX, O, ncol, rowfast);
    if (hasrho) { a.rho.p = R.d.data(); a.rho.s0 = O; a.rho.s1 = 1; a.rho.rows = 1; a.rho.cols = O; a.rho.dt = xdt; }
    std::vector<float> dummy(nop);
    a.gB.p = (argc > 11 && !atoi(argv[11])) ? NULL : dummy.data(); a.grho.p = hasrho ? dummy.data() : NULL;
    lk_device dev; memset(&dev, 0, sizeof dev); dev.sms = sms; dev.smem_optin = 232448;
    const char *why = NULL;
    if (!bg_takes(&a, &dev, 0, &why)) { printf("not taken: %s\n", why); return 0; }
    if (bg_fwd(&a, &dev, NULL)) { printf("fwd failed\n"); return 1; }
    /* reference forward (k_bs_stage semantics) */
    auto ld = [&](Buf &B, long o, long j) { return round_to(rows_load(mkrows(B, O, ncol, rowfast), o, j), ct); };
    std::vector<float> X0(O * ncol), D(O * ncol, 0.0f), Dn(O * ncol);
    for (long o = 0; o < O; o++) for (long j = 0; j < ncol; j++) X0[o * ncol + j] = ld(X, o, j);
    for (int i = 0; i < M; i++) {
        for (long k = 0; k < nb; k++) for (long j = 0; j < ncol; j++) for (int mu = 0; mu < b; mu++) {
            long t = tabf(i, k * b + mu, b); float acc = 0.0f;
            for (int ka = 0; ka < b; ka++) { long tk = tabf(i, k * b + ka, b); float x = i == 0 ? X0[tk * ncol + j] : X0[tk * ncol + j] + D[tk * ncol + j];
                acc = fmaf(Nm[((long)i * nb + k) * b * b + mu * b + ka], x, acc); }
            Dn[t * ncol + j] = (i == 0 ? 0.0f : D[t * ncol + j]) + acc;
        }
        D = Dn;
    }
    long bad = 0;
    lk_rows Yr = a.Y;
    for (long o = 0; o < O; o++) for (long j = 0; j < ncol; j++) {
        float pr = rho_ct(a.rho, o, ct), x = X0[o * ncol + j], d = D[o * ncol + j];
        float y = delta ? fmaf(pr, d, (pr - 1.0f) * x) : pr * (x + d);
        unsigned want = f_to_bits(y, xdt), got = f_to_bits(rows_load(Yr, o, j), xdt);
        if (want != got) { if (bad < 5) printf("fwd mismatch o%ld j%ld want %g got %g\n", o, j, y, rows_load(Yr, o, j)); bad++; }
    }
    printf("fwd b%d nb%d M%d ncol%d dt%d ct%d rf%d delta%d rho%d: %ld mismatches\n", b, nb, M, ncol, xdt, ct, rowfast, delta, hasrho, bad);
    /* backward */
    if (!bg_takes(&a, &dev, 1, &why)) { printf("bwd not taken: %s\n", why); return bad != 0; }
    if (bg_bwd(&a, &dev, NULL)) { printf("bwd failed\n"); return 1; }
    std::vector<std::vector<float>> Xs(M + 1, std::vector<float>(O * ncol));
    Xs[0] = X0;
    for (int i = 0; i < M; i++) {
        Xs[i + 1] = Xs[i];
        for (long k = 0; k < nb; k++) for (long j = 0; j < ncol; j++) for (int mu = 0; mu < b; mu++) {
            long t = tabf(i, k * b + mu, b); float acc = 0.0f;
            for (int ka = 0; ka < b; ka++) acc = fmaf(Nm[((long)i * nb + k) * b * b + mu * b + ka], Xs[i][tabf(i, k * b + ka, b) * ncol + j], acc);
            Xs[i + 1][t * ncol + j] = Xs[i][t * ncol + j] + acc;
        }
    }
    std::vector<float> G(O * ncol), DG(O * ncol), DGn;
    for (long o = 0; o < O; o++) for (long j = 0; j < ncol; j++) { G[o * ncol + j] = ld(GY, o, j); DG[o * ncol + j] = (rho_ct(a.rho, o, ct) - 1.0f) * G[o * ncol + j]; }
    std::vector<double> grho(O, 0.0), GN(nop, 0.0);
    for (long o = 0; o < O; o++) for (long j = 0; j < ncol; j++) grho[o] += (double)G[o * ncol + j] * Xs[M][o * ncol + j];
    for (int i = M - 1; i >= 0; i--) {
        DGn = DG;
        for (long k = 0; k < nb; k++) for (long j = 0; j < ncol; j++) {
            for (int mu = 0; mu < b; mu++) for (int nu = 0; nu < b; nu++) { long tm = tabf(i, k * b + mu, b), tn = tabf(i, k * b + nu, b);
                GN[((long)i * nb + k) * b * b + mu * b + nu] += (double)(G[tm * ncol + j] + DG[tm * ncol + j]) * Xs[i][tn * ncol + j]; }
            for (int nu = 0; nu < b; nu++) { long tn = tabf(i, k * b + nu, b); float acc = 0.0f;
                for (int mu = 0; mu < b; mu++) { long tm = tabf(i, k * b + mu, b); acc = fmaf(Nm[((long)i * nb + k) * b * b + mu * b + nu], G[tm * ncol + j] + DG[tm * ncol + j], acc); }
                DGn[tn * ncol + j] = DG[tn * ncol + j] + acc; }
        }
        DG = DGn;
    }
    long bad2 = 0;
    for (long o = 0; o < O; o++) for (long j = 0; j < ncol; j++) {
        float d = DG[o * ncol + j], y = delta ? d : d + G[o * ncol + j];
        unsigned want = f_to_bits(y, xdt), got = f_to_bits(rows_load(a.GX, o, j), xdt);
        if (want != got) { if (bad2 < 5) printf("gx mismatch o%ld j%ld want %g got %g\n", o, j, y, rows_load(a.GX, o, j)); bad2++; }
    }
    double emax = 0, smax = 0, rmax = 0, rsc = 0;
    if (a.gB.p) for (long e = 0; e < nop; e++) { emax = fmax(emax, fabs(GN[e] - g_GR[e])); smax = fmax(smax, fabs(GN[e])); }
    if (hasrho) for (long o = 0; o < O; o++) { rmax = fmax(rmax, fabs(grho[o] - g_grho[o])); rsc = fmax(rsc, fabs(grho[o])); }
    bool ok = bad == 0 && bad2 == 0 && emax <= 1e-5 * (smax + 1e-30) && rmax <= 1e-5 * (rsc + 1e-30);
    printf("bwd: gx %ld mismatches, G_N rel err %.3g (scale %.3g), G_rho rel err %.3g %s\n", bad2, emax / smax, smax, hasrho ? rmax / rsc : 0.0, ok ? "OK" : "FAIL");
    return !ok;
}
