/*
 * rng.h — the one random number generator of the tests, the bench and the development aids
 * (header-only, host and device code):
 *   dsa_rng_make / dsa_rng_next   xorshift64* streams (host), each seeded from (seed, stream) so
 *                                 every buffer of a run draws its own sequence, reproducibly;
 *   dsa_rng_hash / dsa_rng_hash4  the splitmix64 mix of (seed, stream, index...) for data made in
 *                                 parallel on the GPU (element i of stream s is hash(seed, s, i)).
 * Quality enough for test data; nothing here is for cryptography.
 */
#ifndef DSA_RNG_H
#define DSA_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define DSA_RNG_FN static __host__ __device__ __forceinline__
#else
#define DSA_RNG_FN static inline
#endif

typedef struct {
  uint64_t s; /* never 0 */
} dsa_rng;

/* splitmix64's finaliser of a linear combination of the inputs */
DSA_RNG_FN uint64_t dsa_rng_hash4(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + a * 0xBF58476D1CE4E5B9ull +
               b * 0x94D049BB133111EBull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
DSA_RNG_FN uint64_t dsa_rng_hash(uint64_t seed, uint64_t stream, uint64_t i) { return dsa_rng_hash4(seed, stream, i, 0); }

/* A stream from (seed, stream). */
DSA_RNG_FN dsa_rng dsa_rng_make(uint64_t seed, uint64_t stream) {
  dsa_rng r;
  r.s = dsa_rng_hash4(seed, stream, 0, 0);
  if (!r.s) r.s = 1;
  return r;
}
/* A stream from a raw state (0 is replaced: xorshift never leaves 0). */
DSA_RNG_FN dsa_rng dsa_rng_from_state(uint64_t s) {
  dsa_rng r;
  r.s = s ? s : 1;
  return r;
}

/* xorshift64* */
DSA_RNG_FN uint64_t dsa_rng_next(dsa_rng *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, 1): 53 bits (double), 24 bits (float) */
DSA_RNG_FN double dsa_rng_unit(dsa_rng *r) { return (double)(dsa_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
DSA_RNG_FN float dsa_rng_unit_f32(dsa_rng *r) { return (float)(dsa_rng_next(r) >> 40) * (1.0f / 16777216.0f); }
/* uniform in [0, n), n >= 1 */
DSA_RNG_FN uint64_t dsa_rng_below(dsa_rng *r, uint64_t n) { return dsa_rng_next(r) % n; }

#endif /* DSA_RNG_H */
