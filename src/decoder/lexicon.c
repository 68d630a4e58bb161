/* Lexicons: words, and a trie over the tokens of their spellings whose nodes list the
 * words that end there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "lexicon.h"

static fl_status no_memory(const char *fn) { return fl_error(FL_ERR_MEMORY, fn, "out of memory"), FL_ERR_MEMORY; }

fl_status fl_lexicon_new(int64_t tokens, fl_lexicon **out)
{
    if (!out)
        return fl_error(FL_ERR_NULL, "fl_lexicon_new", "out is NULL"), FL_ERR_NULL;
    *out = NULL;
    if (tokens < 1 || tokens > INT32_MAX)
        return fl_error(FL_ERR_VALUE, "fl_lexicon_new", "%lld tokens; a lexicon needs 1 to %d", (long long)tokens,
                        INT32_MAX),
               FL_ERR_VALUE;
    fl_lexicon *lex = calloc(1, sizeof *lex);
    if (!lex || !(lex->nodes = calloc(16, sizeof *lex->nodes))) {
        free(lex);
        return no_memory("fl_lexicon_new");
    }
    lex->tokens = tokens;
    lex->node_cap = 16;
    lex->node_count = 1; /* the root */
    *out = lex;
    return FL_OK;
}

void fl_lexicon_free(fl_lexicon *lex)
{
    if (!lex)
        return;
    for (int64_t i = 0; i < lex->node_count; i++)
        free(lex->nodes[i].children), free(lex->nodes[i].words);
    for (int64_t i = 0; i < lex->word_count; i++)
        free(lex->words[i]), free(lex->spellings[i]);
    free(lex->nodes), free(lex->words), free(lex->spellings), free(lex->spelling_lengths), free(lex->word_slots);
    free(lex);
}

int64_t fl_lexicon_size(const fl_lexicon *lex) { return lex ? lex->word_count : 0; }

fl_status fl_lexicon_spelling(const fl_lexicon *lex, int64_t id, const int64_t **tokens, size_t *length)
{
    static const char fn[] = "fl_lexicon_spelling";
    if (fl_null_args(fn, 3, lex, tokens, length))
        return fl_last_status();
    if (id < 0 || id >= lex->word_count)
        return fl_error(FL_ERR_INDEX, fn, "word id %lld is outside [0, %lld)", (long long)id,
                        (long long)lex->word_count),
               FL_ERR_INDEX;
    *tokens = lex->spellings[id];
    *length = lex->spelling_lengths[id];
    return FL_OK;
}

const char *fl_lexicon_word(const fl_lexicon *lex, int64_t id)
{
    return lex && id >= 0 && id < lex->word_count ? lex->words[id] : NULL;
}

static uint64_t hash_word(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

int64_t fl_lexicon_word_id(const fl_lexicon *lex, const char *word)
{
    if (!lex || !word || !lex->word_slots)
        return -1;
    uint64_t mask = (uint64_t)lex->word_cap * 2 - 1;
    for (uint64_t i = hash_word(word) & mask;; i = (i + 1) & mask) {
        uint32_t s = lex->word_slots[i];
        if (!s)
            return -1;
        if (!strcmp(lex->words[s - 1], word))
            return s - 1;
    }
}

static void slot_word(fl_lexicon *lex, int64_t id)
{
    uint64_t mask = (uint64_t)lex->word_cap * 2 - 1;
    uint64_t i = hash_word(lex->words[id]) & mask;
    while (lex->word_slots[i])
        i = (i + 1) & mask;
    lex->word_slots[i] = (uint32_t)(id + 1);
}

int32_t lexicon_child(const fl_lexicon *lex, int32_t node, int64_t token)
{
    const lexicon_node *n = &lex->nodes[node];
    for (int32_t i = 0; i < n->child_count; i++)
        if (n->children[i].token == token)
            return n->children[i].node;
    return -1;
}

fl_status fl_lexicon_add(fl_lexicon *lex, const char *word, const int64_t *spelling, size_t length)
{
    static const char fn[] = "fl_lexicon_add";
    if (!lex || !word || (!spelling && length))
        return fl_error(FL_ERR_NULL, fn, "%s is NULL", !lex ? "lex" : !word ? "word" : "spelling"), FL_ERR_NULL;
    if (length == 0)
        return fl_error(FL_ERR_VALUE, fn, "the spelling of \"%.60s\" has no tokens", word), FL_ERR_VALUE;
    for (size_t i = 0; i < length; i++)
        if (spelling[i] < 0 || spelling[i] >= lex->tokens)
            return fl_error(FL_ERR_INDEX, fn, "token %lld of the spelling of \"%.60s\" is %lld, outside [0, %lld)",
                            (long long)i, word, (long long)spelling[i], (long long)lex->tokens),
                   FL_ERR_INDEX;
    int64_t id = fl_lexicon_word_id(lex, word);
    if (id < 0) {
        if (lex->word_count == lex->word_cap) {
            if (lex->word_cap >= INT32_MAX / 4)
                return no_memory(fn);
            int64_t cap = lex->word_cap ? lex->word_cap * 2 : 16;
            char **words = realloc(lex->words, (size_t)cap * sizeof *words);
            if (words)
                lex->words = words;
            int64_t **spellings = words ? realloc(lex->spellings, (size_t)cap * sizeof *spellings) : NULL;
            if (spellings)
                lex->spellings = spellings;
            size_t *lengths = spellings ? realloc(lex->spelling_lengths, (size_t)cap * sizeof *lengths) : NULL;
            if (!lengths)
                return no_memory(fn);
            lex->spelling_lengths = lengths;
            uint32_t *slots = calloc((size_t)cap * 2, sizeof *slots);
            if (!slots)
                return no_memory(fn);
            free(lex->word_slots);
            lex->word_slots = slots;
            lex->word_cap = cap;
            for (int64_t i = 0; i < lex->word_count; i++)
                slot_word(lex, i);
        }
        size_t len = strlen(word);
        char *copy = malloc(len + 1);
        int64_t *first = malloc(length * sizeof *first);
        if (!copy || !first) {
            free(copy), free(first);
            return no_memory(fn);
        }
        memcpy(copy, word, len + 1);
        memcpy(first, spelling, length * sizeof *first);
        id = lex->word_count++;
        lex->words[id] = copy;
        lex->spellings[id] = first;
        lex->spelling_lengths[id] = length;
        slot_word(lex, id);
    }
    int32_t node = 0;
    for (size_t i = 0; i < length; i++) {
        int32_t next = lexicon_child(lex, node, spelling[i]);
        if (next < 0) {
            if (lex->node_count == lex->node_cap) {
                if (lex->node_cap >= INT32_MAX / 4)
                    return no_memory(fn);
                lexicon_node *nodes = realloc(lex->nodes, (size_t)lex->node_cap * 2 * sizeof *nodes);
                if (!nodes)
                    return no_memory(fn);
                memset(nodes + lex->node_cap, 0, (size_t)lex->node_cap * sizeof *nodes);
                lex->nodes = nodes;
                lex->node_cap *= 2;
            }
            lexicon_node *n = &lex->nodes[node];
            lexicon_edge *children = realloc(n->children, (size_t)(n->child_count + 1) * sizeof *children);
            if (!children)
                return no_memory(fn);
            n->children = children;
            next = (int32_t)lex->node_count++;
            children[n->child_count++] = (lexicon_edge){.token = spelling[i], .node = next};
        }
        node = next;
    }
    lexicon_node *n = &lex->nodes[node];
    for (int32_t i = 0; i < n->word_count; i++)
        if (n->words[i] == id)
            return FL_OK;
    int64_t *words = realloc(n->words, (size_t)(n->word_count + 1) * sizeof *words);
    if (!words)
        return no_memory(fn);
    n->words = words;
    n->words[n->word_count++] = id;
    return FL_OK;
}

/* The names by_name sorts by: qsort takes no context. Per thread, so that threads
 * may load lexicons at once. */
static _Thread_local const char *const *sort_names;

static int by_name(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int c = strcmp(sort_names[x], sort_names[y]);
    return c ? c : (x > y) - (x < y);
}

fl_status fl_lexicon_load(const char *path, const char *const *token_names, int64_t tokens, fl_lexicon **out)
{
    static const char fn[] = "fl_lexicon_load";
    if (out)
        *out = NULL;
    if (!path || !token_names || !out)
        return fl_error(FL_ERR_NULL, fn, "%s is NULL", !path ? "path" : !token_names ? "token_names" : "out"),
               FL_ERR_NULL;
    fl_lexicon *lex;
    fl_status status = fl_lexicon_new(tokens, &lex);
    if (status)
        return status;
    /* the token names sorted, for binary search (a word-piece set has thousands) */
    int64_t *sorted = malloc((size_t)tokens * sizeof *sorted);
    if (!sorted) {
        fl_lexicon_free(lex);
        return no_memory(fn);
    }
    size_t named = 0;
    for (int64_t k = 0; k < tokens; k++)
        if (token_names[k])
            sorted[named++] = k;
    sort_names = token_names;
    qsort(sorted, named, sizeof *sorted, by_name);
    for (size_t i = 1; i < named; i++)
        if (!strcmp(token_names[sorted[i - 1]], token_names[sorted[i]])) {
            fl_error(FL_ERR_VALUE, fn, "tokens %lld and %lld are both named \"%.40s\"", (long long)sorted[i - 1],
                     (long long)sorted[i], token_names[sorted[i]]);
            free(sorted);
            fl_lexicon_free(lex);
            return FL_ERR_VALUE;
        }
    FILE *f = fopen(path, "r");
    if (!f) {
        free(sorted);
        fl_lexicon_free(lex);
        return fl_error(FL_ERR_IO, fn, "cannot open %s: %s", path, strerror(errno)), FL_ERR_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    int64_t *spelling = NULL;
    size_t spelling_cap = 0;
    long long number = 0;
    ssize_t len;
    while (status == FL_OK && (len = getline(&line, &cap, f)) >= 0) {
        number++;
        char *save, *word = strtok_r(line, " \t\r\n", &save);
        if (!word)
            continue;
        size_t n = 0;
        for (char *t; (t = strtok_r(NULL, " \t\r\n", &save));) {
            int64_t id = -1;
            size_t lo = 0, hi = named;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(token_names[sorted[mid]], t);
                if (c == 0) {
                    id = sorted[mid];
                    break;
                }
                if (c < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (id < 0) {
                fl_error(FL_ERR_VALUE, fn, "%s, line %lld: \"%.40s\" is not a token", path, number, t);
                status = FL_ERR_VALUE;
                break;
            }
            if (n == spelling_cap) {
                spelling_cap = spelling_cap ? spelling_cap * 2 : 32;
                int64_t *grown = realloc(spelling, spelling_cap * sizeof *grown);
                if (!grown) {
                    status = no_memory(fn);
                    break;
                }
                spelling = grown;
            }
            spelling[n++] = id;
        }
        if (status)
            break;
        if (n == 0) {
            fl_error(FL_ERR_VALUE, fn, "%s, line %lld: the word \"%.40s\" has no tokens", path, number, word);
            status = FL_ERR_VALUE;
            break;
        }
        status = fl_lexicon_add(lex, word, spelling, n);
    }
    if (status == FL_OK && ferror(f)) {
        fl_error(FL_ERR_IO, fn, "cannot read %s", path);
        status = FL_ERR_IO;
    }
    fclose(f);
    free(line), free(spelling), free(sorted);
    if (status) {
        fl_lexicon_free(lex);
        return status;
    }
    *out = lex;
    return FL_OK;
}
