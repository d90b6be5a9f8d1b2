/* The ADBench LSTM objective, written once for any number type.
 *
 * Include with T defined as the number type and NAME(id) giving each
 * function a per-type name; both are undefined at the end.  The bodies use
 * only dualrev's generic operations, which on plain doubles return double and
 * record nothing, so the double instantiation is ordinary double code.  They
 * follow ADBench's C++ (src/cpp/shared/lstm.h) statement by statement, as a
 * user would translate it: no array primitives and no rearrangement to save
 * records, so the tape is what a straightforward port gives.
 *
 * Definition (/work/shared/adbench/README.md, "LSTM"), per time step
 * t = 0 .. c-2, with the state reset to the problem's at every call:
 *   z = seq_t o in_w
 *   per layer, per element i (h_i, c_i the layer's state before the step):
 *     f = s(z_i Wf_i + bf_i)   ig = s(h_i Wi_i + bi_i)
 *     o = s(z_i Wo_i + bo_i)   g = tanh(h_i Wc_i + bc_i)
 *     c_i = c_i f + ig g       h_i = o tanh(c_i)        then z = h
 *   y = z o out_w + out_b
 *   lse = log(sum_i exp(y_i) + 2)      (ADBench's "+ 2", no max shift)
 *   total += sum_i seq_{t+1,i} (y_i - lse)
 * loss = -total / ((c-1) b), s(x) = 1/(1+exp(-x)). */

#ifndef LSTM_OBJECTIVE_ONCE
#define LSTM_OBJECTIVE_ONCE

#include <stddef.h>

/* Numbers of scratch the objective uses: the state (2 l b), y and ynorm
 * (b each). */
static inline size_t lstm_scratch(const lstm_problem *p)
{
    return (2 * p->l + 2) * p->b;
}

#endif

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including lstm_objective.h"
#endif

static T NAME(lstm_sigmoid)(T x)
{
    return ad_div(1.0, ad_add(1.0, ad_exp(ad_neg(x))));
}

/* ADBench's log(sum exp(v) + 2): the 2 belongs to the benchmark's
 * definition, and there is no shift by the largest value. */
static T NAME(lstm_logsumexp)(size_t n, const T *v)
{
    T sum = AD_CONST(T, 0.0);
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_exp(v[i]));
    sum = ad_add(sum, 2.0);
    return ad_log(sum);
}

/* One layer, one time step: weight and bias are [forget ingate outgate
 * change], b each; hidden and cell are updated in place. */
static void NAME(lstm_model)(size_t b, const T *weight, const T *bias, T *hidden, T *cell,
                             const T *input)
{
    for (size_t i = 0; i < b; i++) {
        T forget = NAME(lstm_sigmoid)(ad_add(ad_mul(input[i], weight[i]), bias[i]));
        T ingate = NAME(lstm_sigmoid)(ad_add(ad_mul(hidden[i], weight[b + i]), bias[b + i]));
        T outgate =
            NAME(lstm_sigmoid)(ad_add(ad_mul(input[i], weight[2 * b + i]), bias[2 * b + i]));
        T change = ad_tanh(ad_add(ad_mul(hidden[i], weight[3 * b + i]), bias[3 * b + i]));
        cell[i] = ad_add(ad_mul(cell[i], forget), ad_mul(ingate, change));
        hidden[i] = ad_mul(outgate, ad_tanh(cell[i]));
    }
}

/* The prediction for one input character (b bits); writes output (b). */
static void NAME(lstm_predict)(const lstm_problem *p, const T *main_params,
                               const T *extra_params, T *state, const double *input, T *output)
{
    size_t b = p->b;
    const T *in_w = extra_params, *out_w = in_w + b, *out_b = out_w + b;
    for (size_t i = 0; i < b; i++)
        output[i] = ad_mul(input[i], in_w[i]);
    const T *layer_output = output;
    for (size_t j = 0; j < p->l; j++) {
        const T *layer = main_params + 8 * b * j;
        T *hidden = state + 2 * b * j;
        NAME(lstm_model)(b, layer, layer + 4 * b, hidden, hidden + b, layer_output);
        layer_output = hidden;
    }
    for (size_t i = 0; i < b; i++)
        output[i] = ad_add(ad_mul(layer_output[i], out_w[i]), out_b[i]);
}

/* The loss at params = [main (8 l b), extra (3 b)].  Scratch: the state,
 * y, ynorm (lstm_scratch). */
static T NAME(lstm_loss)(const lstm_problem *p, const T *params, T *scratch)
{
    size_t b = p->b, l = p->l;
    const T *main_params = params, *extra_params = params + 8 * l * b;
    T *state = scratch, *ypred = state + 2 * l * b, *ynorm = ypred + b;
    /* the state is data, not a parameter: a constant, and fresh every call */
    for (size_t k = 0; k < 2 * l * b; k++)
        state[k] = AD_CONST(T, p->state[k]);
    T total = AD_CONST(T, 0.0);
    size_t count = 0;
    for (size_t t = 0; t + 1 < p->c; t++) {
        NAME(lstm_predict)(p, main_params, extra_params, state, p->seq + t * b, ypred);
        T lse = NAME(lstm_logsumexp)(b, ypred);
        for (size_t i = 0; i < b; i++)
            ynorm[i] = ad_sub(ypred[i], lse);
        const double *ygold = p->seq + (t + 1) * b;
        for (size_t i = 0; i < b; i++)
            total = ad_add(total, ad_mul(ygold[i], ynorm[i]));
        count += b;
    }
    return ad_div(ad_neg(total), (double)count);
}

#undef T
#undef NAME
