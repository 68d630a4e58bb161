/*
 * The precompiled character map (charsmap.h). Its bytes are a little-endian u32, the
 * size in bytes of the trie that follows, the trie's u32 units (darts-clone's double
 * array), then the rewrites as NUL-terminated strings that the trie's values index.
 * A unit holds a label (the byte that leads to it), an offset to its children and
 * whether one child is a leaf, whose unit holds the value. Every index read is
 * checked against the map's size, so a damaged map rewrites nothing rather than read
 * outside it.
 *
 * Rewriting follows the tokenizers library, which follows SentencePiece: text is
 * taken a grapheme cluster at a time; a cluster of under 6 bytes that starts with a
 * key of the map (the shortest, found first) becomes that key's rewrite, the rest of
 * the cluster with it ("\uFF21\u0301" becomes "A"); otherwise each character is
 * rewritten or kept on its own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "charsmap.h"
#include "graphemes.h"
#include "unicode.h"

struct text_charsmap {
    uint32_t *units;
    size_t nunits;
    char *rewrites;
    size_t rewrites_size;
};

static int base64_value(unsigned char c)
{
    return c >= 'A' && c <= 'Z'   ? c - 'A'
           : c >= 'a' && c <= 'z' ? c - 'a' + 26
           : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+'             ? 62
           : c == '/'             ? 63
                                  : -1;
}

/* Decodes base64 (padded with '=' or not) into out (len / 4 * 3 + 3 bytes); the
 * decoded size, or SIZE_MAX if a character is not base64. */
static size_t base64_decode(const char *s, size_t len, unsigned char *out)
{
    while (len && s[len - 1] == '=')
        len--;
    size_t n = 0;
    uint32_t bits = 0;
    int have = 0;
    for (size_t i = 0; i < len; i++) {
        int v = base64_value((unsigned char)s[i]);
        if (v < 0)
            return SIZE_MAX;
        bits = bits << 6 | (uint32_t)v;
        if ((have += 6) >= 8) {
            have -= 8;
            out[n++] = (unsigned char)(bits >> have);
        }
    }
    return n;
}

static uint32_t read_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

text_charsmap *text_charsmap_new(const char *base64, size_t len, const char **error)
{
    unsigned char *blob = malloc(len / 4 * 3 + 3);
    text_charsmap *m = calloc(1, sizeof *m);
    *error = "out of memory";
    if (!blob || !m) {
        free(blob), free(m);
        return NULL;
    }
    size_t size = base64_decode(base64, len, blob);
    uint32_t trie = size != SIZE_MAX && size >= 4 ? read_u32(blob) : 0;
    if (size == SIZE_MAX || size < 4 || trie < 4 || trie % 4 || trie > size - 4) {
        *error = size == SIZE_MAX ? "is not base64" : "is not a trie and its rewrites";
        free(blob), free(m);
        return NULL;
    }
    m->nunits = trie / 4;
    m->rewrites_size = size - 4 - trie;
    m->units = malloc(m->nunits * sizeof *m->units);
    m->rewrites = malloc(m->rewrites_size + 1);
    if (!m->units || !m->rewrites) {
        free(blob);
        text_charsmap_free(m);
        return NULL;
    }
    for (size_t i = 0; i < m->nunits; i++)
        m->units[i] = read_u32(blob + 4 + 4 * i);
    memcpy(m->rewrites, blob + 4 + trie, m->rewrites_size);
    m->rewrites[m->rewrites_size] = 0; /* a last rewrite without its NUL ends here */
    free(blob);
    return m;
}

void text_charsmap_free(text_charsmap *m)
{
    if (!m)
        return;
    free(m->units), free(m->rewrites);
    free(m);
}

static uint32_t unit_offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

/* The rewrite of the shortest key s[0..n) starts with (a NUL byte ends the search),
 * *len bytes; NULL if none. */
static const char *rewrite_of(const text_charsmap *m, const unsigned char *s, size_t n, size_t *len)
{
    size_t pos = unit_offset(m->units[0]);
    for (size_t i = 0; i < n && s[i]; i++) {
        pos ^= s[i];
        if (pos >= m->nunits)
            return NULL;
        uint32_t unit = m->units[pos];
        if ((unit & (1u << 31 | 0xFF)) != s[i])
            return NULL;
        pos ^= unit_offset(unit);
        if (!(unit >> 8 & 1))
            continue;
        if (pos >= m->nunits)
            return NULL;
        size_t at = m->units[pos] & ~(1u << 31);
        if (at >= m->rewrites_size)
            return NULL;
        *len = strlen(m->rewrites + at);
        return m->rewrites + at;
    }
    return NULL;
}

static bool append(unsigned char **out, size_t *n, size_t *cap, const void *p, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t want = *cap ? *cap : 64;
        while (want < *n + len + 1)
            want *= 2;
        unsigned char *grown = realloc(*out, want);
        if (!grown)
            return false;
        *out = grown, *cap = want;
    }
    memcpy(*out + *n, p, len);
    *n += len;
    (*out)[*n] = 0;
    return true;
}

bool text_charsmap_normalize(const text_charsmap *m, const unsigned char *s, size_t n, unsigned char **out,
                             size_t *out_n)
{
    size_t cap = 0, len;
    *out = NULL, *out_n = 0;
    bool ok = append(out, out_n, &cap, "", 0);
    for (size_t i = 0, cluster; ok && i < n; i += cluster) {
        cluster = text_grapheme_length(s + i, n - i);
        const char *r = cluster < 6 ? rewrite_of(m, s + i, cluster, &len) : NULL;
        if (r) {
            ok = append(out, out_n, &cap, r, len);
            continue;
        }
        for (size_t j = i, c; ok && j < i + cluster; j += c) {
            text_utf8_next(s + j, i + cluster - j, &c);
            r = rewrite_of(m, s + j, c, &len);
            ok = r ? append(out, out_n, &cap, r, len) : append(out, out_n, &cap, s + j, c);
        }
    }
    if (!ok) {
        free(*out);
        *out = NULL, *out_n = 0;
    }
    return ok;
}
