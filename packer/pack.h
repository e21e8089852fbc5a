/* pack.h - the qpack subcommands. Each returns the process exit code and
 * prints its own one-line error. */
#ifndef QP_PACK_H
#define QP_PACK_H

#define QPACK_VERSION "0.1.0"

int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
