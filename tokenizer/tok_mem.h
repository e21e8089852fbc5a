/* tok_mem.h - big zeroed mappings for the tokenizer's tables.
 *
 * Why not malloc: loading fills ~15 MB of tables, and on our VMs each fresh
 * 4 KiB page costs ~13 us to fault in (3.3 ms per MB, measured), which alone
 * would eat the 150 ms load budget. These mappings ask for transparent huge
 * pages (MADV_HUGEPAGE; THP "madvise" mode is Debian's default), 2 MiB per
 * fault (0.1 ms per MB measured). Without THP they still work, just slower.
 * Reservations are virtual (MAP_NORESERVE): only touched pages cost memory,
 * so an arena can reserve its worst case and never move.
 */
#ifndef QP_TOK_MEM_H
#define QP_TOK_MEM_H

#include <stddef.h>

/* Returns size zeroed bytes, 2 MiB aligned, or NULL. */
void *tok_map(size_t size);

/* Releases a tok_map of the same size (NULL is fine). */
void tok_unmap(void *p, size_t size);

#endif
