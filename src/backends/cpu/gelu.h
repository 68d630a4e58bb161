/*
 * GELU's formulas, term for term those of the compositions in
 * src/autograd/activation.c, as expressions in an element v of any floating type,
 * shared by the cpu backend's fused kernel and the lazy backend's fused passes, so
 * that both give the same values:
 *
 *     exact        y = 0.5 v (1 + erf(v / sqrt 2))
 *                  dv = dy (0.5 (1 + erf(v / sqrt 2)) + v exp(-v^2 / 2) / sqrt(2 pi))
 *     tanh         t = tanh(k (v + a v^3)),  y = 0.5 v (1 + t)
 *                  dv = dy 0.5 ((1 + t) + v (1 - t^2) k (1 + 3 a v^2))
 */
#ifndef FLARE_CPU_GELU_H
#define FLARE_CPU_GELU_H

#include <math.h>

#define GELU_K 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A 0.044715
#define GELU_INV_SQRT_2PI 0.3989422804014327

#define GELU_TANH_TERM(type, v, tanh_fn) tanh_fn((type)GELU_K * ((v) * ((type)GELU_A * (v) * (v) + 1)))
#define GELU_CDF(type, v, erf_fn) ((type)0.5 * (erf_fn((v) * (type)M_SQRT1_2) + 1))

#define GELU_VALUE(type, v, erf_fn) ((v) * GELU_CDF(type, v, erf_fn))
#define GELU_SLOPE(type, v, erf_fn, exp_fn) \
    (GELU_CDF(type, v, erf_fn) + (v) * ((type)GELU_INV_SQRT_2PI * exp_fn((v) * (v) * (type)-0.5)))
#define GELU_TANH_VALUE(type, v, t) ((type)0.5 * (v) * (1 + (t)))
#define GELU_TANH_SLOPE(type, v, t) \
    ((type)0.5 * ((1 + (t)) + (v) * ((1 - (t) * (t)) * ((type)GELU_K * ((type)(3 * GELU_A) * (v) * (v) + 1)))))

#endif
