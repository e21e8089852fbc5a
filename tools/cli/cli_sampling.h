/* cli_sampling.h - the sampling qrun and qrun serve use when neither the
 * command line (or the request) nor the model's generation_config.json
 * sets it: llama.cpp's defaults (llama-cli and llama-server: temperature
 * 0.8, top-k 40, top-p 0.95, min-p 0.05, no repeat penalty), which a
 * llama.cpp or ollama user expects. One default for both tools. */
#ifndef QP_CLI_SAMPLING_H
#define QP_CLI_SAMPLING_H

#include "qpack.h"

/* The default's words, for the tools' --help */
#define CLI_SAMPLING_DEFAULT "temperature 0.8, top-k 40, top-p 0.95, min-p 0.05 (llama.cpp's)"

/* Sets temperature, top_k, top_p and min_p of *p to the default; the
 * other fields stay as they are. */
void cli_default_sampling(qpack_sampler_params *p);

#endif
