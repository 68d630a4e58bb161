/* tokenizer.json's post-processors: TemplateProcessing (bert-base-uncased, Llama 3),
 * BertProcessing and RobertaProcessing (their older fixed forms), ByteLevel (which
 * changes offsets only, not ids) and a Sequence of these, each reduced to one template:
 * a list of pieces, each a special token's ids or one of the two texts, with its token
 * type id. */
#include "template.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"

enum { SPECIAL = -1, TEXT_A = 0, TEXT_B = 1 };

typedef struct piece {
    int source;          /* SPECIAL, TEXT_A or TEXT_B */
    size_t first, count; /* a special token's ids: ids[first .. first + count) */
    int64_t type_id;
} piece;

typedef struct form {
    piece *pieces;
    size_t count;
} form;

struct text_template {
    bool present;       /* false: no post-processor; texts as they are, pair types 0 and 1 */
    form single, pair;
    int64_t *ids;       /* of the special tokens */
    size_t nids;
    char refusal[256];  /* non-empty: a post-processor Flare does not apply */
};

static const char *const load_fn = "fl_tokenizer_load";

static text_template *fail(text_template *t, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static text_template *fail(text_template *t, const char *path, const char *fmt, ...)
{
    char message[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fl_error(FL_ERR_VALUE, load_fn, "'%s': post_processor: %s", path, message);
    text_template_free(t);
    return NULL;
}

void text_template_free(text_template *t)
{
    if (!t)
        return;
    free(t->single.pieces);
    free(t->pair.pieces);
    free(t->ids);
    free(t);
}

static bool add_piece(form *f, piece p)
{
    piece *grown = realloc(f->pieces, (f->count + 1) * sizeof *grown);
    if (!grown)
        return false;
    f->pieces = grown;
    f->pieces[f->count++] = p;
    return true;
}

/* A special token of the given ids; false when out of memory. */
static bool add_special(text_template *t, form *f, const int64_t *ids, size_t n, int64_t type_id)
{
    int64_t *grown = realloc(t->ids, (t->nids + n + 1) * sizeof *grown);
    if (!grown)
        return false;
    t->ids = grown;
    memcpy(t->ids + t->nids, ids, n * sizeof *ids);
    bool ok = add_piece(f, (piece){SPECIAL, t->nids, n, type_id});
    t->nids += n;
    return ok;
}

static bool add_text(form *f, int source, int64_t type_id) { return add_piece(f, (piece){source, 0, 0, type_id}); }

/* ["[SEP]", 102] of BertProcessing and RobertaProcessing: the id. */
static bool fixed_token(const json_t *p, const char *key, int64_t vocab_size, int64_t *id)
{
    const json_t *v = json_object_get(p, key);
    const json_t *n = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(n))
        return false;
    *id = json_integer_value(n);
    return *id >= 0 && *id < vocab_size;
}

/* BertProcessing: [CLS] A [SEP] (B [SEP]), B's types 1. RobertaProcessing:
 * <s> A </s> (</s> B </s>), all types 0. */
static text_template *fixed(text_template *t, const char *path, const json_t *p, bool roberta, int64_t vocab_size)
{
    int64_t cls, sep;
    if (!fixed_token(p, "cls", vocab_size, &cls) || !fixed_token(p, "sep", vocab_size, &sep))
        return fail(t, path, "%s needs \"cls\" and \"sep\" as [token, id] with an id below %lld",
                    roberta ? "RobertaProcessing" : "BertProcessing", (long long)vocab_size);
    int64_t b = roberta ? 0 : 1;
    bool ok = add_special(t, &t->single, &cls, 1, 0) && add_text(&t->single, TEXT_A, 0) &&
              add_special(t, &t->single, &sep, 1, 0) && add_special(t, &t->pair, &cls, 1, 0) &&
              add_text(&t->pair, TEXT_A, 0) && add_special(t, &t->pair, &sep, 1, 0) &&
              (!roberta || add_special(t, &t->pair, &sep, 1, 0)) && add_text(&t->pair, TEXT_B, b) &&
              add_special(t, &t->pair, &sep, 1, b);
    return ok ? t : fail(t, path, "out of memory");
}

/* One of TemplateProcessing's lists: {"SpecialToken": {"id", "type_id"}} or
 * {"Sequence": {"id": "A" or "B", "type_id"}}, special tokens spelled out in
 * special_tokens. */
static bool template_form(text_template *t, form *f, const char *path, const char *name, const json_t *list,
                          const json_t *specials, int64_t vocab_size, bool pair)
{
    if (!json_is_array(list)) {
        fail(NULL, path, "TemplateProcessing's \"%s\" is not a list", name);
        return false;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(list, i, item)
    {
        const json_t *special = json_object_get(item, "SpecialToken"), *sequence = json_object_get(item, "Sequence");
        const json_t *body = special ? special : sequence;
        const char *id = json_string_value(json_object_get(body, "id"));
        const json_t *type = json_object_get(body, "type_id");
        if (!id || !json_is_integer(type) || json_integer_value(type) < 0) {
            fail(NULL, path, "TemplateProcessing's %s[%zu] is not a SpecialToken or Sequence with an id and a type_id",
                 name, i);
            return false;
        }
        int64_t type_id = json_integer_value(type);
        if (sequence) {
            bool b = strcmp(id, "B") == 0;
            if ((!b && strcmp(id, "A") != 0) || (b && !pair)) {
                fail(NULL, path, "TemplateProcessing's %s[%zu] names sequence '%s'%s", name, i, id,
                     pair ? ": only A and B exist" : ": only A exists for one text");
                return false;
            }
            if (!add_text(f, b ? TEXT_B : TEXT_A, type_id)) {
                fail(NULL, path, "out of memory");
                return false;
            }
            continue;
        }
        const json_t *ids = json_object_get(json_object_get(specials, id), "ids");
        if (!json_is_array(ids) || json_array_size(ids) == 0 || json_array_size(ids) > 64) {
            fail(NULL, path, "TemplateProcessing's special token '%s' has no \"ids\" in special_tokens", id);
            return false;
        }
        int64_t values[64];
        for (size_t k = 0; k < json_array_size(ids); k++) {
            const json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab_size) {
                fail(NULL, path, "special token '%s': ids[%zu] is not an id below %lld", id, k, (long long)vocab_size);
                return false;
            }
            values[k] = json_integer_value(v);
        }
        if (!add_special(t, f, values, json_array_size(ids), type_id)) {
            fail(NULL, path, "out of memory");
            return false;
        }
    }
    return true;
}

static const char *type_of(const json_t *p)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    return type ? type : "(no type)";
}

/* One processor into t; a Sequence's members in order, of which at most one may add
 * tokens. */
static text_template *add_processor(text_template *t, const char *path, const json_t *p, int64_t vocab_size,
                                    int depth)
{
    const char *type = type_of(p);
    if (strcmp(type, "ByteLevel") == 0)
        return t;
    if (strcmp(type, "Sequence") == 0 && depth == 0) {
        const json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list))
            return fail(t, path, "Sequence without a \"processors\" list");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (!(t = add_processor(t, path, json_array_get(list, i), vocab_size, depth + 1)))
                return NULL;
        return t;
    }
    bool template = strcmp(type, "TemplateProcessing") == 0, bert = strcmp(type, "BertProcessing") == 0,
         roberta = strcmp(type, "RobertaProcessing") == 0;
    if (!template && !bert && !roberta) {
        snprintf(t->refusal, sizeof t->refusal,
                 "'%s' is not one Flare applies (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, a "
                 "Sequence of these)",
                 type);
        return t;
    }
    if (t->present)
        return fail(t, path, "a Sequence of two processors that add tokens is not supported");
    t->present = true;
    if (!template)
        return fixed(t, path, p, roberta, vocab_size);
    const json_t *specials = json_object_get(p, "special_tokens");
    if (!template_form(t, &t->single, path, "single", json_object_get(p, "single"), specials, vocab_size, false) ||
        !template_form(t, &t->pair, path, "pair", json_object_get(p, "pair"), specials, vocab_size, true)) {
        text_template_free(t);
        return NULL;
    }
    return t;
}

text_template *text_template_load(const char *path, const json_t *post_processor, int64_t vocab_size)
{
    text_template *t = calloc(1, sizeof *t);
    if (!t)
        return fail(NULL, path, "out of memory");
    if (!post_processor || json_is_null(post_processor))
        return t;
    if (!json_is_object(post_processor))
        return fail(t, path, "not an object");
    return add_processor(t, path, post_processor, vocab_size, 0);
}

fl_status text_template_apply(const text_template *t, const char *fn, const int64_t *a, size_t na, const int64_t *b,
                              bool paired, size_t nb, int64_t **ids, int64_t **types, size_t *count)
{
    if (t && t->refusal[0])
        return fl_error(FL_ERR_VALUE, fn, "the tokenizer's post_processor %s", t->refusal), FL_ERR_VALUE;
    /* Without a post-processor the texts follow each other, the second of type 1. */
    static const piece plain[2] = {{TEXT_A, 0, 0, 0}, {TEXT_B, 0, 0, 1}};
    const piece *pieces = plain;
    size_t npieces = paired ? 2 : 1;
    if (t && t->present) {
        const form *f = paired ? &t->pair : &t->single;
        pieces = f->pieces, npieces = f->count;
    }
    size_t total = 0;
    for (size_t i = 0; i < npieces; i++)
        total += pieces[i].source == SPECIAL ? pieces[i].count : pieces[i].source == TEXT_A ? na : nb;
    int64_t *out = malloc((total + 1) * sizeof *out);
    int64_t *out_types = types ? malloc((total + 1) * sizeof *out_types) : NULL;
    if (!out || (types && !out_types)) {
        free(out), free(out_types);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory for %zu ids", total), FL_ERR_MEMORY;
    }
    size_t n = 0;
    for (size_t i = 0; i < npieces; i++) {
        const piece *p = &pieces[i];
        const int64_t *from = p->source == SPECIAL ? t->ids + p->first : p->source == TEXT_A ? a : b;
        size_t k = p->source == SPECIAL ? p->count : p->source == TEXT_A ? na : nb;
        if (k)
            memcpy(out + n, from, k * sizeof *out);
        for (size_t j = 0; out_types && j < k; j++)
            out_types[n + j] = p->type_id;
        n += k;
    }
    *ids = out;
    if (types)
        *types = out_types;
    *count = n;
    return FL_OK;
}
