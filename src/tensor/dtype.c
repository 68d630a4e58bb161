/* Dtypes: names, sizes, promotion, and the 16-bit float conversions. */
#include <string.h>

#include "internal.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[FL_DTYPE_COUNT] = {
    [FL_BOOL] = {"bool", 1}, [FL_U8] = {"u8", 1},   [FL_I32] = {"i32", 4},  [FL_I64] = {"i64", 8},
    [FL_F16] = {"f16", 2},   [FL_BF16] = {"bf16", 2}, [FL_F32] = {"f32", 4}, [FL_F64] = {"f64", 8},
};

static bool valid(fl_dtype d) { return (unsigned)d < FL_DTYPE_COUNT; }

const char *fl_dtype_name(fl_dtype d) { return valid(d) ? dtypes[d].name : "invalid-dtype"; }
size_t fl_dtype_size(fl_dtype d) { return valid(d) ? dtypes[d].size : 0; }
bool fl_dtype_is_float(fl_dtype d) { return d >= FL_F16 && d <= FL_F64; }
bool fl_dtype_is_integer(fl_dtype d) { return d >= FL_U8 && d <= FL_I64; }

fl_dtype fl_promote_types(fl_dtype a, fl_dtype b)
{
    if (a == b)
        return a;
    if ((a == FL_F16 && b == FL_BF16) || (a == FL_BF16 && b == FL_F16))
        return FL_F32;
    /* u8 with a signed integer: the signed type if it holds 0..255 (i32, i64 do). */
    return a > b ? a : b;
}

fl_dtype fl__compute_dtype(fl_dtype d) { return d == FL_F16 || d == FL_BF16 ? FL_F32 : d; }

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float fl_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff;
    if (exponent == 0x1f) /* inf or nan */
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        /* zero or subnormal: value = mantissa * 2^-24 */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t fl_float_to_half(float f)
{
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
    if (abs >= 0x477ff000u) /* rounds to beyond the largest half: inf */
        return sign | 0x7c00;
    if (abs < 0x38800000u) {
        /* subnormal half or zero: round abs / 2^-24 to nearest even */
        float magnitude = bits_float(abs) * 0x1p24f;
        uint32_t m = (uint32_t)magnitude;
        float rest = magnitude - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1)))
            m++;
        return sign | (uint16_t)m;
    }
    /* normal: rebias the exponent and round the mantissa to 10 bits, nearest even */
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1);
    return sign | (uint16_t)((rounded - 0x38000000u) >> 13);
}

float fl_bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

uint16_t fl_float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a quiet nan */
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
