/* The interpreter, written once for T = double and T = ad_real with
 * dualrev's generic names (the library's "one source, two types"): the
 * bitwise comparison of values is then between the same source compiled
 * twice.  Included by interp.c with T, RUN, MATVEC_RR, EXTERNAL and BRANCH
 * defined (BRANCH: the comparison through a guard, ad_lt ..., which a
 * recorded program keeps).
 * RUN evaluates instructions [j0, j1) over the slots s. */

/* C = map op of A (prog.h, MAT_MAP): 1 if it failed. */
static int MAPAPPLY(int op, const ad_mat *A, T *out, ad_mat *C)
{
    if (op < MAP_USER)
        return ad_mat_map((ad_map_op)op, A, out, C) != AD_OK;
    return ad_mat_map_fn(op == MAP_USER ? &fuzz_map_fn : &fuzz_map_fn_nod2f, &fuzz_map_scale, A,
                         out, C) != AD_OK;
}

/* OP_MAT_MUL and OP_MAT_MAP (prog.h): the handles are made and used inside
 * the instruction; its outputs o are the blocks' entries. */
static void MATOPS(const prog *p, const insn *in, const T *s, T *o)
{
    const int *g = p->args + in->arg;
    const double *c = p->consts + in->cst;
    int m = in->rows, k = in->len, n = in->cols, na = prog_nargs(in), bad = 0;
    T *t = malloc(((size_t)na + 1) * sizeof *t);
    for (int i = 0; i < na; i++)
        t[i] = s[g[i]];
    ad_mat A, B, C, D;
    if (in->op == OP_MAT_MAP) {
        bad |= ad_mat_make((size_t)m, (size_t)k, t, &A) != AD_OK;
        bad |= MAPAPPLY(in->sub, &A, o, &C);
    } else {
        int kind = in->mode & 3, stage = in->mode >> 4 & 3, at = 0, ct = 0;
        T *bias = NULL;
        const double *biasc = NULL;
        if (kind != 2) {
            bad |= ad_mat_make((size_t)m, (size_t)k, t, &A) != AD_OK;
            at += m * k;
        } else {
            bad |= ad_mat_wrap((size_t)m, (size_t)k, c, &A) != AD_OK;
            ct += m * k;
        }
        if (kind == 0 || kind == 2) {
            bad |= ad_mat_make((size_t)k, (size_t)n, t + at, &B) != AD_OK;
            at += k * n;
        } else if (kind == 1) {
            bad |= ad_mat_wrap((size_t)k, (size_t)n, c + ct, &B) != AD_OK;
            ct += k * n;
        }
        if ((in->mode & 12) == 4)
            bias = t + at;
        else if (in->mode & 4)
            biasc = c + ct;
        const ad_mat *Bp = kind == 3 ? &A : &B;  /* the same handle both sides */
        if (biasc)
            bad |= ad_mat_mul(&A, Bp, biasc, o, &C) != AD_OK;
        else
            bad |= ad_mat_mul(&A, Bp, bias, o, &C) != AD_OK;
        T *o2 = o + m * n, *none = NULL;
        if (stage == 1)
            bad |= ad_mat_mul(&C, &C, none, o2, &D) != AD_OK;
        else if (stage == 2)
            bad |= ad_mat_mul(&A, &C, none, o2, &D) != AD_OK;
        else if (stage == 3)
            bad |= MAPAPPLY(in->sub, &C, o2, &D);
    }
    if (bad)
        fuzz_interp_errors++;
    free(t);
}

static void RUN(const prog *p, T *s, int j0, int j1)
{
    for (int j = j0; j < j1; j++) {
        const insn *in = &p->code[j];
        T *o = s + in->out;
        const int *g = p->args + in->arg;
        const double *c = p->consts + in->cst;
        int L = in->len, R = in->rows, na = 0;
        switch (in->op) {
        case OP_CONST: o[0] = AD_CONST(T, in->k); continue;
        case OP_BRANCH: o[0] = BRANCH(in->mode, s[in->a], s[in->b]) ? s[in->c] : s[in->d]; continue;
        case OP_NEST: o[0] = AD_CONST(T, nest_value(p, in, s)); continue;
        case OP_STEPK: o[0] = AD_CONST(T, stepk_value(in->k, fuzz_step_k)); continue;
        case OP_LOOP: LOOP(p, in, s); continue;
        case OP_LOOPOUT: case OP_NESTIN: o[0] = s[in->a]; continue;
        case OP_NESTR: NESTR(p, in, s); continue;
        case OP_NESTOUT: o[0] = NESTOUT(in, s); continue;
        case OP_MAT_MUL: case OP_MAT_MAP: MATOPS(p, in, s, o); continue;
        default: break;
        }
        if (in->op < OP_FIRST_BINARY) {
            o[0] = unary(in->op, s[in->a]);
            continue;
        }
        if (in->op < OP_FIRST_ARRAY) {
            o[0] = in->mode == 0 ? binary_rr(in->op, s[in->a], s[in->b])
                 : in->mode == 1 ? binary_rd(in->op, s[in->a], in->k)
                                 : binary_dr(in->op, in->k, s[in->a]);
            continue;
        }
        switch (in->op) {
        case OP_DOT: case OP_AXPY: na = 2 * L; break;
        case OP_MATVEC_RR: na = R * L + L; break;
        case OP_MAT_VEC: na = R * L + (in->mode == 1 ? 0 : in->mode == 2 ? 2 * L : L); break;
        case OP_MAT_SQNORM: na = R * L + (in->mode == 1 ? 0 : L); break;
        default: na = L; break;
        }
        T *t = malloc(((size_t)na + 1) * sizeof *t);
        for (int i = 0; i < na; i++)
            t[i] = s[g[i]];
        switch (in->op) {
        case OP_SUM: o[0] = ad_sum((size_t)L, t); break;
        case OP_DOT: o[0] = ad_dot((size_t)L, t, in->mode ? t : t + L); break;
        case OP_DOT_RD: o[0] = in->mode ? ad_dot((size_t)L, c, t) : ad_dot((size_t)L, t, c); break;
        case OP_SQNORM: o[0] = ad_sqnorm((size_t)L, t); break;
        case OP_PROD: o[0] = ad_prod((size_t)L, t); break;
        case OP_LSE: o[0] = ad_logsumexp((size_t)L, t); break;
        case OP_MATVEC: ad_matvec((size_t)R, (size_t)L, c, t, o); break;
        case OP_MATVEC_RR: MATVEC_RR((size_t)R, (size_t)L, t, t + R * L, o); break;
        case OP_AXPY:
            ad_axpy((size_t)L, in->k, in->mode ? t + L : t, t + L);
            for (int i = 0; i < L; i++)
                o[i] = t[L + i];
            break;
        case OP_MAT_VEC: case OP_MAT_SQNORM: {
            ad_mat M;
            if (ad_mat_make((size_t)R, (size_t)L, t, &M) != AD_OK)
                fuzz_interp_errors++;
            if (in->op == OP_MAT_SQNORM && in->mode == 1)
                ad_mat_sqnorm(&M, c, o);
            else if (in->op == OP_MAT_SQNORM)
                ad_mat_sqnorm(&M, t + R * L, o);
            else if (in->mode == 1)
                ad_mat_vec(&M, c, o);
            else
                ad_mat_vec(&M, t + R * L, o);
            if (in->op == OP_MAT_VEC && in->mode == 2)
                ad_mat_vec(&M, t + R * L + L, o + R);
            break;
        }
        case OP_EXTERNAL: EXTERNAL(in->sub ? &fuzz_rule_nojvp : &fuzz_rule_jvp, L, t, R, o); break;
        case OP_COLLECTIVE: COLLECTIVE(in, L, t, R, o); break;
        default: abort();
        }
        free(t);
    }
}
