#include "opencl.h"

void ocl_register_index(fl_backend *b) { (void)b; }
