/* The VNNI convolutions' per-channel output terms (conv_output.h). */
#include "conv_output.h"

/* Whether float32 estimates y = float32(acc) * factor of sums up to `bound` in magnitude are usable:
 * a normal factor within [2**-60, 2**60] (so its rounding errors are relative ones) and |y| < 2**30
 * (so that round(y) + y_zp converts and adds in int32; beyond 1024 it saturates anyway). */
static int estimable(float factor, double bound) {
    const double magnitude = fabs((double)factor);
    return magnitude >= 0x1p-60 && magnitude <= 0x1p60 && bound * magnitude < 0x1p30;
}

/* Whether a (finite, nonzero) value is a power of two, of either sign. */
static int power_of_two(double value) {
    int exponent;
    return isfinite(value) && fabs(frexp(value, &exponent)) == 0.5;
}

int conv_output_init(conv_output *o, const dmlq_conv_problem *p, const int32_t *weight_sums, ptrdiff_t k) {
    const ptrdiff_t m_count = p->out_channels;
    memset(o, 0, sizeof *o);
    o->channels = malloc(sizeof(conv_channel) * (size_t)(m_count ? m_count : 1));
    if (!o->channels) return -1;
    o->requantized = p->y_type != DMLQ_I32;
    o->reciprocal = p->reciprocal;
    o->x_zero = conv_x_zero(p);
    o->x_scale = (double)p->x_scale;
    o->divisor = p->reciprocal ? (double)(1.0f / p->y_scale) : (double)p->y_scale;
    o->y_zero = (double)p->y_zero_point;
    o->y_zero_point = (int32_t)p->y_zero_point;
    o->lo = p->y_type == DMLQ_I8 ? -128.0 : 0.0;
    o->hi = p->y_type == DMLQ_I8 ? 127.0 : 255.0;
    for (ptrdiff_t m = 0; m < m_count; m++) {
        conv_channel *c = &o->channels[m];
        c->w_zero = conv_w_prime(p, (uint8_t)p->w_zero_point[m]);
        o->any_w_zero |= c->w_zero != 0;
        const int64_t bias = o->requantized && p->bias ? p->bias[m] : 0;
        const int64_t constant = bias - (int64_t)o->x_zero * weight_sums[m] + (int64_t)k * o->x_zero * c->w_zero;
        c->constant = (int32_t)(uint32_t)(uint64_t)constant;
        if (!o->requantized) continue;
        c->w_scale = (double)p->w_scale[m];
        const double scale = o->x_scale * c->w_scale;
        c->factor = (float)(o->reciprocal ? scale * o->divisor : scale / o->divisor);
        c->estimable = estimable(c->factor, (double)k * 65025.0 + fabs((double)bias));
        c->exact = c->estimable && power_of_two(scale) && power_of_two(o->divisor);
    }
    return 0;
}

void conv_output_free(conv_output *o) {
    free(o->channels);
    o->channels = NULL;
}
