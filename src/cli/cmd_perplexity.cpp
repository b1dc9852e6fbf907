// `moeflux perplexity`: perplexity of a text file with sliding windows, as llama-perplexity:
// PPL with its standard error, tokens scored, tokens/s.
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/gen_options.h"
#include "cli/compute_options.h"
#include "cli/stream_options.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "engine/perplexity.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace moeflux::cli {

namespace {
struct PplArgs {
  std::string model, tokenizer, file;
  int64_t ctx = 512, stride = 0;
  int64_t max_tokens = 0;
  ComputeArgs compute;
  StreamArgs stream;
};
}  // namespace

Runner register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  auto* sub = app.add_subcommand("perplexity", "Perplexity of a text file (sliding windows)");
  sub->add_option("-m,--model", a->model, "Model directory")->required();
  sub->add_option("--tokenizer", a->tokenizer, "Tokenizer directory (default: the model directory)");
  sub->add_option("-f,--file", a->file, "Text file")->required();
  sub->add_option("-c,--ctx,--ctx-size", a->ctx, "Window length in tokens");
  sub->add_option("--stride", a->stride, "Window start step in tokens (default: ctx)");
  sub->add_option("--max-tokens", a->max_tokens, "Only the first N tokens of the file (0: all)");
  add_stream_options(sub, a->stream);
  add_compute_options(sub, a->compute);
  return [a]() {
    // Everything that needs no model is checked first: a mistake costs no load.
    if (a->ctx < 2) fail("--ctx must be at least 2 (got ", a->ctx, ")");
    if (a->stride < 0 || a->stride > a->ctx) fail("--stride must be in [1, ctx], or 0 for ctx (got ", a->stride, ")");
    if (a->max_tokens < 0) fail("--max-tokens must be >= 0");
    const std::string text = read_text_file(a->file);
    if (const size_t bad = utf8_first_invalid(text); bad != std::string::npos)
      fail(a->file, ": not valid UTF-8 (byte ", bad, ")");
    a->compute.apply();
    check_stream_args(a->model, a->stream);
    require_model_tokenizer(a->model, a->tokenizer);
    Tokenizer tok = Tokenizer::load(a->tokenizer.empty() ? a->model : a->tokenizer);
    auto model = load_model_cli(a->model, a->stream, a->compute);
    auto ids = tok.encode(text);
    if (a->max_tokens > 0 && int64_t(ids.size()) > a->max_tokens) ids.resize(size_t(a->max_tokens));
    const int64_t stride = a->stride > 0 ? a->stride : a->ctx;
    const bool tty = isatty(STDERR_FILENO);
    auto t0 = std::chrono::steady_clock::now();
    auto r = perplexity(*model, ids, a->ctx, stride, [&](int64_t done, int64_t total, double ppl) {
      if (tty) std::fprintf(stderr, "\r[%lld/%lld] ppl %.4f", (long long)done, (long long)total, ppl);
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) std::fprintf(stderr, "\n");
    std::printf("file: %s | tokens: %zu | ctx %lld stride %lld | windows %lld | scored %lld\n", a->file.c_str(),
                ids.size(), (long long)a->ctx, (long long)stride, (long long)r.n_windows, (long long)r.n_scored);
    std::printf("PPL = %.4f +/- %.4f | mean NLL %.5f | %.1f tokens/s\n", r.ppl, r.ppl_err, r.mean_nll,
                double(ids.size()) / secs);
    finish_streaming(*model, a->stream, secs);
    return 0;
  };
}

}  // namespace moeflux::cli
