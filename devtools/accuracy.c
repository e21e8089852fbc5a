/* qp-accuracy - how far a packed model's logits are from the float64
 * reference computed from the original checkpoint, at every position of
 * several seeded random prompts: max and RMS logit error, mean and max KL
 * divergence KL(ref || ours), top-1 agreement. A measuring tool for
 * scripts/accuracy.sh, not a test.
 *
 *   qp-accuracy --ref DIR MODEL.qpk [--backend bpf|emu] [--prompts K]
 *               [--positions N] [--seed S]
 *   qp-accuracy --ref DIR --kv-bits K:V [--k-scale flat|norm|importance] ...
 *
 * The second form measures a floor instead of a container: the reference
 * itself with its K and V cache rounded to K and V bits (ref_round_kv), the
 * error any cache of that width brings before any other approximation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qeval.h"        /* qe_acc: the statistics qeval reports */
#include "ref.h"
#include "engine.h"

static const char *const k_scale_names[] = {[REF_K_FLAT] = "flat", [REF_K_NORM] = "norm",
                                             [REF_K_IMPORTANCE] = "importance"};

/* --k-scale NAME: the enum ref_k_scale, or -1 */
static int k_scale_of(const char *name)
{
    for (int i = 0; i < (int)(sizeof k_scale_names / sizeof *k_scale_names); i++)
        if (!strcmp(name, k_scale_names[i]))
            return i;
    return -1;
}

static int fail(const char *what, const qp_err *err)
{
    fprintf(stderr, "qp-accuracy: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *ref_dir = NULL, *model = NULL;
    qpack_backend backend = QPACK_BACKEND_BPF;
    uint32_t prompts = 4, positions = 16;
    uint64_t seed = 1;
    int k_bits = -1, v_bits = -1;
    int k_scale = REF_K_NORM;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ref") && i + 1 < argc)
            ref_dir = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = !strcmp(argv[++i], "emu") ? QPACK_BACKEND_EMU : QPACK_BACKEND_BPF;
        else if (!strcmp(argv[i], "--prompts") && i + 1 < argc)
            prompts = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--positions") && i + 1 < argc)
            positions = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-bits") && i + 1 < argc && sscanf(argv[i + 1], "%d:%d", &k_bits, &v_bits) == 2 &&
                 k_bits >= 0 && k_bits <= 52 && v_bits >= 0 && v_bits <= 52)
            i++;
        else if (!strcmp(argv[i], "--k-scale") && i + 1 < argc && (k_scale = k_scale_of(argv[i + 1])) >= 0)
            i++;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else {
            fprintf(stderr, "usage: qp-accuracy --ref DIR MODEL.qpk [--backend bpf|emu] [--prompts K] "
                            "[--positions N] [--seed S]\n"
                            "       qp-accuracy --ref DIR --kv-bits K:V [--k-scale flat|norm|importance] ...\n");
            return 2;
        }
    }
    bool floor_only = k_bits >= 0;
    if (!ref_dir || !prompts || !positions || (!model && !floor_only) || (model && floor_only)) {
        fprintf(stderr, "qp-accuracy: need --ref DIR and either MODEL.qpk or --kv-bits\n");
        return 2;
    }
    struct qp_engine ours, ref;
    qp_err err = {{0}};
    qpack_model_params o = {.backend = backend, .ctx = positions, .threads = 2};
    const char *path = model;
    char label[128];
    if (floor_only) {
        o = (qpack_model_params){.backend = QPACK_BACKEND_REF, .ctx = positions, .threads = 2};
        path = ref_dir;
        snprintf(label, sizeof label, "K %d bits (%s), V %d bits", k_bits, k_scale_names[k_scale], v_bits);
        model = label;
    }
    if (qp_engine_open(&ours, path, &o, 0, &err))
        return fail(model, &err);
    if (floor_only)
        ref_round_kv(ours.ref, k_bits, v_bits, (enum ref_k_scale)k_scale);
    o = (qpack_model_params){.backend = QPACK_BACKEND_REF, .ctx = positions, .threads = 2};
    if (qp_engine_open(&ref, ref_dir, &o, 0, &err))
        return fail(ref_dir, &err);
    struct qe_acc t = {0};
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t p = 0; p < prompts; p++) {
        for (uint32_t pos = 0; pos < positions; pos++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            uint32_t tok = (uint32_t)(rng % ours.vocab), top;
            if (qp_engine_step(&ours, tok, pos, true, &top, &err) || qp_engine_step(&ref, tok, pos, true, &top, &err))
                return fail("step", &err);
            qe_acc_add(&t, ref.logits, ours.logits, ours.vocab);
        }
    }
    const char *kind = floor_only ? "rounded float64 reference" : qp_backend_name(backend);
    printf("%s (%s) vs float64 reference, %u prompts x %u positions:\n", model, kind, prompts, positions);
    printf("  max logit error %.3g, mean abs %.3g, rms %.3g\n", t.max_err, qe_acc_mae(&t), qe_acc_rms(&t));
    printf("  KL divergence mean %.3g, max %.3g\n", qe_acc_kl_mean(&t), t.max_kl);
    printf("  top-1 agreement %llu/%llu\n", (unsigned long long)t.top1, (unsigned long long)t.positions);
    qp_engine_close(&ours);
    qp_engine_close(&ref);
    return 0;
}
