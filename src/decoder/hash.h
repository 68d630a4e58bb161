/* The hashes of the decoder's open-addressing tables (ngram.c, kneser_ney.c): word-id
 * tuples and word spellings, finished by a 64-bit mixer so that the low bits a table
 * masks are well spread. */
#ifndef FLARE_DECODER_HASH_H
#define FLARE_DECODER_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t decoder_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t decoder_hash_ids(const int32_t *ids, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = decoder_mix(h ^ (uint32_t)ids[i]) + 0x9e3779b97f4a7c15ULL;
    return h;
}

/* FNV-1a over len bytes, mixed. */
static inline uint64_t decoder_hash_string(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return decoder_mix(h);
}

#endif
