/* The quantized add's verdicts: whether a level's division-free route is exact for a parameter set.
 *
 * With per-tensor parameters an output depends only on its (a, b) pair, so one comparison over all
 * 65,536 pairs (tens of microseconds) settles a parameter set for every later call; the last few
 * verdicts are kept, as models reuse a handful of parameter sets. A verdict belongs to a level as well
 * as to its row table: levels that share a table (avx512 and avx512_vnni) verify apart, so no level
 * ever sees a verdict another level found.
 */
#include "common.h"

enum { VERDICTS = 16, VERIFY_MINIMUM = 1 << 16 };

typedef struct {
    int level;
    const dmlq_row_table *rows;
    dmlq_qadd_params params;
    int corrected;
} verdict;

static verdict verdicts[VERDICTS];
static int verdict_count, next_verdict;

static int same_bits(float x, float y) { return memcmp(&x, &y, sizeof x) == 0; }

static int same_parameters(const dmlq_qadd_params *x, const dmlq_qadd_params *y) {
    return x->a_signed == y->a_signed && x->b_signed == y->b_signed && x->out_signed == y->out_signed &&
           x->a_zero_point == y->a_zero_point && x->b_zero_point == y->b_zero_point &&
           same_bits(x->a_scale, y->a_scale) && same_bits(x->b_scale, y->b_scale) &&
           same_bits(x->out_scale, y->out_scale) && same_bits(x->out_zero_point, y->out_zero_point) &&
           x->reciprocal == y->reciprocal && same_bits(x->lo, y->lo) && same_bits(x->hi, y->hi);
}

static const verdict *cached_verdict(int level, const dmlq_row_table *rows, const dmlq_qadd_params *params) {
    for (int i = 0; i < verdict_count; i++)
        if (verdicts[i].level == level && verdicts[i].rows == rows && same_parameters(&verdicts[i].params, params))
            return &verdicts[i];
    return NULL;
}

static void remember(int level, const dmlq_row_table *rows, const dmlq_qadd_params *params, int corrected) {
    verdicts[next_verdict] = (verdict){level, rows, *params, corrected};
    next_verdict = (next_verdict + 1) % VERDICTS;
    if (verdict_count < VERDICTS) verdict_count++;
}

int dmlq_qadd_corrected(const dmlq_row_table *rows, const dmlq_qadd_params *params, ptrdiff_t elements) {
    if (!rows->corrected_qadd_exact || params->reciprocal) return 0;
    const int level = dmlq_level();
    const verdict *known = cached_verdict(level, rows, params);
    if (known) return known->corrected;
    if (elements < VERIFY_MINIMUM) return 0;
    const int corrected = rows->corrected_qadd_exact(params);
    remember(level, rows, params, corrected);
    return corrected;
}

void dmlq_qadd_forget_verdicts(void) { verdict_count = next_verdict = 0; }
