/*
 * Random augmentations for speech: SpecAugment's masks, additive noise at a chosen
 * SNR, speed perturbation. Each is an fl_transform_fn: its draws (fl_rand) come from
 * the random stream fl_transform_dataset opens for each sample, so they depend on the
 * seed, the epoch and the sample index only, never on which worker runs them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "speech_data.h"

/* The most draws one augmentation makes: SpecAugment's 16 + 16 masks and its warp. */
#define MAX_DRAWS 66

/* count (at most MAX_DRAWS) uniform draws in [0, 1) from the current random stream,
 * on the host. */
static bool uniforms(double *u, int64_t count)
{
    if (count == 0)
        return true;
    float values[MAX_DRAWS];
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_to_host(fl_rand(FL_F32, 1, &count), values, (size_t)count * sizeof *values);
    fl_scope_end(scope);
    if (status != FL_OK)
        return false;
    for (int64_t i = 0; i < count; i++)
        u[i] = values[i];
    return true;
}

/* An integer uniform in [0, n] from a draw u in [0, 1). */
static int64_t pick(double u, int64_t n)
{
    int64_t k = (int64_t)floor(u * (double)(n + 1));
    return k > n ? n : k;
}

/* ---- SpecAugment ------------------------------------------------------------------- */

fl_spec_augment_options fl_spec_augment_options_default(void)
{
    return (fl_spec_augment_options){
        .freq_masks = 2, .freq_width = 27, .time_masks = 2, .time_width = 100, .time_ratio = 1.0, .mask_mean = false,
        .time_warp = 0};
}

/* Time warping: frame c moves to w = c + d; output frame j reads input position s(j),
 * linear on [0, w] (to [0, c]) and on [w, T - 1] (to [c, T - 1]), interpolated
 * linearly between the frames either side of s. */
static fl_tensor *time_warp(const fl_tensor *x, int64_t c, int64_t d)
{
    int64_t frames = fl_dim(x, 0), w = c + d;
    int64_t *lower = malloc((size_t)frames * sizeof *lower), *upper = malloc((size_t)frames * sizeof *upper);
    double *weight = malloc((size_t)frames * sizeof *weight);
    if (!lower || !upper || !weight) {
        free(lower), free(upper), free(weight);
        return fl_error(FL_ERR_MEMORY, "fl_spec_augment", "cannot allocate the warp of %lld frames",
                        (long long)frames);
    }
    for (int64_t j = 0; j < frames; j++) {
        double s = j <= w ? (double)j * (double)c / (double)w
                          : (double)c + (double)(j - w) * (double)(frames - 1 - c) / (double)(frames - 1 - w);
        int64_t i = (int64_t)floor(s);
        if (i > frames - 1)
            i = frames - 1;
        lower[j] = i;
        upper[j] = i + 1 < frames ? i + 1 : i;
        weight[j] = s - (double)i;
    }
    const char *backend = fl_backend_name(x);
    fl_tensor *at0 = fl_to_backend(fl_from_data(lower, FL_I64, 1, &frames), backend);
    fl_tensor *at1 = fl_to_backend(fl_from_data(upper, FL_I64, 1, &frames), backend);
    fl_tensor *t = fl_to_backend(fl_cast(fl_from_data(weight, FL_F64, FL_SHAPE(frames, 1)), fl_dtype_of(x)), backend);
    free(lower), free(upper), free(weight);
    fl_tensor *a = fl_index_select(x, 0, at0), *b = fl_index_select(x, 0, at1);
    return fl_add(a, fl_mul(fl_sub(b, a), t));
}

fl_tensor *fl_spec_augment(const fl_tensor *features, void *options)
{
    static const char fn[] = "fl_spec_augment";
    if (fl_null_args(fn, 1, features))
        return NULL;
    fl_spec_augment_options o = options ? *(const fl_spec_augment_options *)options
                                        : fl_spec_augment_options_default();
    char d[FL_DESC_SIZE];
    if (fl_ndim(features) != 2 || !fl_dtype_is_float(fl_dtype_of(features)))
        return fl_error(FL_ERR_SHAPE, fn, "needs float features [T, F] (frames by channels), got %s",
                        fl_describe(features, d));
    if (o.freq_masks < 0 || o.freq_masks > 16 || o.time_masks < 0 || o.time_masks > 16 || o.freq_width < 0 ||
        o.time_width < 0 || !(o.time_ratio >= 0 && o.time_ratio <= 1) || o.time_warp < 0)
        return fl_error(FL_ERR_VALUE, fn, "needs 0 to 16 masks of each kind, non-negative widths, a time_ratio "
                        "in [0, 1] and a non-negative time_warp; got %d frequency masks of up to %d, %d time masks "
                        "of up to %d, time_ratio %g, time_warp %d",
                        o.freq_masks, o.freq_width, o.time_masks, o.time_width, o.time_ratio, o.time_warp);
    int64_t frames = fl_dim(features, 0), channels = fl_dim(features, 1);
    double u[MAX_DRAWS];
    /* The warp's two draws come first, and always when it is asked for, so that the
     * masks' draws do not depend on whether a sample was long enough to warp. */
    int warp_draws = o.time_warp > 0 ? 2 : 0;
    if (!uniforms(u, warp_draws + 2 * (int64_t)(o.freq_masks + o.time_masks)))
        return NULL;
    int64_t cells = frames * channels;
    bool *mask = calloc((size_t)(cells > 0 ? cells : 1), sizeof *mask);
    if (!mask)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a mask of %s", fl_describe(features, d));
    const double *draw = u + warp_draws;
    int64_t fmax = o.freq_width < channels ? o.freq_width : channels;
    for (int k = 0; k < o.freq_masks; k++, draw += 2) {
        int64_t f = pick(draw[0], fmax), f0 = pick(draw[1], channels - f);
        for (int64_t t = 0; t < frames; t++)
            for (int64_t c = f0; c < f0 + f; c++)
                mask[t * channels + c] = true;
    }
    int64_t tmax = (int64_t)floor(o.time_ratio * (double)frames);
    if (tmax > o.time_width)
        tmax = o.time_width;
    for (int k = 0; k < o.time_masks; k++, draw += 2) {
        int64_t t = pick(draw[0], tmax), t0 = pick(draw[1], frames - t);
        memset(mask + t0 * channels, 1, (size_t)(t * channels) * sizeof *mask);
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *where = fl_to_backend(fl_from_data(mask, FL_BOOL, 2, fl_shape(features)), fl_backend_name(features));
    free(mask);
    int64_t w = o.time_warp;
    if (w > 0 && frames > 2 * w) {
        int64_t c = w + pick(u[0], frames - 2 * w - 1), shift = pick(u[1], 2 * (w - 1)) - (w - 1);
        if (shift != 0)
            features = time_warp(features, c, shift);
    }
    fl_tensor *value = o.mask_mean ? fl_mean(features, FL_ALL_AXES, false)
                                   : fl_new_scalar(features, 0, fl_dtype_of(features));
    return fl_scope_return(scope, fl_where(where, value, features));
}

/* ---- additive noise ---------------------------------------------------------------- */

fl_noise_options fl_noise_options_default(void)
{
    return (fl_noise_options){.snr_low = 10, .snr_high = 30, .noise = NULL};
}

fl_tensor *fl_add_noise(const fl_tensor *audio, void *options)
{
    static const char fn[] = "fl_add_noise";
    if (fl_null_args(fn, 1, audio))
        return NULL;
    fl_noise_options o = options ? *(const fl_noise_options *)options : fl_noise_options_default();
    char d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(fl_dtype_of(audio)))
        return fl_error(FL_ERR_DTYPE, fn, "needs float audio, got %s", fl_describe(audio, d));
    if (!isfinite(o.snr_low) || !isfinite(o.snr_high) || o.snr_low > o.snr_high)
        return fl_error(FL_ERR_VALUE, fn, "needs finite snr_low <= snr_high (dB), got %g and %g", o.snr_low,
                        o.snr_high);
    if (o.noise && (fl_ndim(o.noise) != 1 || fl_numel(o.noise) == 0 || !fl_dtype_is_float(fl_dtype_of(o.noise))))
        return fl_error(FL_ERR_SHAPE, fn, "the noise must be a non-empty 1-D float signal, got %s",
                        fl_describe(o.noise, d));
    double u[2];
    if (!uniforms(u, 2))
        return NULL;
    double snr = o.snr_low + u[0] * (o.snr_high - o.snr_low);
    int64_t n = fl_numel(audio);
    fl_scope scope = fl_scope_begin();
    fl_dtype dtype = fl_dtype_of(audio);
    const char *backend = fl_backend_name(audio);
    fl_tensor *noise;
    if (!o.noise) {
        noise = fl_to_backend(fl_randn(dtype, fl_ndim(audio), fl_shape(audio)), backend);
    } else {
        /* n samples of the signal from a random offset, wrapping round its end. */
        int64_t m = fl_numel(o.noise), offset = pick(u[1], m - 1);
        int64_t *at = malloc((size_t)(n ? n : 1) * sizeof *at);
        if (!at) {
            fl_scope_end(scope);
            return fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld indices", (long long)n);
        }
        for (int64_t i = 0; i < n; i++)
            at[i] = (offset + i) % m;
        fl_tensor *index = fl_to_backend(fl_from_data(at, FL_I64, 1, &n), backend);
        free(at);
        noise = fl_reshape(fl_cast(fl_index_select(fl_to_backend(o.noise, backend), 0, index), dtype),
                           fl_ndim(audio), fl_shape(audio));
    }
    double signal = fl_item(fl_mean(fl_square(fl_cast(audio, FL_F64)), FL_ALL_AXES, false));
    double power = fl_item(fl_mean(fl_square(fl_cast(noise, FL_F64)), FL_ALL_AXES, false));
    if (isnan(signal) || isnan(power)) {
        fl_scope_end(scope);
        return NULL;
    }
    if (signal == 0 || n == 0)
        return fl_scope_return(scope, fl_copy(audio));
    if (power == 0) {
        fl_scope_end(scope);
        return fl_error(FL_ERR_VALUE, fn, "the noise is silent where it is added: no SNR can be reached");
    }
    double scale = sqrt(signal / (power * pow(10, snr / 10)));
    return fl_scope_return(scope, fl_add(audio, fl_mul_scalar(noise, scale)));
}

/* ---- speed perturbation ------------------------------------------------------------ */

fl_speed_options fl_speed_options_default(void)
{
    return (fl_speed_options){.count = 3, .factors = {0.9, 1.0, 1.1}};
}

/* The rate audio is taken to have when played factor times faster: the ratio is
 * carried by two integer rates for fl_audio_resample, to 6 significant digits. */
#define SPEED_RATE 1000000

fl_tensor *fl_speed_perturb(const fl_tensor *audio, void *options)
{
    static const char fn[] = "fl_speed_perturb";
    if (fl_null_args(fn, 1, audio))
        return NULL;
    const fl_speed_options *given = options;
    fl_speed_options o = given ? *given : fl_speed_options_default();
    char d[FL_DESC_SIZE];
    if (fl_ndim(audio) != 1 || !fl_dtype_is_float(fl_dtype_of(audio)))
        return fl_error(FL_ERR_SHAPE, fn, "needs 1-D float audio [samples], got %s", fl_describe(audio, d));
    if (o.count < 1 || o.count > FL_SPEED_MAX_FACTORS)
        return fl_error(FL_ERR_VALUE, fn, "needs 1 to %d factors, got %d", FL_SPEED_MAX_FACTORS, o.count);
    for (int i = 0; i < o.count; i++)
        if (!(o.factors[i] >= 1.0 / 16 && o.factors[i] <= 16))
            return fl_error(FL_ERR_VALUE, fn, "factors[%d] = %g is outside [1/16, 16]", i, o.factors[i]);
    double u;
    if (!uniforms(&u, 1))
        return NULL;
    int k = (int)floor(u * o.count);
    double factor = o.factors[k < o.count ? k : o.count - 1];
    int64_t n = fl_numel(audio);
    if (factor == 1 || n == 0)
        return fl_copy(audio);
    float *samples = malloc((size_t)n * sizeof *samples), *out = NULL;
    if (!samples)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld samples", (long long)n);
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_to_host(fl_cast(audio, FL_F32), samples, (size_t)n * sizeof *samples);
    int64_t count = 0;
    if (status == FL_OK)
        status = fl_audio_resample(samples, n, (int)lround(factor * SPEED_RATE), SPEED_RATE, &out, &count);
    free(samples);
    fl_tensor *result = NULL;
    if (status == FL_OK && count == 0)
        fl_error(FL_ERR_VALUE, fn, "%lld samples at speed %g leave none", (long long)n, factor);
    else if (status == FL_OK)
        result = fl_cast(fl_to_backend(fl_from_data(out, FL_F32, 1, &count), fl_backend_name(audio)),
                         fl_dtype_of(audio));
    free(out);
    return fl_scope_return(scope, result);
}
