/*
 * What the files of the distributed layer share: the engine in use, the wait that
 * turns an engine failure into the job's failed state, and the passage of tensors to
 * and from the dense host buffers engines move.
 */
#ifndef FLARE_DISTRIBUTED_INTERNAL_H
#define FLARE_DISTRIBUTED_INTERNAL_H

#include "flare/backend.h" /* struct fl_tensor */
#include "flare/distributed.h"
#include "flare/extension.h"

fl_distributed *fl__distributed_single(void);
fl_distributed *fl__distributed_mpi(void);

/* The engine collectives go to: the initialized one, else "single". NULL (and an error
 * naming fn) once a collective has failed. */
fl_distributed *fl__dist_engine(const char *fn);
/* Records an engine's failure (rc != 0) as fn's error and, for FL_ERR_DISTRIBUTED,
 * marks the job failed. Returns true on success. */
bool fl__dist_check(const char *fn, int rc);
/* False, with an FL_ERR_UNSUPPORTED error naming fn, the engine and entry_name, if the
 * engine leaves that entry NULL. */
bool fl__dist_implements(const char *fn, const fl_distributed *engine, bool implemented, const char *entry_name);
/* Completes work under the configured timeout; true on success. */
bool fl__dist_wait(const char *fn, fl_distributed *engine, void *work);

/* True if collectives accept dtype and op for it; else an error naming fn and t. */
bool fl__dist_accepts(const char *fn, const fl_tensor *t, fl_dist_op op);
/* The operation engines perform: MEAN is a SUM, divided afterwards. */
static inline fl_dist_op fl__dist_engine_op(fl_dist_op op) { return op == FL_DIST_MEAN ? FL_DIST_SUM : op; }
/* Divides count elements of a float dtype by the number of ranks, in place. */
void fl__dist_divide(void *data, int64_t count, fl_dtype dtype, int size);

/* A dense host pointer to t's values: the backend's own memory where its host_data
 * entry gives it, else a copy in *scratch (free it with free()). NULL on failure. */
const void *fl__dist_host_input(const char *fn, const fl_tensor *t, void **scratch);

#endif
