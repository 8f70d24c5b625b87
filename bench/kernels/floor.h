/* floor.h: what floorbench.c takes from floor_avx2.c (which it calls only
 * after checking the CPU has AVX2 and FMA). */
#ifndef SPECULA_BENCH_FLOOR_H
#define SPECULA_BENCH_FLOOR_H

/* tokens per pass: a 5-token verification, the measure of the target */
#define FLOOR_NT 5

/* the core clock in GHz, from a chain of dependent vpaddd */
double floor_clock_ghz(void);
/* cycles per 8 rows x 32 weights x token of the packed Q4_K tile's inner
 * loop alone, at clock ghz; unpack: with the nibble split */
double floor_q4_K_cycles(int unpack, double ghz);

#endif
