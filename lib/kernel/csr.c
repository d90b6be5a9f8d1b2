/* dualrev: the arrays of a sparse Jacobian (ad_csr) as it is built, and
 * the thread's spare ones.
 *
 * ad_csr_free keeps the arrays of the last Jacobian freed on a thread for
 * the next one built there, as the tape keeps its memory: a Newton or
 * Gauss-Newton loop builds one of much the same size at every step, and
 * fresh memory is paid for page by page when it is first touched.  A call
 * starts with room for as many entries as the last call's result (a
 * workload usually repeats itself), and the caller trims the arrays when
 * they end more than a quarter too large. */
#include <string.h>

#include "csr.h"
#include "tape.h"

/* The arrays of the last Jacobian freed on this thread, for the next one
 * built here: rows + 1 and nnz entries. */
static _Thread_local ad_csr spare;

static void spare_free(void)
{
    ad_free(spare.row_ptr);
    ad_free(spare.col);
    ad_free(spare.val);
    memset(&spare, 0, sizeof spare);
}

/* J's row pointers for m rows, and room for `want` entries: the spare
 * arrays where they are large enough, else new ones.  The spare arrays
 * left over are freed. */
int ad_csr_start(ad_csr_out *o, size_t m, size_t want)
{
    ad_csr *J = o->J, *sp = &spare;
    if (sp->row_ptr && sp->rows >= m) {  /* rows + 1 pointers */
        J->row_ptr = sp->row_ptr;
        sp->row_ptr = NULL;
    }
    if (sp->col && sp->val && sp->nnz >= want) {
        J->col = sp->col;
        J->val = sp->val;
        o->cap = sp->nnz;
        sp->col = NULL;
        sp->val = NULL;
    }
    spare_free();
    if (!J->row_ptr && !(J->row_ptr = ad_alloc((m + 1) * sizeof *J->row_ptr)))
        return 0;
    return ad_csr_room(o, want);
}

/* col and val grow together (ad_grow); o->cap is the room both have. */
int ad_csr_grow(ad_csr_out *o, size_t need)
{
    ad_csr *J = o->J;
    size_t ccap = o->cap, vcap = o->cap;
    if (need <= o->cap)
        return 1;
    int ok = ad_grow((void **)&J->col, &ccap, need, sizeof *J->col, J->nnz) == AD_OK &&
             ad_grow((void **)&J->val, &vcap, need, sizeof *J->val, J->nnz) == AD_OK;
    o->cap = ccap < vcap ? ccap : vcap;
    return ok;
}

/* Not a growth but a copy into arrays of exactly J->nnz entries, so that a
 * Jacobian kept by the user holds no spare room. */
int ad_csr_trim(ad_csr_out *o)
{
    ad_csr *J = o->J;
    size_t keep = J->nnz ? J->nnz : 1;
    size_t *col = ad_alloc(keep * sizeof *col);
    double *val = ad_alloc(keep * sizeof *val);
    if (!col || !val) {
        ad_free(col);
        ad_free(val);
        return 0;
    }
    if (J->nnz) {
        memcpy(col, J->col, J->nnz * sizeof *col);
        memcpy(val, J->val, J->nnz * sizeof *val);
    }
    ad_free(J->col);
    ad_free(J->val);
    J->col = col;
    J->val = val;
    o->cap = keep;
    return 1;
}

/* The arrays become the thread's spare ones (freeing those it had); their
 * sizes are the least J says they hold.  They are freed with the thread's
 * tapes (ad_thread_cleanup), or at once if that cannot be arranged. */
void ad_csr_free(ad_csr *J)
{
    if (!J)
        return;
    spare_free();
    spare = *J;
    memset(J, 0, sizeof *J);
    if (ad_thread_cleanup(spare_free) != AD_OK)
        spare_free();
}
