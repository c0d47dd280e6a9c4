/*
 * inputs.c — see inputs.h.
 */
#include "inputs.h"

#include <math.h>
#include <string.h>

#include "dsa_ref.h"

double dsa_input_uniform(dsa_rng *r, double lo, double hi) { return lo + (hi - lo) * dsa_rng_unit(r); }

double dsa_input_nonzero(dsa_rng *r, double amp) {
  double x;
  do x = -amp + 2.0 * amp * dsa_rng_unit(r);
  while (fabs(x) < amp * 1e-3);
  return x;
}

double dsa_input_log_uniform(dsa_rng *r, double lo, double hi) {
  return exp(log(lo) + (log(hi) - log(lo)) * dsa_rng_unit(r));
}

void dsa_input_bf16_amp(dsa_rng *r, uint16_t *h, size_t n, double amp) {
  for (size_t i = 0; i < n; i++) {
    uint16_t b;
    do b = dsa_float_to_bf16((float)dsa_input_nonzero(r, amp));
    while ((b & 0x7FFF) == 0);
    h[i] = b;
  }
}

uint16_t dsa_input_bf16_exp(dsa_rng *r, int emin, int erange) {
  const uint64_t x = dsa_rng_next(r);
  const uint16_t sign = (uint16_t)((x & 1) << 15);
  const uint16_t mant = (uint16_t)((x >> 1) & 0x7F);
  const uint16_t e = (uint16_t)(127 + emin + (int)((x >> 8) % (uint64_t)erange));
  return (uint16_t)(sign | (uint16_t)(e << 7) | mant);
}

void dsa_input_bf16_exp_fill(dsa_rng *r, uint16_t *h, size_t n, int emin, int erange) {
  for (size_t i = 0; i < n; i++) h[i] = dsa_input_bf16_exp(r, emin, erange);
}

void dsa_input_bytes(dsa_rng *r, uint8_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = (uint8_t)dsa_rng_next(r);
}

void dsa_input_fp8_codes(dsa_rng *r, uint8_t *h, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = dsa_rng_next(r);
    memcpy(h + i, &x, 8);
  }
  if (i < n) {
    const uint64_t x = dsa_rng_next(r);
    memcpy(h + i, &x, n - i);
  }
  for (i = 0; i < n; i++)
    if ((h[i] & 0x7F) == 0x7F) h[i] ^= 1;
}

uint8_t dsa_input_fp8_nonzero(dsa_rng *r) {
  uint8_t c;
  do c = (uint8_t)dsa_rng_next(r);
  while ((c & 0x7F) == 0 || (c & 0x7F) == 0x7F);
  return c;
}

uint8_t dsa_input_fp8_quantised(dsa_rng *r) {
  uint8_t c;
  do c = dsa_float_to_fp8_e4m3((float)dsa_input_nonzero(r, 448.0));
  while ((c & 0x7F) == 0 || (c & 0x7F) == 0x7F);
  return c;
}

void dsa_input_scales(dsa_rng *r, float *h, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * dsa_rng_unit_f32(r);
}

void dsa_input_perm(dsa_rng *r, int32_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
  for (int64_t i = n - 1; i > 0; i--) {
    const int64_t j = (int64_t)dsa_rng_below(r, (uint64_t)(i + 1));
    const int32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}
