/* show.h - text read from a container, made safe to show. A container is
 * untrusted input: its provenance (the packer's JSON, with the source
 * folder's name in it) may hold terminal escape sequences or bytes that are
 * not UTF-8, and `qpack info` must neither replay the one on a terminal nor
 * print the other into JSON. And sizes in the unit that reads best.
 */
#ifndef QP_SHOW_H
#define QP_SHOW_H

#include <stdio.h>

/* Writes s to f for a person: control characters (C0, DEL) and bytes that
 * are not well-formed UTF-8 become \xNN, C1 controls \u0080..\u009f, a
 * backslash \\; everything else as it is. Pads with spaces to width
 * characters (0: no padding). */
void show_text(FILE *f, const char *s, int width);

/* JSON text as cJSON prints it (C0 controls inside strings already
 * escaped; other bytes copied, checked or not) made valid and inert: each
 * byte that is not part of well-formed UTF-8 becomes U+FFFD, DEL and C1
 * controls \u007f..\u009f. Outside strings cJSON prints ASCII only, so
 * every change lands inside a string. A new string (free it), or NULL when
 * out of memory. */
char *show_json(const char *json);

/* bytes in the SI unit that fits its size, three figures or so: "123.4 kB",
 * "45.6 MB", "2.35 GB" (a 2.2 MB file is not "0.00 GB"). */
void show_size(char *out, size_t n, double bytes);

#endif
