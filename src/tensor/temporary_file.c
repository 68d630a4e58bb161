/* Temporaries of files written whole or not at all (extension.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "flare/extension.h"

int fl_temporary_file(const char *path, char *name, size_t size)
{
    static unsigned counter;
    if (!path || !name) {
        errno = EINVAL;
        return -1;
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        if ((size_t)snprintf(name, size, "%s.tmp.%ld.%u", path, (long)getpid(), n) >= size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}
