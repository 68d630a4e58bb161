/*
 * Says whether the opencl backend has a device: prints its name and exits 0, or
 * prints why not and exits 1. `make test` runs it to decide whether the opencl row
 * of the test matrix runs.
 */
#include <stdio.h>

#include "flare/opencl.h"

int main(void)
{
    const char *device = fl_opencl_device();
    if (!device) {
        printf("%s\n", fl_opencl_unavailable());
        return 1;
    }
    printf("%s\n", device);
    return 0;
}
