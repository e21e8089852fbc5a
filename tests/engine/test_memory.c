/* test_memory.c - the memory a model's maps need, checked before any map
 * exists (engine/memory.h): a host too small for them gets one line with
 * the figures and QP_E_MEMORY before the checksum pass and before any map
 * or program, and the default context is the largest multiple of 256
 * positions (an attention chunk) whose maps fit MemAvailable less the reserve.
 * QP_MEM_AVAILABLE stands in for MemAvailable. A load the kernel refuses
 * with E2BIG is named as the size limit it is, not as memory. No root
 * needed: the refusal comes before anything touches BPF, and the context
 * rule runs on emu. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "memory.h"
#include "plan.h"
#include "engine.h"
#include "qp_test.h"

#define MAX_POS 2048
#define SLOTS 2

static char qpk[128];

static void setup(void)
{
    char args[64];
    snprintf(args, sizeof args, "--preset tiny --max-pos %d --seed 3", MAX_POS);
    snprintf(qpk, sizeof qpk, "%s", qp_test_model("ckpt", args, ""));
}

static void teardown(void)
{
    remove_dir();
    unsetenv("QP_MEM_AVAILABLE");
}

static void set_available(uint64_t bytes)
{
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)bytes);
    setenv("QP_MEM_AVAILABLE", v, 1);
}

static int progress_calls;

static void count_progress(void *user, qpack_load_phase phase, uint64_t done, uint64_t total)
{
    (void)user, (void)phase, (void)done, (void)total;
    progress_calls++;
}

static int open_model(struct qp_engine *s, qpack_backend kind, uint32_t ctx, qp_err *err)
{
    qpack_model_params o = {.backend = kind, .ctx = ctx, .max_sessions = SLOTS, .threads = 1,
                            .progress = count_progress};
    return qp_engine_open(s, qpk, &o, 0, err);
}

/* the bytes emu's maps take at ctx, from the library's own layout */
static uint64_t emu_need(uint32_t ctx)
{
    struct qpk_file f;
    struct qp_plan p;
    qp_err err = {{0}};
    ck_assert_msg(qpk_open(&f, qpk, 0, &err) == 0, "%s", err.msg);
    ck_assert_msg(qp_plan_layout(&p, &f, ctx, SLOTS, QP_BLOCK_DEFAULT, false, false, &err) == 0, "%s", err.msg);
    uint64_t need = qp_mem_need(&p, false);
    /* the KV cache by hand: K and V, 16 bits per entry, every slot, layer
     * and position (tiny: 2 layers, 2 KV heads of 16) */
    ck_assert_uint_eq(p.bytes.kv, 2ull * 2 * (2 * 16) * 2 * ctx * SLOTS);
    qpk_close(&f);
    return need;
}

/* A host with 1 kB to spare: both backends refuse at once, one line,
 * QP_E_MEMORY, naming the figures and the alternatives, before the
 * checksum pass (no progress reported) and so before any map. */
START_TEST(too_little_memory_is_refused_before_any_map)
{
    set_available(QP_MEM_RESERVE + 1000);
    qpack_backend kinds[] = {QPACK_BACKEND_BPF, QPACK_BACKEND_EMU};
    for (int k = 0; k < 2; k++) {
        struct qp_engine s;
        qp_err err = {{0}};
        progress_calls = 0;
        ck_assert_int_eq(open_model(&s, kinds[k], 1024, &err), -1);
        ck_assert_int_eq(err.code, QP_E_MEMORY);
        ck_assert_int_eq(progress_calls, 0);
        ck_assert_msg(!strchr(err.msg, '\n'), "%s", err.msg);
        ck_assert_msg(strstr(err.msg, qpk) && strstr(err.msg, "need") && strstr(err.msg, "1 kB is available") &&
                          strstr(err.msg, "2 sessions of 1024 positions"),
                      "%s", err.msg);
        ck_assert_msg(k == 1 || (strstr(err.msg, "--stream") && strstr(err.msg, "a smaller format")), "%s",
                      err.msg);
        printf("%s\n", err.msg);
    }
}
END_TEST

/* QP_MEM_AVAILABLE that is not a number is an argument error, not a guess */
START_TEST(bad_available_figure_is_an_error)
{
    setenv("QP_MEM_AVAILABLE", "12G", 1);
    struct qp_engine s;
    qp_err err = {{0}};
    ck_assert_int_eq(open_model(&s, QPACK_BACKEND_EMU, 0, &err), -1);
    ck_assert_int_eq(err.code, QP_E_ARGUMENT);
    ck_assert_msg(strstr(err.msg, "QP_MEM_AVAILABLE=12G"), "%s", err.msg);
}
END_TEST

/* The default context: min(max positions, 4096) when the maps fit; else
 * the largest multiple of QK_ATTN_CHUNK (256) whose maps fit MemAvailable
 * less the reserve (the budget exactly at a context's need gives that
 * context, one byte less the one 256 below); 256 at least, refused then if
 * even that does not fit. A smaller -c given explicitly fits where the
 * default would not. */
START_TEST(default_context_fits_the_memory_left)
{
    struct {
        uint64_t avail;
        uint32_t ctx;
    } cases[] = {
        {QP_MEM_RESERVE + emu_need(MAX_POS), MAX_POS},
        {QP_MEM_RESERVE + emu_need(1024), 1024},
        {QP_MEM_RESERVE + emu_need(1024) - 1, 768},
        {QP_MEM_RESERVE + emu_need(256), 256},
        {QP_MEM_RESERVE + (emu_need(256) + emu_need(512)) / 2, 256},
        {QP_MEM_RESERVE + (emu_need(1280) + emu_need(1536)) / 2, 1280},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        set_available(cases[i].avail);
        struct qp_engine s;
        qp_err err = {{0}};
        ck_assert_msg(open_model(&s, QPACK_BACKEND_EMU, 0, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(s.ctx, cases[i].ctx);
        qp_engine_close(&s);
    }
    /* the need grows with the context: each step costs at least its KV
     * cache */
    ck_assert_uint_ge(emu_need(1024) - emu_need(768), 2ull * 2 * (2 * 16) * 2 * 256 * SLOTS);
    /* below 256 positions' need: the default stops at 256 and is refused */
    set_available(QP_MEM_RESERVE + emu_need(256) - 1);
    struct qp_engine s;
    qp_err err = {{0}};
    ck_assert_int_eq(open_model(&s, QPACK_BACKEND_EMU, 0, &err), -1);
    ck_assert_int_eq(err.code, QP_E_MEMORY);
    ck_assert_msg(strstr(err.msg, "of 256 positions"), "%s", err.msg);
    /* an explicit -c is checked, not lowered */
    set_available(QP_MEM_RESERVE + emu_need(1024) - 1);
    ck_assert_int_eq(open_model(&s, QPACK_BACKEND_EMU, 1024, &err), -1);
    ck_assert_int_eq(err.code, QP_E_MEMORY);
    ck_assert_msg(strstr(err.msg, "-c 768"), "the alternative -c is the largest that fits: %s", err.msg);
    ck_assert_int_eq(open_model(&s, QPACK_BACKEND_EMU, 768, &err), 0);
    ck_assert_uint_eq(s.ctx, 768);
    qp_engine_close(&s);
}
END_TEST

/* E2BIG is a kernel limit, not memory: the message names the map whose
 * values pass 4 MiB (kmalloc's largest), or else the verifier's limit */
START_TEST(e2big_is_named_for_what_it_is)
{
    struct qp_plan plan = {0};
    for (int i = 0; i < QP_MAP_COUNT; i++)
        plan.maps[i] = (struct qp_mapspec){.name = "small", .value_size = 4096, .max_entries = 1};
    char buf[160];
    const char *hint = qp_bpf_load_hint(&plan, E2BIG, buf, sizeof buf);
    ck_assert_ptr_nonnull(hint);
    ck_assert_msg(strstr(hint, "verifier's limit of 1M processed instructions") && strstr(hint, "not a lack of memory"),
                  "%s", hint);
    plan.maps[QP_MAP_COUNT - 1] = (struct qp_mapspec){.name = "w_big", .value_size = (4u << 20) + 8, .max_entries = 2};
    hint = qp_bpf_load_hint(&plan, E2BIG, buf, sizeof buf);
    ck_assert_str_eq(hint, "map w_big has values of 4194312 bytes, past the kernel's limit of 4194304 "
                           "(not a lack of memory)");
    /* exactly 4 MiB is within the limit */
    plan.maps[QP_MAP_COUNT - 1].value_size = 4u << 20;
    ck_assert_ptr_null(strstr(qp_bpf_load_hint(&plan, E2BIG, buf, sizeof buf), "w_big"));
    hint = qp_bpf_load_hint(&plan, ENOMEM, buf, sizeof buf);
    ck_assert_msg(hint && strstr(hint, "memory") && strstr(hint, "--stream"), "%s", hint ? hint : "(null)");
    ck_assert_ptr_null(qp_bpf_load_hint(&plan, EINVAL, buf, sizeof buf));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, too_little_memory_is_refused_before_any_map);
    tcase_add_test(tc, bad_available_figure_is_an_error);
    tcase_add_test(tc, default_context_fits_the_memory_left);
    tcase_add_test(tc, e2big_is_named_for_what_it_is);
    suite_add_tcase(s, tc);
    return qp_test_main_nofork(s);
}
