/*
 * inputs.h — the one generator of random inputs for the tests, the bench and the development aids
 * (host side; inputs.c): the value distributions every caller draws from, each from a dsa_rng stream
 * (rng.h), so the same seed gives the same data wherever it is drawn. The GPU-side generator for
 * large pools (inputs_gpu.cu) draws the same distributions from dsa_rng_hash.
 */
#ifndef DSA_INPUTS_H
#define DSA_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* uniform in [lo, hi): lo + (hi - lo) * dsa_rng_unit */
double dsa_input_uniform(dsa_rng *r, double lo, double hi);
/* uniform in (-amp, amp), |x| >= amp / 1000 */
double dsa_input_nonzero(dsa_rng *r, double amp);
/* exp(uniform(log lo, log hi)) */
double dsa_input_log_uniform(dsa_rng *r, double lo, double hi);
/* n non-zero bf16 values uniform in (-amp, amp) */
void dsa_input_bf16_amp(dsa_rng *r, uint16_t *h, size_t n, double amp);
/* a bf16 of random sign and mantissa with a binary exponent uniform in [emin, emin + erange) */
uint16_t dsa_input_bf16_exp(dsa_rng *r, int emin, int erange);
void dsa_input_bf16_exp_fill(dsa_rng *r, uint16_t *h, size_t n, int emin, int erange);
/* n random bytes, one draw each (its low byte) */
void dsa_input_bytes(dsa_rng *r, uint8_t *h, size_t n);
/* n e4m3 codes uniform over every code but the two NaNs (0x7F, 0xFF become +-448) */
void dsa_input_fp8_codes(dsa_rng *r, uint8_t *h, size_t n);
/* one e4m3 byte, every exponent equally likely, never zero, never NaN */
uint8_t dsa_input_fp8_nonzero(dsa_rng *r);
/* the e4m3 code of a value uniform in (-448, 448), never zero, never NaN */
uint8_t dsa_input_fp8_quantised(dsa_rng *r);
/* n float32 values uniform in [lo, hi) */
void dsa_input_scales(dsa_rng *r, float *h, size_t n, float lo, float hi);
/* a random permutation of 0 .. n - 1 (Fisher-Yates) */
void dsa_input_perm(dsa_rng *r, int32_t *p, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* DSA_INPUTS_H */
