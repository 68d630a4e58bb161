/*
 * The Unigram model's segmentation (unigram.h). The pieces form a byte trie whose
 * edges live in one open-addressing table keyed by (node, byte), so that walking the
 * text from a position visits every piece starting there, shortest first, at one
 * probe a byte. The segmentation is the library's Viterbi: at each character, every
 * piece starting there offers the best score so far plus its own to the position it
 * ends at, which keeps the first offer of the highest score; a character no
 * one-character piece covers offers the unknown token at the lowest piece's score less
 * 10 (the library's penalty).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"
#include "unigram.h"

#define UNKNOWN_PENALTY 10.0

typedef struct edge {
    uint64_t key; /* (parent << 8 | byte) + 1; 0: an empty slot */
    uint32_t child;
} edge;

struct text_unigram {
    edge *edges;
    size_t edge_mask, nedges;
    int64_t *piece; /* per node: the id of the piece ending there, -1: none */
    double *score;
    size_t nnodes, cap;
    double min_score;
    int64_t unknown;
};

static uint64_t edge_key(uint32_t parent, unsigned char byte) { return ((uint64_t)parent << 8 | byte) + 1; }

static size_t edge_slot(uint64_t key, size_t mask)
{
    key *= 0x9E3779B97F4A7C15ull;
    return (size_t)(key >> 32) & mask;
}

static uint32_t child_of(const text_unigram *u, uint32_t parent, unsigned char byte)
{
    uint64_t key = edge_key(parent, byte);
    for (size_t i = edge_slot(key, u->edge_mask);; i = (i + 1) & u->edge_mask) {
        if (u->edges[i].key == key)
            return u->edges[i].child;
        if (!u->edges[i].key)
            return 0; /* the root is no one's child */
    }
}

static bool grow_edges(text_unigram *u)
{
    size_t size = (u->edge_mask + 1) * 2;
    edge *edges = calloc(size, sizeof *edges);
    if (!edges)
        return false;
    for (size_t i = 0; i <= u->edge_mask; i++)
        if (u->edges[i].key) {
            size_t j = edge_slot(u->edges[i].key, size - 1);
            while (edges[j].key)
                j = (j + 1) & (size - 1);
            edges[j] = u->edges[i];
        }
    free(u->edges);
    u->edges = edges, u->edge_mask = size - 1;
    return true;
}

static bool new_node(text_unigram *u, uint32_t *node)
{
    if (u->nnodes == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 256;
        int64_t *piece = realloc(u->piece, cap * sizeof *piece);
        if (piece)
            u->piece = piece;
        double *score = piece ? realloc(u->score, cap * sizeof *score) : NULL;
        if (!score)
            return false;
        u->score = score, u->cap = cap;
    }
    if (u->nnodes > UINT32_MAX)
        return false;
    u->piece[u->nnodes] = -1;
    u->score[u->nnodes] = 0;
    *node = (uint32_t)u->nnodes++;
    return true;
}

text_unigram *text_unigram_new(void)
{
    text_unigram *u = calloc(1, sizeof *u);
    uint32_t root;
    if (!u || !(u->edges = calloc(256, sizeof *u->edges)) || !new_node(u, &root)) {
        text_unigram_free(u);
        return NULL;
    }
    u->edge_mask = 255;
    u->min_score = INFINITY;
    u->unknown = -1;
    return u;
}

void text_unigram_free(text_unigram *u)
{
    if (!u)
        return;
    free(u->edges), free(u->piece), free(u->score);
    free(u);
}

bool text_unigram_add(text_unigram *u, const char *piece, size_t len, int64_t id, double score)
{
    uint32_t node = 0;
    for (size_t k = 0; k < len; k++) {
        unsigned char byte = (unsigned char)piece[k];
        uint32_t child = child_of(u, node, byte);
        if (!child) {
            if ((2 * (u->nedges + 1) > u->edge_mask + 1 && !grow_edges(u)) || !new_node(u, &child))
                return false;
            uint64_t key = edge_key(node, byte);
            size_t i = edge_slot(key, u->edge_mask);
            while (u->edges[i].key)
                i = (i + 1) & u->edge_mask;
            u->edges[i] = (edge){key, child};
            u->nedges++;
        }
        node = child;
    }
    u->piece[node] = id;
    u->score[node] = score;
    if (score < u->min_score)
        u->min_score = score;
    return true;
}

void text_unigram_set_unknown(text_unigram *u, int64_t id) { u->unknown = id; }

/* The best path to each position: its score, where its last token starts (SIZE_MAX:
 * no path yet) and that token's id. */
typedef struct best_path {
    double score;
    size_t start;
    int64_t id;
} best_path;

static void offer(best_path *at, double score, size_t start, int64_t id)
{
    if (at->start == SIZE_MAX || score > at->score)
        *at = (best_path){score, start, id};
}

bool text_unigram_segment(const text_unigram *u, const unsigned char *s, size_t n, text_unigram_token *out,
                          size_t *count, size_t *uncovered)
{
    *count = 0, *uncovered = SIZE_MAX;
    /* a word's paths fit on the stack */
    best_path word[65], *best = n < 65 ? word : malloc((n + 1) * sizeof *best);
    if (!best)
        return false;
    for (size_t i = 0; i <= n; i++)
        best[i] = (best_path){0, SIZE_MAX, -1};
    best[0].score = 0;
    double unknown_score = u->min_score - UNKNOWN_PENALTY;
    for (size_t start = 0, len; start < n; start += len) {
        text_utf8_next(s + start, n - start, &len);
        double here = best[start].score;
        bool single = false; /* a piece of exactly this character */
        uint32_t node = 0;
        for (size_t k = start; k < n && (node = child_of(u, node, s[k])); k++) {
            if (u->piece[node] < 0)
                continue;
            offer(&best[k + 1], here + u->score[node], start, u->piece[node]);
            single = single || k + 1 - start == len;
        }
        if (!single) {
            if (u->unknown < 0) {
                *uncovered = start;
                if (best != word)
                    free(best);
                return true;
            }
            offer(&best[start + len], here + unknown_score, start, u->unknown);
        }
    }
    /* Back from the end, each run of unknown tokens fused into one. */
    size_t tokens = 0;
    for (size_t end = n; end > 0; end = best[end].start)
        tokens++;
    text_unigram_token *t = out;
    size_t k = tokens;
    for (size_t end = n; end > 0; end = best[end].start) {
        bool unknown = best[end].id == u->unknown;
        if (unknown && k < tokens && t[k].id < 0)
            t[k].start = best[end].start; /* fused with the unknown token after it */
        else
            t[--k] = (text_unigram_token){best[end].start, end, unknown ? -1 : best[end].id};
    }
    memmove(t, t + k, (tokens - k) * sizeof *t);
    *count = tokens - k;
    if (best != word)
        free(best);
    return true;
}
