/* Error recording: one status and message per thread, first error wins. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MESSAGE_SIZE 1024

static _Thread_local fl_status last_status;
static _Thread_local char last_message[MESSAGE_SIZE];
static _Thread_local fl_status backend_status;
static _Thread_local char backend_message[MESSAGE_SIZE];

static fl_error_handler error_handler;
static void *error_handler_user;

fl_status fl_last_status(void) { return last_status; }

const char *fl_last_error(void) { return last_message; }

void fl_clear_error(void)
{
    last_status = FL_OK;
    last_message[0] = '\0';
    /* A backend's detail not yet taken would otherwise be reported as the cause of the
     * next, unrelated failure (first error wins). */
    fl__take_backend_error(NULL, 0);
}

void fl_set_error_handler(fl_error_handler handler, void *user)
{
    error_handler = handler;
    error_handler_user = user;
}

const char *fl_status_name(fl_status status)
{
    static const char *names[] = {
        [FL_OK] = "ok",
        [FL_ERR_NULL] = "null argument",
        [FL_ERR_SHAPE] = "shape mismatch",
        [FL_ERR_AXIS] = "bad axis",
        [FL_ERR_DTYPE] = "bad dtype",
        [FL_ERR_INDEX] = "index out of range",
        [FL_ERR_VALUE] = "bad value",
        [FL_ERR_MEMORY] = "out of memory",
        [FL_ERR_UNSUPPORTED] = "unsupported",
        [FL_ERR_BACKEND] = "backend failure",
        [FL_ERR_IO] = "i/o error",
        [FL_ERR_DISTRIBUTED] = "distributed error",
        [FL_ERR_RELEASED] = "released handle",
    };
    if ((unsigned)status >= sizeof names / sizeof names[0])
        return "unknown status";
    return names[status];
}

static void record(fl_status status, const char *fn, const char *fmt, va_list ap)
{
    if (last_status != FL_OK)
        return;
    int n = snprintf(last_message, MESSAGE_SIZE, "%s: ", fn);
    if (n < 0 || n >= MESSAGE_SIZE)
        n = 0;
    vsnprintf(last_message + n, MESSAGE_SIZE - (size_t)n, fmt, ap);
    last_status = status;
    if (error_handler)
        error_handler(status, last_message, error_handler_user);
}

void *fl_error(fl_status status, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, fn, fmt, ap);
    va_end(ap);
    return NULL;
}

int fl_backend_error(fl_status status, const char *fmt, ...)
{
    if (backend_status == FL_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(backend_message, MESSAGE_SIZE, fmt, ap);
        va_end(ap);
        backend_status = status;
    }
    return (int)status;
}

fl_status fl__take_backend_error(char *message, size_t size)
{
    fl_status status = backend_status;
    snprintf(message, size, "%s", status == FL_OK ? "" : backend_message);
    backend_status = FL_OK;
    backend_message[0] = '\0';
    return status;
}

const char *fl_describe_shape(int ndim, const int64_t *shape, char *buf)
{
    size_t n = 0;
    buf[n++] = '[';
    for (int i = 0; i < ndim && n < FL_DESC_SIZE - 24; i++)
        n += (size_t)snprintf(buf + n, FL_DESC_SIZE - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(buf + n, FL_DESC_SIZE - n, "]");
    return buf;
}

const char *fl_describe(const fl_tensor *t, char *buf)
{
    if (!t) {
        snprintf(buf, FL_DESC_SIZE, "NULL");
        return buf;
    }
    char shape[FL_DESC_SIZE];
    fl_describe_shape(t->ndim, t->shape, shape);
    snprintf(buf, FL_DESC_SIZE, "%s%s", fl_dtype_name(t->dtype), shape);
    return buf;
}

bool fl_null_args(const char *fn, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    int missing = -1;
    for (int i = 0; i < count; i++)
        if (!va_arg(ap, const void *) && missing < 0)
            missing = i;
    va_end(ap);
    if (missing < 0 && fl__checked()) {
        va_start(ap, count);
        bool released = false;
        for (int i = 0; i < count && !released; i++)
            released = fl_handle_released(fn, va_arg(ap, const void *));
        va_end(ap);
        return released;
    }
    if (missing < 0)
        return false;
    if (last_status == FL_OK)
        fl_error(FL_ERR_NULL, fn, "argument %d is NULL", missing + 1);
    return true;
}
