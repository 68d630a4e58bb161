/* Runs a fuzz target without libFuzzer, on every file named or in a directory named
 * on the command line: how ctest replays the seed corpus and the regression files
 * (crashes the fuzzers found) with any compiler. -v prints what the reader said of each
 * file. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t capacity = 1 << 16, size = 0, got;
    uint8_t *data = malloc(capacity);
    while (data && (got = fread(data + size, 1, capacity - size, f)) > 0) {
        size += got;
        if (size == capacity) {
            uint8_t *bigger = realloc(data, capacity *= 2);
            if (!bigger)
                free(data);
            data = bigger;
        }
    }
    fclose(f);
    if (!data) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    printf("%s (%zu bytes)\n", path, size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int compare(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files of dir in name order, so that a run is repeatable. */
static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **more = realloc(names, (n + 1) * sizeof *names);
        if (!more)
            abort();
        names = more;
        size_t length = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(length);
        if (!names[n])
            abort();
        snprintf(names[n++], length, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, compare);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            failed |= run_file(names[i]);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv)
{
    int failed = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (strcmp(argv[i], "-v") == 0) {
            fuzz_verbose = 1;
            continue;
        }
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            failed = 1;
        } else if (S_ISDIR(st.st_mode)) {
            failed |= run_dir(argv[i], &count);
        } else {
            failed |= run_file(argv[i]);
            count++;
        }
    }
    printf("%d inputs\n", count);
    return failed;
}
