/* tok_cli_tool.c - a stand-alone front end for tok_cli_main, until qrun
 * dispatches to it: `qptok-cli tokenize --tokenizer tokenizer.json`. */
#include "tok_cli.h"

int main(int argc, char **argv)
{
    return tok_cli_main(argc - 1, argv + 1, "qptok-cli");
}
