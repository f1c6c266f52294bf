// The llama.cpp oracle's driver (scripts/build_llamacpp.sh builds it against the pinned llama.cpp):
// loads one GGUF, creates one context per spec and prints llama.cpp's own start-up log lines.
//
//   llamacpp_ctx MODEL.gguf SPEC...    SPEC = c,b,ub,np,fa,ctk,ctv,swa_full,kvu
//     c b ub np: -c -b -ub -np;  fa: on|off|auto;  ctk ctv: f16|q8_0|...;  swa_full kvu: 0|1
//
// Each context's lines come between "=== ctx SPEC" and "=== end rc" lines (rc 0: created).
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifndef KVPLAN_LLAMACPP_BUILD
#define KVPLAN_LLAMACPP_BUILD "unknown"
#endif

static void log_line(ggml_log_level level, const char * text, void *) {
    (void) level;
    fputs(text, stdout);
}

static ggml_type cache_type(const std::string & name) {
    static const std::pair<const char *, ggml_type> types[] = {
        {"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"iq4_nl", GGML_TYPE_IQ4_NL},
    };
    for (const auto & t : types) {
        if (name == t.first) {
            return t.second;
        }
    }
    fprintf(stderr, "unknown cache type %s\n", name.c_str());
    exit(2);
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf c,b,ub,np,fa,ctk,ctv,swa_full,kvu ...\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    printf("=== build %s\n", KVPLAN_LLAMACPP_BUILD);
    llama_log_set(log_line, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr) {
        printf("=== model failed\n");
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        std::vector<std::string> f;
        std::stringstream ss(argv[i]);
        std::string item;
        while (std::getline(ss, item, ',')) {
            f.push_back(item);
        }
        if (f.size() != 9) {
            fprintf(stderr, "bad spec %s\n", argv[i]);
            return 2;
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = (uint32_t) std::stoul(f[0]);
        cp.n_batch = (uint32_t) std::stoul(f[1]);
        cp.n_ubatch = (uint32_t) std::stoul(f[2]);
        cp.n_seq_max = (uint32_t) std::stoul(f[3]);
        cp.flash_attn_type = f[4] == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                             : f[4] == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                             : LLAMA_FLASH_ATTN_TYPE_AUTO;
        cp.type_k = cache_type(f[5]);
        cp.type_v = cache_type(f[6]);
        cp.swa_full = f[7] == "1";
        cp.kv_unified = f[8] == "1";
        cp.n_threads = cp.n_threads_batch = 1;
        printf("=== ctx %s\n", argv[i]);
        llama_context * ctx = llama_init_from_model(model, cp);
        printf("=== end %d\n", ctx == nullptr ? 1 : 0);
        if (ctx != nullptr) {
            llama_free(ctx);
        }
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
