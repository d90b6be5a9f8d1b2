/* The interpreter, written once for T = double and T = ad_real with
 * dualrev's generic names (the library's "one source, two types"): the
 * bitwise comparison of values is then between the same source compiled
 * twice.  Included by interp.c with T, RUN, MATVEC_RR, EXTERNAL and BRANCH
 * defined (BRANCH: the comparison through a guard, ad_lt ..., which a
 * recorded program keeps).
 * RUN evaluates instructions [j0, j1) over the slots s. */

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
        default: abort();
        }
        free(t);
    }
}
