/* backend.c - what both backends share: the kernels' names, and which
 * program runs a matrix (backend.h). */
#include "backend.h"

const char *qp_kernel_name(enum qp_kernel k)
{
    static const char *const names[QP_K_COUNT] = {
#define QP_KERNEL_NAME(NAME, name, kernel) #name,
        QK_PROGRAMS(QP_KERNEL_NAME)
#undef QP_KERNEL_NAME
    };
    return k < QP_K_COUNT ? names[k] : "unknown";
}

/* The block programs unpack each 4-row block once for the block's
 * entries; for int4 and int6 that costs more than it saves below about
 * four entries, int8's unpack pays off from two (qp-bench-kernels MODEL
 * B compares the two ways). Either way the bits are the same. */
#define NARROW_BLOCK_MIN 4

enum qp_kernel qp_matvec_kernel(uint32_t enc, uint32_t nb)
{
    switch (enc) {
    case QK_ENC_I8G: return nb > 1 ? QP_K_MATVEC_I8_BLOCK : QP_K_MATVEC_I8;
    case QK_ENC_I4G: return nb >= NARROW_BLOCK_MIN ? QP_K_MATVEC_I4_BLOCK : QP_K_MATVEC_I4;
    case QK_ENC_I6L: return nb >= NARROW_BLOCK_MIN ? QP_K_MATVEC_I6_BLOCK : QP_K_MATVEC_I6;
    default: return QP_K_MATVEC_Q24;
    }
}
