/* qpack - packs a Hugging Face Qwen3 checkpoint once, ahead of time, into a
 * self-contained .qpk container that qrun copies straight into BPF maps. */
#include <stdio.h>
#include <string.h>

#include "cli_suggest.h"
#include "stdout_policy.h"
#include "error.h"
#include "pack.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qpack <command> [options]\n"
            "\n"
            "commands:\n"
            "  pack SRC -o OUT.qpk [--format q24|int8|int4|int4-pure] [--group N]\n"
            "           [--quant search|rtn|minmax] [--keep PATTERN=FMT]...\n"
            "           [--calibrate TEXT [--calibrate-tokens N]] [--quiet]\n"
            "                      convert a Hugging Face Qwen3 folder (config.json, BF16/F16/F32\n"
            "                      safetensors, single or sharded, tokenizer.json) or a Qwen3\n"
            "                      GGUF file (one, or the first of a split) into OUT.qpk;\n"
            "                      written atomically: OUT.qpk appears only when complete.\n"
            "                      int4 is mixed (the embedding int6, a few sensitive\n"
            "                      matrices int8); see qpack pack --help\n"
            "  info FILE [--json]  config, generation defaults (generation_config.json) and\n"
            "                      pooling (an embedding model's), task (a reranker's),\n"
            "                      sections, tensor table,\n"
            "                      checksums, provenance and the reconstruction error of every\n"
            "                      tensor\n"
            "  verify FILE         recompute every checksum and value range, decode every section\n"
            "                      and read it as its user will (tokenizer.json with qrun's\n"
            "                      loader, tokenizer_config.json and the provenance as JSON\n"
            "                      objects with no key twice, the chat template as UTF-8\n"
            "                      text); exit 1 naming the first bad part\n"
            "\n"
            "  load MODEL.qpk [--name NAME] [-c CTX] [--sessions N] [--kv-cache int16|int8]\n"
            "       [--group GROUP] [--mode MODE] [--call-us N] [--schedule host|kernel]\n"
            "                      load MODEL.qpk into BPF once and pin it under\n"
            "                      /sys/fs/bpf/qpack/NAME: qrun, qrun serve, qeval and the library\n"
            "                      open it as -m pin:NAME in milliseconds, from any process, and\n"
            "                      members of GROUP without root (docs/RESIDENT.md); needs root\n"
            "  unload NAME         unpin a loaded model (processes using it keep it until they exit)\n"
            "  ps                  the loaded models: memory, sessions in use and by which processes\n"
            "\n"
            "  qpack --version     print the version and the git commit it was built from\n"
            "\n"
            "Exit status: 0 done, 1 error (also when standard output cannot be written),\n"
            "2 bad usage (also a pack -o that cannot be written), 141 when the reader of\n"
            "standard output went away (| head).\n");
}

int main(int argc, char **argv)
{
    qp_stdout_init();
    qp_exit_on_sigbus("qpack: an input file was truncated or changed on disk while qpack was reading it");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return qp_stdout_finish("qpack", 0);
    }
    if (!strcmp(cmd, "--version"))
        return qp_print_version("qpack");
    static const char *const names[] = {"pack", "info", "verify", "load", "unload", "ps"};
    static int (*const run[])(int, char **) = {cmd_pack, cmd_info, cmd_verify, cmd_load, cmd_unload, cmd_ps};
    _Static_assert(sizeof names / sizeof *names == sizeof run / sizeof *run, "a function per command");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(cmd, names[i]))
            return qp_stdout_finish("qpack", run[i](argc - 1, argv + 1));
    const char *guess = qp_cli_closest(cmd, names, sizeof names / sizeof *names);
    if (guess)
        fprintf(stderr, "qpack: unknown command '%s': did you mean %s? (see qpack --help)\n", cmd, guess);
    else
        fprintf(stderr, "qpack: unknown command '%s' (see qpack --help)\n", cmd);
    return 2;
}
