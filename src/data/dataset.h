/* What the dataset kinds of src/data share. */
#ifndef FLARE_DATA_DATASET_H
#define FLARE_DATA_DATASET_H

#include "flare/backend.h" /* struct fl_tensor */
#include "flare/data.h"
#include "flare/extension.h"

/* Sample index (in range) of ds, through its get entry, with what it returned checked:
 * the way wrappers read their sources. Owned references, as the fl_dataset_ops entries. */
fl_status fl__dataset_fetch(fl_dataset *ds, int64_t index, fl_sample *out);

/* The samples at indices (in range) of ds as one batch, each field stacked along a new
 * axis 0: through ds's get_batch if it has one, else get on each and stack. Owned
 * references, as the fl_dataset_ops entries. */
fl_status fl__dataset_gather(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out);

/* The default collate: stacks each field of the samples along a new axis 0. */
fl_status fl__stack_samples(const fl_sample *samples, int64_t count, fl_sample *out, void *user);

/* A new dataset of a built-in kind; on failure frees state with ops->release (which
 * releases the sources it holds) and returns NULL after recording an error. */
fl_dataset *fl__dataset_make(const char *fn, const fl_dataset_ops *ops, void *state);

/* Releases count sources, skipping NULLs: for constructors that fail early. */
void fl__release_sources(fl_dataset *const *sources, int count);

/* Records the pending error, if any was recorded on this thread, as the status to
 * return; FL_ERR_BACKEND with a generic message otherwise. */
fl_status fl__dataset_failure(const char *fn, const char *what);

#endif
