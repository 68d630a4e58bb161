/* The CPU backend's arange, concat, update_slice, where, gather, scatter_add, index_select. (Being written: nothing registered yet.) */
#include "cpu.h"

void cpu_register_index(fl_backend *b) { (void)b; }
