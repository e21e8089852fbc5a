#include "tok_mem.h"

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_up(size_t n)
{
    return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

void *tok_map(size_t size)
{
    if (size == 0 || size > SIZE_MAX / 2)
        return NULL;
    size = round_up(size);
    /* over-map by one huge page, then trim to a 2 MiB aligned window */
    char *raw = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + size + HUGE_PAGE - (p + size));
    if (tail)
        munmap(p + size, tail);
    (void)madvise(p, size, MADV_HUGEPAGE); /* a hint: fine if THP is off */
    return p;
}

void tok_unmap(void *p, size_t size)
{
    if (p)
        munmap(p, round_up(size));
}
