/* dualrev: a readable listing of a small tape, and its picture (DOT). */
#include <stdio.h>

#include "block.h"
#include "check.h"
#include "walk.h"

/* The thread's last complete top-level recording, or why there is none. */
static ad_status last_tape(FILE *out, const ad_tape **t)
{
    if (!out)
        return AD_EINVAL;
    ad_thread *th = ad_thread_self();
    if (th->depth > 0)
        return AD_EBUSY;
    *t = &th->tapes[0];
    if ((*t)->first == 0 || (*t)->status != AD_OK)
        return AD_EINVAL;
    return AD_OK;
}

/* A record's operation, or "?" when the recording kept no names
 * (ad_set_checks). */
static const char *name_of(const ad_tape *t, uint32_t id)
{
    const char *n = ad_op_name(t, id);
    return n ? n : "?";
}

/* A block's output, in a listing: not a step of the walk. */
#define OUTPUT (-1)

/* One line: the record at id, a step of kind `kind` (or OUTPUT), with its
 * value in a checked recording. */
static void dump_line(FILE *out, const ad_tape *t, uint32_t id, int kind)
{
    const ad__record *r = ad_tape_record(t, id);
    const ad_info *i = ad_tape_info(t, id);
    if (kind == AD_WALK_NARY)
        fprintf(out, "%8u  n-ary (%s): the %u slots above are its arguments", id, name_of(t, id),
                r->a);
    else if (kind == AD_WALK_BLOCK)
        fprintf(out, "%8u  block (%s): %u outputs, %u arguments", id, name_of(t, id), r->a,
                ad_block_of(t, r)->nargs);
    else if (kind == OUTPUT)
        fprintf(out, "%8u  output %u of the block at %u", id, r->a - 1, id - r->a);
    else if (r->b)
        fprintf(out, "%8u  %-12s %8u %14.6g  %8u %14.6g", id, name_of(t, id), r->a, r->wa, r->b,
                r->wb);
    else  /* b = 0 is the constant sink: a one-argument record */
        fprintf(out, "%8u  %-12s %8u %14.6g  %8s %14s", id, name_of(t, id), r->a, r->wa, "-", "-");
    if (i && kind != AD_WALK_BLOCK)
        fprintf(out, "  %14.6g", i->v);
    fputc('\n', out);
}

ad_status ad_tape_dump(FILE *out, size_t max_records)
{
    const ad_tape *t;
    ad_status s = last_tape(out, &t);
    if (s != AD_OK)
        return s;
    uint32_t top = ad_tape_top(t);
    fprintf(out, "inputs: IDs 1..%u; records: %u (%zu bytes each)\n",
            t->first - 1, top + 1 - t->first, sizeof(ad__record));
    fprintf(out, "%8s  %-12s %8s %14s  %8s %14s  %14s\n", "id", "op", "a", "d/da", "b", "d/db",
            "value");
    if (max_records < (size_t)top + 1 - t->first)
        top = t->first - 1 + (uint32_t)max_records;
    /* Every slot, each n-ary run's before its header, a block's outputs
     * after it. */
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            dump_line(out, t, w.id, kind);
            ad_walk_stop_up(&w, w.r + 1, w.id + 1);
            continue;
        }
        dump_line(out, t, w.hid, kind);
        for (uint32_t j = 1; kind == AD_WALK_BLOCK && j <= w.hdr->a && w.hid + j <= top; j++)
            dump_line(out, t, w.hid + j, OUTPUT);
    }
    return AD_OK;
}

/* ---- DOT ---- */

static void dot_edge(FILE *out, uint32_t from, uint32_t to, double w)
{
    if (from)
        fprintf(out, "  n%u -> n%u [label=\"%.4g\"];\n", from, to, w);
}

static void dot_node(FILE *out, const ad_tape *t, uint32_t id, const char *shape)
{
    const ad_info *i = ad_tape_info(t, id);
    fprintf(out, "  n%u [shape=%s, label=\"%u: %s", id, shape, id, name_of(t, id));
    if (i)
        fprintf(out, "\\n= %.6g", i->v);
    if (i && i->label) {
        fputs("\\n[", out);
        for (const char *c = i->label; *c; c++)  /* quotes and backslashes escaped */
            fprintf(out, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        fputc(']', out);
    }
    fputs("\"];\n", out);
}

/* The slots of an n-ary record are drawn as edges into its header. */
static void dot_nary(FILE *out, const ad_tape *t, uint32_t id, uint32_t count)
{
    dot_node(out, t, id, "ellipse");
    for (uint32_t k = 1; k <= count; k++) {
        const ad__record *q = ad_tape_record(t, id - k);
        dot_edge(out, q->a, id, q->wa);
        dot_edge(out, q->b, id, q->wb);
    }
}

/* A block and its outputs, each drawn from the block. */
static void dot_block(FILE *out, const ad_tape *t, const ad__record *r, uint32_t id)
{
    ad_block *b = ad_block_of(t, r);
    const uint32_t *ids = ad_block_ids(b);
    dot_node(out, t, id, "box3d");
    for (uint32_t k = 0; k < b->nargs; k++)
        if (ids[k])
            fprintf(out, "  n%u -> n%u;\n", ids[k], id);
    if (b->run_len)
        fprintf(out, "  n%u -> n%u [label=\"%u entries from here\", style=dashed];\n", b->run, id,
                b->run_len);
    for (uint32_t j = 1; j <= r->a; j++) {
        const ad_info *i = ad_tape_info(t, id + j);
        fprintf(out, "  n%u [shape=ellipse, label=\"%u: output %u", id + j, id + j, j - 1);
        if (i)
            fprintf(out, "\\n= %.6g", i->v);
        fprintf(out, "\"];\n  n%u -> n%u [style=dashed];\n", id, id + j);
    }
}

ad_status ad_tape_dot(FILE *out, size_t max_records)
{
    const ad_tape *t;
    ad_status s = last_tape(out, &t);
    if (s != AD_OK)
        return s;
    uint32_t top = ad_tape_top(t);
    unsigned char *slot = ad_slot_marks(t, top);  /* drawn as their header's edges */
    if (!slot)
        return AD_ENOMEM;
    fputs("digraph tape {\n  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [fontname=\"Helvetica\", fontsize=9];\n", out);
    for (uint32_t id = 1; id < t->first; id++)
        fprintf(out, "  n%u [shape=box, label=\"x%u\\n= %.6g\"];\n", id, id - 1,
                t->inputs[id - 1].v);
    if (max_records < (size_t)top + 1 - t->first)
        top = t->first - 1 + (uint32_t)max_records;
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r;
            uint32_t id = w.id;
            ad_walk_stop_up(&w, r + 1, id + 1);
            if (slot[id - t->first])
                continue;
            dot_node(out, t, id, "ellipse");
            dot_edge(out, r->a, id, r->wa);
            dot_edge(out, r->b, id, r->wb);
        } else if (kind == AD_WALK_NARY) {
            dot_nary(out, t, w.hid, w.hdr->a);
        } else {
            dot_block(out, t, w.hdr, w.hid);
        }
    }
    ad_free(slot);
    fputs("}\n", out);
    return AD_OK;
}
