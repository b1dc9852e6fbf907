// Streaming text generation with stop strings and statistics.
#include "text/generation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"
#include "tokenizer/stream_decoder.h"

namespace moeflux {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops)
    for (size_t n = std::min(s.size() - 1, text.size()); n > best; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
  return best;
}

GenerateStats generate_text(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const GenerateOptions& opt, const std::function<void(const std::string&)>& on_text) {
  for (const auto& st : opt.stop)
    if (st.empty()) fail("stop strings must not be empty");
  GenerateStats st;
  st.prompt_tokens = int64_t(prompt.size());
  const auto t0 = Clock::now();
  Sampler sampler(opt.sampling);
  const int64_t V = s.model().cfg.vocab_size;
  std::vector<float> logits;
  TopLogits top;  // the sampler's shortlist of the logits (top.n 0: logits holds the row)
  const auto forward = [&](std::span<const int32_t> ids) {
    std::vector<int32_t> history(s.tokens());
    history.insert(history.end(), ids.begin(), ids.end());
    top.n = sampler.shortlist(history, V);
    logits = s.forward(ids, {.all_logits = false, .top = top.n > 0 ? &top : nullptr});
  };
  const auto read = [&](std::span<const int32_t> ids, float* out) { s.kept_logits(top, ids, out); };
  if (!prompt.empty()) {
    if (s.pos() + int64_t(prompt.size()) >= s.model().cfg.max_seq_len)
      fail("prompt of ", prompt.size(), " tokens (", s.pos() + int64_t(prompt.size()),
           " with the conversation so far) does not fit the model's context of ", s.model().cfg.max_seq_len, " tokens");
    forward(prompt);
    st.prefilled_tokens = int64_t(prompt.size());
  } else {
    fail("generate_text: empty prompt");
  }
  st.prefill_s = since(t0);
  if (opt.on_prefilled) opt.on_prefilled();
  StreamDecoder dec(tok, /*skip_special_tokens=*/false);
  std::string pending;  // decoded text not yet emitted (may hold the start of a stop string)
  auto emit = [&](size_t n) {
    if (n == 0) return;
    std::string piece = pending.substr(0, n);
    pending.erase(0, n);
    st.text += piece;
    if (on_text) on_text(piece);
  };
  const auto t_dec = Clock::now();
  st.stop_reason = "length";
  for (int i = 0; i < opt.max_tokens; ++i) {
    const int32_t next = top.n > 0 ? sampler.sample_top(top.vals, top.ids, read, s.tokens(), V) : sampler.sample(logits, s.tokens());
    if (i == 0) st.ttft_s = since(t0);
    st.tokens.push_back(next);
    ++st.generated_tokens;
    if (std::find(opt.eos_ids.begin(), opt.eos_ids.end(), next) != opt.eos_ids.end()) {
      st.stop_reason = "eos";
      break;
    }
    pending += dec.step(next);
    bool stopped = false;
    for (const auto& stop : opt.stop) {
      size_t at = pending.find(stop);
      if (at != std::string::npos) {
        emit(at);
        pending.clear();
        st.stop_reason = "stop";
        stopped = true;
        break;
      }
    }
    if (stopped) break;
    emit(pending.size() - held_suffix(pending, opt.stop));
    if (opt.cancel && opt.cancel->load()) {
      st.stop_reason = "cancelled";
      break;
    }
    if (i + 1 == opt.max_tokens) break;
    if (s.pos() + 1 >= s.model().cfg.max_seq_len) {
      st.stop_reason = "context";
      break;
    }
    forward(std::span<const int32_t>(&next, 1));
  }
  if (st.stop_reason != "stop") {
    pending += dec.finish();
    emit(pending.size());
  }
  st.decode_s = since(t_dec);
  return st;
}

std::vector<int32_t> model_eos_ids(const std::string& model_dir, const ModelConfig& cfg) {
  std::vector<int32_t> ids(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
  const auto gen = std::filesystem::path(model_dir) / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen, ec)) {
    auto j = nlohmann::json::parse(read_text_file(gen.string()), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(gen.string(), ": not valid JSON");
    auto e = j.find("eos_token_id");
    if (e != j.end()) {
      if (e->is_number_integer()) ids.push_back(e->get<int32_t>());
      else if (e->is_array())
        for (const auto& x : *e)
          if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace moeflux
