/* show.c - text read from a container, made safe to show, and sizes (see show.h). */
#include "show.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* The next code point of s[0..len): its length in bytes, and *cp, or -1 for a
 * byte that does not start well-formed UTF-8 (consumed alone). */
static size_t next_code_point(const char *s, size_t len, int32_t *cp)
{
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, cp);
    if (n > 0)
        return (size_t)n;
    *cp = -1;
    return 1;
}

void show_text(FILE *f, const char *s, int width)
{
    size_t len = strlen(s);
    int shown = 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t n = next_code_point(s + i, len - i, &cp);
        if (cp < 0x20 || cp == 0x7f) /* C0, DEL, and a byte that is not UTF-8 (-1) */
            shown += fprintf(f, "\\x%02x", (unsigned char)s[i]);
        else if (cp >= 0x80 && cp <= 0x9f) /* C1: U+009B is a CSI to some terminals */
            shown += fprintf(f, "\\u%04x", (unsigned)cp);
        else if (cp == '\\')
            shown += fprintf(f, "\\\\");
        else {
            fwrite(s + i, 1, n, f);
            shown++;
        }
        i += n;
    }
    for (; shown < width; shown++)
        fputc(' ', f);
}

char *show_json(const char *json)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t len = strlen(json);
    /* the longest growth: 1 byte to 6 ("\u007f") */
    char *out = malloc(len * 6 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t n = next_code_point(json + i, len - i, &cp);
        if (cp < 0) {
            memcpy(o, replacement, 3);
            o += 3;
        } else if (cp >= 0x7f && cp <= 0x9f) {
            o += sprintf(o, "\\u%04x", (unsigned)cp);
        } else {
            memcpy(o, json + i, n);
            o += n;
        }
        i += n;
    }
    *o = '\0';
    return out;
}

void show_size(char *out, size_t n, double bytes)
{
    if (bytes < 1e6)
        snprintf(out, n, "%.1f kB", bytes / 1e3);
    else if (bytes < 1e9)
        snprintf(out, n, "%.1f MB", bytes / 1e6);
    else
        snprintf(out, n, "%.2f GB", bytes / 1e9);
}
