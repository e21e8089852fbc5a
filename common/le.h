/* le.h - little-endian field access for the fixed records of the formats.
 * Byte-wise, so it is alignment-safe and host-endianness-agnostic. */
#ifndef QP_LE_H
#define QP_LE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static inline double lef64(const uint8_t *p)
{
    uint64_t u = le64(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static inline void putf64(uint8_t *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    put64(p, u);
}

#endif
