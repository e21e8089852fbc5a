/* cli_sampling.c - the tools' sampling default (cli_sampling.h). */
#include "cli_sampling.h"

void cli_default_sampling(qpack_sampler_params *p)
{
    p->temperature = 0.8;
    p->top_k = 40;
    p->top_p = 0.95;
    p->min_p = 0.05;
}
