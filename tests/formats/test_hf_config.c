/* test_hf_config.c - config.json parsing, validation and writing. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_config.h"
#include "qp_test.h"

/* Qwen3-0.6B's config.json as published, one field per entry. */
static const char *const qwen3_06b[][2] = {
    { "architectures", "[\"Qwen3ForCausalLM\"]" },
    { "attention_bias", "false" },
    { "attention_dropout", "0.0" },
    { "bos_token_id", "151643" },
    { "eos_token_id", "151645" },
    { "head_dim", "128" },
    { "hidden_act", "\"silu\"" },
    { "hidden_size", "1024" },
    { "initializer_range", "0.02" },
    { "intermediate_size", "3072" },
    { "max_position_embeddings", "40960" },
    { "max_window_layers", "28" },
    { "model_type", "\"qwen3\"" },
    { "num_attention_heads", "16" },
    { "num_hidden_layers", "28" },
    { "num_key_value_heads", "8" },
    { "rms_norm_eps", "1e-06" },
    { "rope_scaling", "null" },
    { "rope_theta", "1000000" },
    { "sliding_window", "null" },
    { "tie_word_embeddings", "true" },
    { "torch_dtype", "\"bfloat16\"" },
    { "transformers_version", "\"4.51.0\"" },
    { "use_cache", "true" },
    { "use_sliding_window", "false" },
    { "vocab_size", "151936" },
};
#define N_FIELDS (sizeof(qwen3_06b) / sizeof(qwen3_06b[0]))

/* The config with key set to value (NULL removes it; a new key is added). */
static char *config_with(const char *key, const char *value)
{
    static char text[4096];
    size_t len = 0;
    int found = 0;
    len += (size_t)snprintf(text + len, sizeof(text) - len, "{");
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *v = qwen3_06b[i][1];
        if (key && strcmp(key, qwen3_06b[i][0]) == 0) {
            found = 1;
            v = value;
        }
        if (v)
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\"%s\": %s",
                                    len > 1 ? ",\n" : "\n", qwen3_06b[i][0], v);
    }
    if (key && !found && value)
        len += (size_t)snprintf(text + len, sizeof(text) - len, ",\n\"%s\": %s", key, value);
    snprintf(text + len, sizeof(text) - len, "\n}\n");
    return text;
}

static void ck_assert_config_eq(const struct qwen3_config *a, const struct qwen3_config *b)
{
    ck_assert_uint_eq(a->hidden_size, b->hidden_size);
    ck_assert_uint_eq(a->intermediate_size, b->intermediate_size);
    ck_assert_uint_eq(a->num_hidden_layers, b->num_hidden_layers);
    ck_assert_uint_eq(a->num_attention_heads, b->num_attention_heads);
    ck_assert_uint_eq(a->num_key_value_heads, b->num_key_value_heads);
    ck_assert_uint_eq(a->head_dim, b->head_dim);
    ck_assert_uint_eq(a->vocab_size, b->vocab_size);
    ck_assert_uint_eq(a->max_position_embeddings, b->max_position_embeddings);
    ck_assert(a->rope_theta == b->rope_theta);
    ck_assert(a->rms_norm_eps == b->rms_norm_eps);
    ck_assert_int_eq(a->tie_word_embeddings, b->tie_word_embeddings);
    ck_assert_int_eq(a->bos_token_id, b->bos_token_id);
    ck_assert_int_eq(a->eos_token_id, b->eos_token_id);
}

static int parse(const char *text, struct qwen3_config *c, qp_err *err)
{
    return hf_config_parse(text, strlen(text), "config.json", c, err);
}

#define ck_assert_error(err, file, needle) do {                                       \
    ck_assert_msg(strstr((err).msg, (needle)) != NULL, "message \"%s\" lacks \"%s\"", \
                  (err).msg, (needle));                                               \
    ck_assert_msg(strstr((err).msg, (file)) != NULL, "message \"%s\" does not name %s", \
                  (err).msg, (file));                                                 \
    ck_assert_msg(strchr((err).msg, '\n') == NULL, "message is not one line");        \
} while (0)

START_TEST(qwen3_0_6b_config_parses_to_its_values)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_msg(parse(config_with(NULL, NULL), &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.hidden_size, 1024);
    ck_assert_uint_eq(c.intermediate_size, 3072);
    ck_assert_uint_eq(c.num_hidden_layers, 28);
    ck_assert_uint_eq(c.num_attention_heads, 16);
    ck_assert_uint_eq(c.num_key_value_heads, 8);
    ck_assert_uint_eq(c.head_dim, 128);
    ck_assert_uint_eq(c.vocab_size, 151936);
    ck_assert_uint_eq(c.max_position_embeddings, 40960);
    ck_assert(c.rope_theta == 1e6);
    ck_assert(c.rms_norm_eps == 1e-6);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_token_id, 151643);
    ck_assert_int_eq(c.eos_token_id, 151645);
}
END_TEST

START_TEST(absent_optional_fields_take_the_transformers_defaults)
{
    static const char text[] =
        "{\"hidden_size\": 512, \"intermediate_size\": 1024, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 8, \"vocab_size\": 1000}";
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_msg(parse(text, &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.num_key_value_heads, 8);
    ck_assert_uint_eq(c.head_dim, 64);
    ck_assert_uint_eq(c.max_position_embeddings, 32768);
    ck_assert(c.rope_theta == 10000.0);
    ck_assert(c.rms_norm_eps == 1e-6);
    ck_assert(!c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_token_id, -1);
    ck_assert_int_eq(c.eos_token_id, -1);
}
END_TEST

START_TEST(null_fields_count_as_absent)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse(config_with("bos_token_id", "null"), &c, &err), 0);
    ck_assert_int_eq(c.bos_token_id, -1);
    ck_assert_int_eq(parse(config_with("head_dim", "null"), &c, &err), 0);
    ck_assert_uint_eq(c.head_dim, 64);
    ck_assert_int_eq(parse(config_with("num_key_value_heads", "null"), &c, &err), 0);
    ck_assert_uint_eq(c.num_key_value_heads, 16);
}
END_TEST

START_TEST(token_id_list_gives_its_first_entry)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse(config_with("eos_token_id", "[151645, 151643]"), &c, &err), 0);
    ck_assert_int_eq(c.eos_token_id, 151645);
    ck_assert_int_eq(parse(config_with("eos_token_id", "[]"), &c, &err), 0);
    ck_assert_int_eq(c.eos_token_id, -1);
}
END_TEST

START_TEST(integral_numbers_in_exponent_form_are_integers)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse(config_with("hidden_size", "1.024e3"), &c, &err), 0);
    ck_assert_uint_eq(c.hidden_size, 1024);
}
END_TEST

/* One invalid field each: the key, its new text (NULL removes it), the message. */
static const struct {
    const char *key, *value, *message;
} invalid[] = {
    { "hidden_size", NULL, "hidden_size is missing" },
    { "hidden_size", "null", "hidden_size is null" },
    { "hidden_size", "\"1024\"", "hidden_size must be an integer, got a string" },
    { "hidden_size", "1024.5", "hidden_size must be an integer, got 1024.5" },
    { "hidden_size", "true", "hidden_size must be an integer, got a boolean" },
    { "hidden_size", "-1", "hidden_size is -1, outside [0, 4294967295]" },
    { "hidden_size", "1e20", "hidden_size is 1e+20, outside" },
    { "hidden_size", "1e999", "hidden_size must be an integer, got inf" },
    { "hidden_size", "0", "hidden_size is 0; it must be at least 1" },
    { "hidden_size", "20000", "hidden_size is 20000, above the limit 16384" },
    { "intermediate_size", NULL, "intermediate_size is missing" },
    { "intermediate_size", "70000", "intermediate_size is 70000, above the limit 65536" },
    { "num_hidden_layers", NULL, "num_hidden_layers is missing" },
    { "num_hidden_layers", "0", "num_hidden_layers is 0" },
    { "num_hidden_layers", "300", "num_hidden_layers is 300, above the limit 256" },
    { "num_attention_heads", NULL, "num_attention_heads is missing" },
    { "num_attention_heads", "0", "num_attention_heads is 0" },
    { "num_attention_heads", "512", "num_attention_heads is 512, above the limit 256" },
    { "num_key_value_heads", "0", "num_key_value_heads is 0" },
    { "num_key_value_heads", "5", "num_attention_heads 16 is not a multiple of num_key_value_heads 5" },
    { "num_key_value_heads", "32", "num_attention_heads 16 is not a multiple of num_key_value_heads 32" },
    { "head_dim", "127", "head_dim 127 is odd" },
    { "head_dim", "0", "head_dim is 0" },
    { "head_dim", "1024", "head_dim is 1024, above the limit 512" },
    { "vocab_size", NULL, "vocab_size is missing" },
    { "vocab_size", "0", "vocab_size is 0" },
    { "vocab_size", "2000000", "vocab_size is 2000000, above the limit 1048576" },
    { "max_position_embeddings", "0", "max_position_embeddings is 0" },
    { "max_position_embeddings", "4000000", "max_position_embeddings is 4000000, above the limit" },
    { "rope_theta", "0", "rope_theta is 0; it must be finite and above 0" },
    { "rope_theta", "-5", "rope_theta is -5; it must be finite and above 0" },
    { "rope_theta", "1e999", "rope_theta is inf; it must be finite" },
    { "rope_theta", "\"1e6\"", "rope_theta must be a number, got a string" },
    { "rms_norm_eps", "0", "rms_norm_eps is 0; it must be in (0, 1)" },
    { "rms_norm_eps", "1", "rms_norm_eps is 1; it must be in (0, 1)" },
    { "rms_norm_eps", "-1e-6", "rms_norm_eps is -1e-06; it must be in (0, 1)" },
    { "tie_word_embeddings", "1", "tie_word_embeddings must be true or false, got a number" },
    { "bos_token_id", "151936", "bos_token_id 151936 is outside the vocabulary (vocab_size 151936)" },
    { "eos_token_id", "200000", "eos_token_id 200000 is outside the vocabulary" },
    { "eos_token_id", "-2", "eos_token_id is -2, outside [0, 2147483647]" },
    { "eos_token_id", "1.5", "eos_token_id must be an integer, got 1.5" },
    { "eos_token_id", "\"</s>\"", "eos_token_id must be an integer, got a string" },
    { "model_type", "\"llama\"", "model_type is \"llama\", not \"qwen3\"" },
    { "model_type", "3", "model_type is a number, not \"qwen3\"" },
    { "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
      "rope_scaling is set; qpack does not implement RoPE scaling" },
    { "use_sliding_window", "true", "use_sliding_window is true" },
    { "attention_bias", "true", "attention_bias is true" },
    { "hidden_act", "\"gelu\"", "hidden_act is not \"silu\"" },
};

START_TEST(each_invalid_field_gives_its_error)
{
    struct qwen3_config c;
    qp_err err = { "" };
    const char *text = config_with(invalid[_i].key, invalid[_i].value);
    ck_assert_msg(parse(text, &c, &err) == -1, "%s = %s was accepted", invalid[_i].key,
                  invalid[_i].value ? invalid[_i].value : "(absent)");
    ck_assert_error(err, "config.json", invalid[_i].message);
}
END_TEST

START_TEST(head_dim_default_needs_hidden_divisible_by_heads)
{
    static const char text[] =
        "{\"hidden_size\": 100, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
        " \"num_attention_heads\": 8, \"vocab_size\": 10}";
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse(text, &c, &err), -1);
    ck_assert_error(err, "config.json", "head_dim is absent and hidden_size 100 is not a "
                    "multiple of num_attention_heads 8");
}
END_TEST

START_TEST(text_that_is_not_a_json_object_is_rejected)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse("{\"hidden_size\": ", &c, &err), -1);
    ck_assert_error(err, "config.json", "not valid JSON");
    ck_assert_int_eq(parse("{} {}", &c, &err), -1);
    ck_assert_error(err, "config.json", "not valid JSON");
    ck_assert_int_eq(parse("[1024]", &c, &err), -1);
    ck_assert_error(err, "config.json", "not a JSON object");
    ck_assert_int_eq(hf_config_parse("{}\0{}", 5, "config.json", &c, &err), -1);
    ck_assert_error(err, "config.json", "NUL byte");
}
END_TEST

/* Hugging Face (Python's json) keeps the last of two values; cJSON's
 * lookups find the first: qpack would pack another model than the one
 * transformers loads. */
START_TEST(a_key_twice_is_refused_naming_it)
{
    static const char *const keys[] = {"rope_theta", "rms_norm_eps", "max_position_embeddings"};
    struct qwen3_config c;
    qp_err err = { "" };
    for (size_t i = 0; i < 3; i++) {
        char text[4200];
        snprintf(text, sizeof(text), "{\"%s\": 5,%s", keys[i], config_with(NULL, NULL) + 1);
        ck_assert_int_eq(parse(text, &c, &err), -1);
        char want[96];
        snprintf(want, sizeof(want), "key \"%s\" appears twice", keys[i]);
        ck_assert_error(err, "config.json", want);
    }
    /* inside a nested object too */
    ck_assert_int_eq(parse(config_with("quantization_config", "{\"bits\": 4, \"bits\": 8}"), &c, &err), -1);
    ck_assert_error(err, "config.json", "key \"bits\" appears twice in object \"quantization_config\"");
}
END_TEST

/* cJSON cuts "rope_theta\u0000x" to "rope_theta"; Python keeps it whole (a
 * key nobody reads, so transformers uses the default). */
START_TEST(an_escaped_nul_is_refused)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(parse(config_with("rope_theta\\u0000x", "5"), &c, &err), -1);
    ck_assert_error(err, "config.json", "escaped NUL");
}
END_TEST

START_TEST(a_fifo_is_refused_at_once)
{
    char dir[] = "/tmp/qp_cfg_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    struct qwen3_config c;
    qp_err err = { "" };
    alarm(10); /* no writer: a blocking open would never return */
    ck_assert_int_eq(hf_config_load(path, &c, &err), -1);
    alarm(0);
    ck_assert_error(err, path, "not a regular file (a fifo)");
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(missing_file_is_reported_with_its_path)
{
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(hf_config_load("/nonexistent/qp/config.json", &c, &err), -1);
    ck_assert_error(err, "/nonexistent/qp/config.json", "No such file");
}
END_TEST

START_TEST(written_config_loads_back_equal)
{
    char dir[] = "/tmp/qp_cfg_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    struct qwen3_config in = { .hidden_size = 96, .intermediate_size = 200,
        .num_hidden_layers = 3, .num_attention_heads = 6, .num_key_value_heads = 3,
        .head_dim = 24, .vocab_size = 777, .max_position_embeddings = 1000,
        .rope_theta = 500000.0, .rms_norm_eps = 1e-5, .tie_word_embeddings = false,
        .bos_token_id = -1, .eos_token_id = 12 };
    struct qwen3_config out;
    qp_err err = { "" };
    ck_assert_msg(hf_config_write(path, &in, &err) == 0, "%s", err.msg);
    ck_assert_msg(hf_config_load(path, &out, &err) == 0, "%s", err.msg);
    ck_assert_config_eq(&in, &out);
    in.rms_norm_eps = 0.1 + 0.2;                             /* needs all 17 digits */
    in.tie_word_embeddings = true;
    ck_assert_int_eq(hf_config_write_dtype(path, &in, "float16", &err), 0);
    ck_assert_int_eq(hf_config_load(path, &out, &err), 0);
    ck_assert_config_eq(&in, &out);
    FILE *f = fopen(path, "r");
    char text[2048] = "";
    ck_assert_uint_gt(fread(text, 1, sizeof(text) - 1, f), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "\"torch_dtype\": \"float16\""));
    ck_assert_ptr_nonnull(strstr(text, "\"architectures\": [\n    \"Qwen3ForCausalLM\"\n  ]"));
    ck_assert_ptr_nonnull(strstr(text, "\"rope_theta\": 500000,"));
    ck_assert_ptr_nonnull(strstr(text, "\"bos_token_id\": null,"));
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(writing_refuses_an_invalid_config)
{
    struct qwen3_config c = { .hidden_size = 64, .intermediate_size = 64,
        .num_hidden_layers = 1, .num_attention_heads = 4, .num_key_value_heads = 3,
        .head_dim = 16, .vocab_size = 10, .max_position_embeddings = 8, .rope_theta = 1e4,
        .rms_norm_eps = 1e-6, .bos_token_id = -1, .eos_token_id = -1 };
    qp_err err = { "" };
    ck_assert_int_eq(hf_config_write("/tmp/qp_never/config.json", &c, &err), -1);
    ck_assert_error(err, "/tmp/qp_never/config.json", "not a multiple of num_key_value_heads 3");
    c.num_key_value_heads = 2;
    ck_assert_int_eq(hf_config_write_dtype("/tmp/qp_never/config.json", &c, "int8", &err), -1);
    ck_assert_error(err, "/tmp/qp_never/config.json", "torch_dtype \"int8\" is not");
}
END_TEST

static Suite *hf_config_suite(void)
{
    Suite *s = suite_create("hf_config");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, qwen3_0_6b_config_parses_to_its_values);
    tcase_add_test(tc, absent_optional_fields_take_the_transformers_defaults);
    tcase_add_test(tc, null_fields_count_as_absent);
    tcase_add_test(tc, token_id_list_gives_its_first_entry);
    tcase_add_test(tc, integral_numbers_in_exponent_form_are_integers);
    tcase_add_loop_test(tc, each_invalid_field_gives_its_error, 0,
                        (int)(sizeof(invalid) / sizeof(invalid[0])));
    tcase_add_test(tc, head_dim_default_needs_hidden_divisible_by_heads);
    tcase_add_test(tc, text_that_is_not_a_json_object_is_rejected);
    tcase_add_test(tc, a_key_twice_is_refused_naming_it);
    tcase_add_test(tc, an_escaped_nul_is_refused);
    tcase_add_test(tc, a_fifo_is_refused_at_once);
    tcase_add_test(tc, missing_file_is_reported_with_its_path);
    suite_add_tcase(s, tc);
    tc = tcase_create("write");
    tcase_add_test(tc, written_config_loads_back_equal);
    tcase_add_test(tc, writing_refuses_an_invalid_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(hf_config_suite());
}
