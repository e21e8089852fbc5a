/* pack.h - the qpack subcommands. Each returns the process exit code and
 * prints its own one-line error. */
#ifndef QP_PACK_H
#define QP_PACK_H

#include "error.h"

#define QPACK_VERSION QP_VERSION /* CMake's project version (common/CMakeLists.txt) */

int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
/* resident_cmd.c: a model pinned in bpffs (docs/RESIDENT.md) */
int cmd_load(int argc, char **argv);
int cmd_unload(int argc, char **argv);
int cmd_ps(int argc, char **argv);

struct qpk_file;
/* qpack verify's second half (verify_sections.c): every section decoded and
 * its content checked as its reader will read it; one line naming the
 * section when it is not. */
int verify_sections(const struct qpk_file *f, qp_err *err);

#endif
