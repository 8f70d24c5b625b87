// Teacher-forcing harness for llama.cpp (build b4753 ~ c392e50).
// Usage: tf MODEL.gguf RECORDS.txt UBATCH [out.jsonl]
//   RECORDS.txt: blocks of 3 + n lines:
//     KEY
//     prompt token ids (space separated)
//     generated token ids (space separated), n of them
//     n lines: reference top ids for step s (space separated)
//   UBATCH: 0 -> prompt decoded as one llama_decode call (context n_ubatch 512)
//           k>0 -> prompt decoded in chunks of k tokens, one llama_decode per chunk,
//                  context created with n_ubatch = k (k=1: one token at a time)
//   Then for s = 0..n-2 decode the single token tokens[s] (as greedy generation would).
// Env ALL_LOGITS=1: logits requested for every prompt token (mode name ub<k>all).
// Output: one JSON line per step: key, mode, step, argmax, top10 [[id,lp]], ref [[id,lp]]
// logprobs: log-softmax in double over the full vocabulary of the raw logits.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>
#include <fstream>
#include <sstream>
#include <algorithm>

struct Rec {
    std::string key;
    std::vector<llama_token> prompt, toks;
    std::vector<std::vector<llama_token>> ref;
};

static std::vector<llama_token> parse_ids(const std::string & line) {
    std::vector<llama_token> v; std::istringstream is(line); long x;
    while (is >> x) v.push_back((llama_token) x);
    return v;
}

static void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static void emit(FILE * out, const Rec & r, const char * mode, int step, const float * logits, int n_vocab) {
    double mx = -INFINITY; int am = 0;
    for (int i = 0; i < n_vocab; i++) if (logits[i] > mx) { mx = logits[i]; am = i; }
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += std::exp((double) logits[i] - mx);
    const double lse = mx + std::log(sum);
    std::vector<int> idx(n_vocab);
    for (int i = 0; i < n_vocab; i++) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    fprintf(out, "{\"key\":\"%s\",\"mode\":\"%s\",\"step\":%d,\"argmax\":%d,\"top\":[", r.key.c_str(), mode, step, am);
    for (int k = 0; k < 10; k++) fprintf(out, "%s[%d,%.9g]", k ? "," : "", idx[k], (double) logits[idx[k]] - lse);
    fprintf(out, "],\"ref\":[");
    const auto & rt = r.ref[step];
    for (size_t k = 0; k < rt.size(); k++) fprintf(out, "%s[%d,%.9g]", k ? "," : "", rt[k], (double) logits[rt[k]] - lse);
    fprintf(out, "]}\n");
}

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s model.gguf records.txt ubatch [out.jsonl]\n", argv[0]); return 1; }
    const char * model_path = argv[1];
    const int ub = atoi(argv[3]);
    FILE * out = argc > 4 ? fopen(argv[4], "w") : stdout;

    std::vector<Rec> recs;
    {
        std::ifstream f(argv[2]); std::string line;
        while (std::getline(f, line)) {
            if (line.empty()) continue;
            Rec r; r.key = line;
            std::getline(f, line); r.prompt = parse_ids(line);
            std::getline(f, line); r.toks = parse_ids(line);
            for (size_t s = 0; s < r.toks.size(); s++) { std::getline(f, line); r.ref.push_back(parse_ids(line)); }
            recs.push_back(r);
        }
    }

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    fprintf(stderr, "%s\n", llama_print_system_info());

    // env ALL_LOGITS=1: request logits for every prompt token (as perplexity-style callers do); mode name gets "all"
    const bool all_logits = getenv("ALL_LOGITS") && atoi(getenv("ALL_LOGITS")) != 0;
    char mode[32]; snprintf(mode, sizeof mode, "ub%d%s", ub, all_logits ? "all" : "");
    for (const Rec & r : recs) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 1024;
        cp.n_batch = 512;
        cp.n_ubatch = ub > 0 ? ub : 512;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;
        cp.no_perf = true;
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }

        const int np = (int) r.prompt.size();
        const int chunk = ub > 0 ? ub : np;
        llama_batch b = llama_batch_init(std::max(np, 1), 0, 1);
        for (int p0 = 0; p0 < np; p0 += chunk) {
            const int p1 = std::min(np, p0 + chunk);
            b.n_tokens = 0;
            for (int p = p0; p < p1; p++) {
                const int i = b.n_tokens++;
                b.token[i] = r.prompt[p]; b.pos[i] = p; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0;
                b.logits[i] = all_logits || (p == np - 1); // default: only the last prompt token's logits, as llama-cli/server
            }
            if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
        }
        emit(out, r, mode, 0, llama_get_logits_ith(ctx, -1), n_vocab);
        for (size_t s = 0; s + 1 < r.toks.size(); s++) {
            b.n_tokens = 1;
            b.token[0] = r.toks[s]; b.pos[0] = np + (int) s; b.n_seq_id[0] = 1; b.seq_id[0][0] = 0; b.logits[0] = 1;
            if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
            emit(out, r, mode, (int) s + 1, llama_get_logits_ith(ctx, -1), n_vocab);
        }
        fflush(out);
        llama_batch_free(b);
        llama_free(ctx);
    }
    llama_model_free(model);
    if (out != stdout) fclose(out);
    return 0;
}
