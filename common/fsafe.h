/* fsafe.h - files opened and written safely.
 *
 * Inputs. fs_open_input() opens a file that must be a regular file. It
 * opens with O_NONBLOCK, so that a FIFO or a device is refused at once
 * ("PATH: not a regular file (a fifo)") instead of blocking the open or the
 * first read forever, then clears O_NONBLOCK. fs_read_input() reads such a
 * file whole.
 *
 * Outputs. A file is written beside its destination and published whole,
 * or not at all:
 *   fs_out_check()   before any work: refuses a destination that exists and
 *                    is not a regular file (a directory, FIFO, device,
 *                    socket or symbolic link: replacing it would destroy it),
 *                    whose folder is missing or not writable, or that is one
 *                    of the inputs (same device and inode, so hard links and
 *                    symbolic links to an input count too);
 *   fs_out_open()    the same check without inputs, then creates the file
 *                    with O_TMPFILE in the destination's folder: it has no
 *                    name, nothing can be planted in its way, and it vanishes
 *                    with the process however that ends (SIGKILL included).
 *                    Where the file system refuses O_TMPFILE, it creates
 *                    .NAME.partial-PID-RANDOM with O_CREAT|O_EXCL|O_NOFOLLOW,
 *                    RANDOM 64 bits from getrandom(): no name to predict, and
 *                    an existing file or link at the name is never followed;
 *   fs_out_commit()  fsyncs, gives an unnamed file a random name of the same
 *                    form (linkat), renames it over the destination and
 *                    fsyncs the folder; then removes the named partial files
 *                    of this destination whose writer process is gone;
 *   fs_out_abort()   closes and removes the file; the destination is
 *                    untouched.
 * A signal handler that ends the process calls fs_out_remove_temps()
 * (async-signal-safe) first: it unlinks every named partial file of an open
 * output. Outputs are opened, committed and aborted from one thread.
 */
#ifndef QP_FSAFE_H
#define QP_FSAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "error.h"

/* Opens path read-only; it must be a regular file. Returns the descriptor
 * (O_CLOEXEC, blocking) or -1. st, when not NULL, gets its fstat. */
int fs_open_input(const char *path, struct stat *st, qp_err *err);

/* Reads the regular file at path whole, NUL-terminated (*len excludes the
 * NUL); refuses one larger than limit bytes. Free *text with free(). */
int fs_read_input(const char *path, size_t limit, char **text, size_t *len, qp_err *err);

/* Refuses dest as described above. inputs: NULL or a NULL-terminated list
 * of paths, each a file or a folder (a folder stands for every file
 * directly inside it). */
int fs_out_check(const char *dest, const char *const *inputs, qp_err *err);

struct fs_out {
    char *dest;               /* the destination as given */
    char *base;               /* its name inside its folder */
    int dir_fd;               /* its folder */
    int fd;                   /* the file being written */
    int slot;                 /* its named partial file in the signal-safe list, -1 none */
    bool unnamed;             /* created with O_TMPFILE */
};

enum {
    FS_OUT_NAMED = 1,         /* skip O_TMPFILE (for tests of the fallback) */
};

/* Creates the file (mode 0644 less the umask); o->fd takes the bytes. */
int fs_out_open(struct fs_out *o, const char *dest, unsigned flags, qp_err *err);

/* Writes len bytes at the file position (EINTR and short writes retried). */
int fs_out_write(struct fs_out *o, const void *data, size_t len, qp_err *err);

/* Publishes the file over the destination; on failure removes it. Either
 * way o is closed afterwards. */
int fs_out_commit(struct fs_out *o, qp_err *err);

/* Closes o and removes its file; safe to call twice. */
void fs_out_abort(struct fs_out *o);

/* fs_out_check + open + write + commit: data becomes the file dest. */
int fs_write_file(const char *dest, const void *data, size_t len, const char *const *inputs,
                  qp_err *err);

/* Unlinks the named partial file of every open output. Async-signal-safe. */
void fs_out_remove_temps(void);

/* The named partial files of dest that fs_out creates start with
 * ".NAME.partial-" (NAME the destination's file name, cut to fit NAME_MAX):
 * writes that prefix into out (cap bytes). For tests. */
void fs_out_partial_prefix(const char *dest, char *out, size_t cap);

#endif
