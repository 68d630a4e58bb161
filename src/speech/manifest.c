#define _GNU_SOURCE /* asprintf */
/*
 * The manifest dataset: utterances listed one per line as path, duration and
 * transcript (wav2letter's list files, apps/asr/corpus.py's TSV). Every line is read
 * and checked when the dataset is made, so that a bad line is found before training
 * rather than hours into it; get reads the audio.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "flare/extension.h"
#include "speech_data.h"

#define REASON_SIZE 1024

typedef struct manifest {
    char *path; /* the manifest, for messages */
    int sample_rate;
    int64_t count;
    char **audio, **text;
    double *durations;
    int64_t *lines;
    int64_t *ids, *offsets; /* sample i's ids: ids[offsets[i], offsets[i + 1]) */
    int64_t skipped;
    char first_reason[REASON_SIZE];
} manifest;

static const char FN[] = "fl_manifest_dataset";

fl_manifest_options fl_manifest_options_default(void)
{
    return (fl_manifest_options){
        .sample_rate = 16000, .skip_bad = false, .boundary_at_ends = false, .lexicon = NULL, .spell_unknown = false};
}

static void manifest_free(manifest *m)
{
    if (!m)
        return;
    for (int64_t i = 0; i < m->count; i++) {
        free(m->audio[i]);
        free(m->text[i]);
    }
    free(m->audio), free(m->text), free(m->durations), free(m->lines), free(m->ids), free(m->offsets);
    free(m->path);
    free(m);
}

static int64_t manifest_size(fl_dataset *ds)
{
    manifest *m = ds->state;
    return m->count;
}

static fl_status manifest_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    manifest *m = ds->state;
    fl_audio audio;
    fl_status status = fl_audio_read(m->audio[index], m->sample_rate, &audio);
    if (status != FL_OK) {
        /* Say which line of the manifest named the file: fl_audio_read names only it. */
        char message[REASON_SIZE];
        snprintf(message, sizeof message, "%s", fl_last_error());
        fl_clear_error();
        fl_error(status, FN, "%s:%lld: sample %lld: %s", m->path, (long long)m->lines[index], (long long)index,
                 message);
        return status;
    }
    int64_t length = m->offsets[index + 1] - m->offsets[index];
    out->fields[0] = fl_from_data(audio.samples, FL_F32, 1, &audio.count);
    fl_audio_free(&audio);
    out->fields[1] = fl_from_data(m->ids + m->offsets[index], FL_I64, 1, &length);
    out->fields[2] = fl_scalar((double)index, FL_I64);
    out->count = 3;
    if (!out->fields[0] || !out->fields[1] || !out->fields[2]) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_BACKEND, FN, "making the tensors of sample %lld failed", (long long)index);
        return fl_last_status();
    }
    return FL_OK;
}

static void manifest_release(fl_dataset *ds) { manifest_free(ds->state); }

static const fl_dataset_ops manifest_ops = {
    .name = "manifest",
    .size = manifest_size,
    .get = manifest_get,
    .release = manifest_release,
};

/* The state of a manifest being read. */
typedef struct reader {
    manifest *m;
    bool skip_bad;
    int64_t line, capacity, id_capacity;
} reader;

/* A bad line: an error (false), or counted and its reason kept if skipping (true). */
__attribute__((format(printf, 2, 3))) static bool bad(reader *r, const char *fmt, ...)
{
    char reason[REASON_SIZE];
    int n = snprintf(reason, sizeof reason, "%s:%lld: ", r->m->path, (long long)r->line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason + n, sizeof reason - (size_t)n, fmt, ap);
    va_end(ap);
    if (!r->skip_bad) {
        fl_error(FL_ERR_IO, FN, "%s", reason);
        return false;
    }
    if (r->m->skipped++ == 0)
        memcpy(r->m->first_reason, reason, sizeof reason);
    return true;
}

static bool grow(reader *r)
{
    manifest *m = r->m;
    if (m->count < r->capacity)
        return true;
    int64_t capacity = r->capacity ? 2 * r->capacity : 256;
    size_t c = (size_t)capacity;
    char **audio = realloc(m->audio, c * sizeof *audio);
    if (audio)
        m->audio = audio;
    char **text = realloc(m->text, c * sizeof *text);
    if (text)
        m->text = text;
    double *durations = realloc(m->durations, c * sizeof *durations);
    if (durations)
        m->durations = durations;
    int64_t *lines = realloc(m->lines, c * sizeof *lines);
    if (lines)
        m->lines = lines;
    int64_t *offsets = realloc(m->offsets, (c + 1) * sizeof *offsets);
    if (offsets)
        m->offsets = offsets;
    if (!audio || !text || !durations || !lines || !offsets)
        return fl_error(FL_ERR_MEMORY, FN, "%s: cannot allocate %lld utterances", m->path, (long long)capacity),
               false;
    r->capacity = capacity;
    return true;
}

/* Reads one line (its newline removed): a sample, a skipped line, or an error (false). */
static bool read_line(reader *r, char *line, const char *dir, const fl_token_set *tokens,
                      const fl_manifest_options *o)
{
    manifest *m = r->m;
    char *fields[3];
    int count = 0;
    for (char *p = line;; p++) {
        if (count < 3)
            fields[count] = p;
        count++;
        p = strchr(p, '\t');
        if (!p)
            break;
        *p = '\0';
    }
    if (count != 3)
        return bad(r, "%d tab-separated field%s, expected 3 (path, duration in seconds, transcript)", count,
                   count == 1 ? "" : "s");
    if (!fields[0][0])
        return bad(r, "the audio path is empty");
    char *end;
    errno = 0;
    double duration = strtod(fields[1], &end);
    if (end == fields[1] || *end || errno == ERANGE || !isfinite(duration) || duration <= 0)
        return bad(r, "the duration \"%s\" is not a positive number of seconds", fields[1]);

    char *audio;
    if (fields[0][0] == '/' || !dir[0])
        audio = strdup(fields[0]);
    else if (asprintf(&audio, "%s/%s", dir, fields[0]) < 0)
        audio = NULL;
    if (!audio)
        return fl_error(FL_ERR_MEMORY, FN, "%s: cannot allocate a path", m->path), false;
    struct stat st;
    int rc = stat(audio, &st);
    if (rc != 0 || !S_ISREG(st.st_mode)) {
        const char *why = rc != 0 ? strerror(errno) : "not a regular file";
        bool ok = bad(r, "audio file %s: %s", audio, why);
        free(audio);
        return ok;
    }

    char where[REASON_SIZE];
    snprintf(where, sizeof where, "%s:%lld: ", m->path, (long long)r->line);
    int64_t *ids, length;
    fl_status encoded = o->lexicon
                            ? fl__encode_words(tokens, o->lexicon, fields[2], o->spell_unknown, &ids, &length, FN, where)
                            : fl__token_encode(tokens, fields[2], o->boundary_at_ends, &ids, &length, FN, where);
    if (encoded != FL_OK) {
        free(audio);
        if (fl_last_status() == FL_ERR_MEMORY)
            return false;
        /* Recorded as "fn: manifest:line: reason"; kept or reported as any bad line. */
        char message[REASON_SIZE];
        const char *recorded = fl_last_error();
        size_t skip = strlen(FN) + 2 + strlen(where);
        snprintf(message, sizeof message, "%s", strlen(recorded) > skip ? recorded + skip : recorded);
        fl_clear_error();
        return bad(r, "%s", message);
    }
    if (length == 0) {
        free(audio);
        free(ids);
        return bad(r, "the transcript is empty");
    }
    char *text = strdup(fields[2]);
    bool ok = text && grow(r);
    int64_t at = m->count ? m->offsets[m->count] : 0;
    if (ok && at + length > r->id_capacity) {
        int64_t capacity = r->id_capacity ? 2 * r->id_capacity : 4096;
        while (capacity < at + length)
            capacity *= 2;
        int64_t *grown = realloc(m->ids, (size_t)capacity * sizeof *grown);
        ok = grown != NULL;
        if (ok)
            m->ids = grown, r->id_capacity = capacity;
    }
    if (!ok) {
        free(audio), free(text), free(ids);
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_MEMORY, FN, "%s: out of memory", m->path);
        return false;
    }
    memcpy(m->ids + at, ids, (size_t)length * sizeof *ids);
    free(ids);
    m->audio[m->count] = audio;
    m->text[m->count] = text;
    m->durations[m->count] = duration;
    m->lines[m->count] = r->line;
    m->offsets[m->count] = at;
    m->offsets[++m->count] = at + length;
    return true;
}

fl_dataset *fl_manifest_dataset(const char *path, const fl_token_set *tokens, const fl_manifest_options *options)
{
    if (fl_null_args(FN, 2, path, tokens))
        return NULL;
    fl_manifest_options o = options ? *options : fl_manifest_options_default();
    if (o.sample_rate < 0)
        return fl_error(FL_ERR_VALUE, FN, "%s: sample rate %d is negative", path, o.sample_rate);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_error(FL_ERR_IO, FN, "%s: cannot open: %s", path, strerror(errno));
    manifest *m = calloc(1, sizeof *m);
    char *dir = strdup(path);
    if (!m || !dir || !(m->path = strdup(path))) {
        fclose(f);
        free(dir);
        manifest_free(m);
        return fl_error(FL_ERR_MEMORY, FN, "%s: out of memory", path);
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        dir[0] = '\0';
    m->sample_rate = o.sample_rate;
    reader r = {.m = m, .skip_bad = o.skip_bad};
    char *line = NULL;
    size_t size = 0;
    ssize_t got;
    bool ok = true;
    while (ok && (got = getline(&line, &size, f)) >= 0) {
        r.line++;
        if (got > 0 && line[got - 1] == '\n')
            line[--got] = '\0';
        if (got > 0 && line[got - 1] == '\r')
            line[--got] = '\0';
        if ((ssize_t)strlen(line) != got)
            ok = bad(&r, "a NUL byte in the line");
        else
            ok = read_line(&r, line, dir, tokens, &o);
    }
    if (ok && ferror(f))
        ok = fl_error(FL_ERR_IO, FN, "%s: read error after line %lld", path, (long long)r.line) != NULL;
    free(line);
    free(dir);
    fclose(f);
    if (ok && m->count == 0) {
        if (m->skipped)
            fl_error(FL_ERR_IO, FN, "%s: every line (%lld) is bad; the first: %s", path, (long long)m->skipped,
                     m->first_reason);
        else
            fl_error(FL_ERR_IO, FN, "%s: no utterances", path);
        ok = false;
    }
    if (!ok) {
        manifest_free(m);
        return NULL;
    }
    fl_dataset *ds = fl_dataset_new(&manifest_ops, m);
    if (!ds)
        manifest_free(m);
    return ds;
}

static manifest *manifest_of(fl_dataset *ds, const char *fn)
{
    if (!ds)
        return fl_error(FL_ERR_NULL, fn, "the dataset is NULL");
    if (ds->ops != &manifest_ops)
        return fl_error(FL_ERR_VALUE, fn, "needs a manifest dataset, got a %s dataset", ds->ops->name);
    return ds->state;
}

int64_t fl_manifest_skipped(fl_dataset *ds, const char **reason)
{
    manifest *m = manifest_of(ds, "fl_manifest_skipped");
    if (reason)
        *reason = m ? m->first_reason : NULL;
    return m ? m->skipped : -1;
}

const double *fl_manifest_durations(fl_dataset *ds)
{
    manifest *m = manifest_of(ds, "fl_manifest_durations");
    return m ? m->durations : NULL;
}

static manifest *manifest_at(fl_dataset *ds, int64_t index, const char *fn)
{
    manifest *m = manifest_of(ds, fn);
    if (m && (index < 0 || index >= m->count))
        return fl_error(FL_ERR_INDEX, fn, "index %lld is out of range for a manifest of %lld utterances",
                        (long long)index, (long long)m->count);
    return m;
}

const char *fl_manifest_audio_path(fl_dataset *ds, int64_t index)
{
    manifest *m = manifest_at(ds, index, "fl_manifest_audio_path");
    return m ? m->audio[index] : NULL;
}

const char *fl_manifest_transcript(fl_dataset *ds, int64_t index)
{
    manifest *m = manifest_at(ds, index, "fl_manifest_transcript");
    return m ? m->text[index] : NULL;
}
