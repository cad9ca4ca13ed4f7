// half.h: the scalar IEEE binary16 → binary32 conversion of the block
// scales quant.c and kquant.c share; not part of what the Go side binds
// (kernels.h is).
#ifndef DLMCACHE_CPU_HALF_H
#define DLMCACHE_CPU_HALF_H

#include <stdint.h>
#include <string.h>

// half_to_float is IEEE binary16 → binary32, exactly (subnormals, ±Inf,
// NaN included); one per block, so scalar.
static inline float half_to_float(uint16_t h) {
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	uint32_t bits;
	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else {
			int e = -14;
			while (!(man & 0x400)) {
				man <<= 1;
				e--;
			}
			bits = sign | (uint32_t)(e + 127) << 23 | (man & 0x3ff) << 13;
		}
	} else if (exp == 0x1f) {
		bits = sign | 0x7f800000u | man << 13;
	} else {
		bits = sign | (exp + 127 - 15) << 23 | man << 13;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

// half_at is the little-endian binary16 at p as a float32.
static inline float half_at(const uint8_t *p) { return half_to_float((uint16_t)(p[0] | p[1] << 8)); }

#endif
