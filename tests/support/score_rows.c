/*
 * score_rows.c — see score_rows.h.
 */
#include "score_rows.h"

#include <math.h>
#include <stdint.h>

#include "gpu_harness.h"

const char *const k_row_kind_name[R_NUM_KINDS] = {"random", "negative", "all-equal", "few-values",
                                                  "NaN/-inf", "mostly-NaN", "all-NaN", "narrow"};

/* Any float32 of very different magnitudes and both signs, non-zero; rarely subnormal or +inf. */
static float rng_score(void) {
  double u = rng_unit();
  float mag;
  if (u < 0.005) mag = (float)rng_uniform(1e-44, 1e-39); /* subnormal */
  else if (u < 0.006) return INFINITY;
  else mag = (float)rng_log_uniform(1e-12, 1e12);
  if (mag == 0.0f) mag = 1e-40f;
  return rng_below(2) ? mag : -mag;
}

static float rng_nan(void) {
  /* NaNs of both signs and several payloads: all rank below -inf. */
  static const uint32_t nans[4] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu};
  return f32_of_bits(nans[rng_below(4)]);
}

void fill_score_row(float *row, int n, int kind) {
  static const float few[5] = {-2.0f, -1.0f, 0.5f, 3.0f, 3.0f};
  for (int i = 0; i < n; i++) {
    float v = rng_score();
    switch (kind) {
      case R_NEG: v = -fabsf(v); break;
      case R_EQUAL: v = 0.75f; break;
      case R_FEW: v = few[rng_below(5)]; break;
      case R_NAN_INF: {
        double u = rng_unit();
        if (u < 0.1) v = rng_nan();
        else if (u < 0.2) v = -INFINITY;
        break;
      }
      case R_MOSTLY_NAN: {
        double u = rng_unit();
        if (u < 0.93) v = rng_nan();
        else if (u < 0.96) v = -INFINITY;
        break;
      }
      case R_ALL_NAN: v = rng_nan(); break;
      case R_NARROW: v = 1.0f + (float)rng_below(1 << 17) * (1.0f / (1 << 20)); break;
      default: break;
    }
    row[i] = v;
  }
}
