/* The lexicon's trie, which the beam search walks (ctc.c). */
#ifndef FLARE_DECODER_LEXICON_H
#define FLARE_DECODER_LEXICON_H

#include "flare/decoder.h"

typedef struct {
    int64_t token;
    int32_t node;
} lexicon_edge;

typedef struct {
    lexicon_edge *children;
    int32_t child_count;
    int32_t word_count;
    int64_t *words; /* the words whose spelling ends here */
} lexicon_node;

struct fl_lexicon {
    int64_t tokens;
    lexicon_node *nodes; /* nodes[0] is the root */
    int64_t node_count, node_cap;
    char **words;
    int64_t **spellings;       /* each word's first spelling, as fl_lexicon_spelling gives it */
    size_t *spelling_lengths;
    int64_t word_count, word_cap;
    uint32_t *word_slots; /* id + 1 by the spelling's hash, 0 empty; 2 x word_cap of them */
};

/* The child of node by token, or -1. */
int32_t lexicon_child(const fl_lexicon *lex, int32_t node, int64_t token);

#endif
