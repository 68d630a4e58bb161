/* The FFTW plans the speech layer shares (fft.c). */
#ifndef FLARE_SPEECH_FFT_H
#define FLARE_SPEECH_FFT_H

#include <fftw3.h>

/* The real-to-complex plan of size n (n floats in, n / 2 + 1 complex out), made on
 * first use and kept: FFTW's planner is not thread-safe, so plans are made under a
 * lock, while executing one with fftwf_execute_dft_r2c on arrays of one's own (from
 * fftwf_malloc, so that they are aligned as the plan's were) is. NULL if FFTW cannot
 * make it. */
fftwf_plan speech_rfft_plan(int n);

#endif
