/* The fused activations that need libm, in float64, exactly as dmlq.activations writes them. */
#include <math.h>

#include "common.h"

static const double LOG_2 = 0.693147180559945309417232121458176568;

/* NaN gives the default NaN (positive, no payload), as dmlq.activations writes it. */
static double tanh_default_nan(double x) { return x != x ? (double)NAN : tanh(x); }

/* NumPy's npy_logaddexp, operation for operation. */
static double logaddexp(double x, double y) {
    if (x == y) return x + LOG_2;
    const double difference = x - y;
    if (difference > 0) return x + log1p(exp(-difference));
    if (difference <= 0) return y + log1p(exp(difference));
    return difference; /* NaN */
}

double dmlq_activation_libm(double x, int activation, const double *p) {
    switch (activation) {
    case DMLQ_ACT_ELU: return x >= 0 ? x : p[0] * expm1(x);
    case DMLQ_ACT_CELU: return dmlq_at_least_zero(x) + dmlq_at_most(p[0] * expm1(x / p[0]), 0.0);
    case DMLQ_ACT_SCALED_ELU: return x > 0 ? p[1] * x : p[1] * p[0] * expm1(x); /* alpha, gamma */
    case DMLQ_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case DMLQ_ACT_TANH: return tanh_default_nan(x);
    case DMLQ_ACT_SCALED_TANH: return p[0] * tanh_default_nan(p[1] * x);
    case DMLQ_ACT_SOFTPLUS: return logaddexp(0.0, p[0] * x) / p[0];
    case DMLQ_ACT_PARAMETRIC_SOFTPLUS: return p[0] * logaddexp(0.0, p[1] * x);
    case DMLQ_ACT_GELU: return 0.5 * x * (1.0 + erf(x / 1.4142135623730951));
    default: return x;
    }
}
