// Multi-turn chats through `moeflux serve`'s ApiServer prefill only their new tokens, on a
// qwen3_moe model (the demo) and a hybrid one (the qwen3_next fixture, with a byte-level
// tokenizer and a ChatML template made here): the second turn's usage.cached_tokens is what the
// slot held in common with the new prompt (all of it, or for the hybrid model at least the
// checkpoint at the end of the first prompt), /metrics counts only the rest as prefilled, and
// the answer is the one the whole prompt gets alone. With one slot, another conversation takes
// it in between, and the next turn continues from the prefix cache.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "server/api_server.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using Json = nlohmann::ordered_json;

const std::string kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// GPT-2's byte-level BPE with no merges: token i is byte i; <|im_start|> 256, <|im_end|> 257.
Tokenizer byte_tokenizer() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cp(256, -1);
  for (int b : bs) cp[size_t(b)] = b;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (cp[size_t(b)] < 0) cp[size_t(b)] = 256 + n++;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    const int c = cp[size_t(b)];
    if (c < 0x80) s += char(c);
    else s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
    vocab[s] = b;
  }
  const Json j = {
      {"version", "1.0"},
      {"added_tokens", Json::array({{{"id", 256}, {"content", "<|im_start|>"}, {"special", true}},
                                    {{"id", 257}, {"content", "<|im_end|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}};
  return Tokenizer::from_json_text(j.dump(), "byte-level test tokenizer");
}

struct Served {
  const Model& model;
  const Tokenizer& tok;
  ChatTemplates templates;
  std::vector<int32_t> eos;
};

int64_t metric(httplib::Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  EXPECT_TRUE(r && r->status == 200);
  std::smatch m;
  const std::regex re("\n" + name + " ([0-9.]+)");
  return r && std::regex_search(r->body, m, re) ? int64_t(std::stod(m[1])) : -1;
}

// The tokens a slot holds after answering: the prompt, then each generated token fed back (all
// but the last when max_tokens ended it; all when an end-of-sequence id did).
std::vector<int32_t> held_after(const Served& s, const std::vector<int32_t>& prompt, int max_tokens) {
  Session alone(s.model);
  const auto gen = greedy_generate(alone, prompt, max_tokens);
  std::vector<int32_t> held = prompt;
  for (size_t i = 0; i < gen.size(); ++i) {
    if (std::find(s.eos.begin(), s.eos.end(), gen[i]) != s.eos.end()) return held;
    if (i + 1 < gen.size()) held.push_back(gen[i]);
  }
  return held;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void second_turn_prefills_only_new_tokens(Served& s, bool recurrent, int slots) {
  ServeOptions o;
  o.port = 0, o.model_name = "m";
  o.batch.slots = slots, o.batch.cache_bytes = size_t(256) << 20;
  ApiServer server(s.model, s.tok, s.templates, s.eos, o);
  httplib::Client c("127.0.0.1", server.start());
  c.set_read_timeout(60, 0);
  const int n = 6;
  auto chat = [&](const Json& msgs) {
    auto r = c.Post("/v1/chat/completions", Json{{"messages", msgs}, {"max_tokens", n}, {"temperature", 0}}.dump(),
                    "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r && r->status == 200 ? Json::parse(r->body) : Json::object();
  };
  auto ids = [&](const Json& msgs) { return s.tok.encode(render_chat(s.templates, msgs, nullptr, true)); };
  Json msgs = Json::array({{{"role", "system"}, {"content", "You answer briefly and plainly, as a clerk would."}},
                           {{"role", "user"}, {"content", "The jury said that the city"}}});
  const Json one = chat(msgs);
  ASSERT_TRUE(one.contains("choices"));
  const auto t1 = ids(msgs);
  const auto held = held_after(s, t1, n);
  if (slots == 1) {  // another conversation takes the slot; the first goes to the prefix cache
    const Json q = Json::array({{{"role", "user"}, {"content", "Quite another question, asked here."}}});
    const Json other = chat(q);
    const size_t shared = std::min(common_prefix(held, ids(q)), ids(q).size() - 1);  // a template's opening
    EXPECT_EQ(other["usage"]["prompt_tokens_details"]["cached_tokens"], recurrent ? 0 : int64_t(shared));
  }
  msgs.push_back({{"role", "assistant"}, {"content", one["choices"][0]["message"]["content"]}});
  msgs.push_back({{"role", "user"}, {"content", "and then?"}});
  const auto t2 = ids(msgs);
  const int64_t prefilled_before = metric(c, "moeflux_prompt_tokens_total");
  const Json two = chat(msgs);
  ASSERT_TRUE(two.contains("usage"));
  // What the state serves: the common prefix of what the slot held and the new prompt; for the
  // hybrid model all it held, else its checkpoint at the end of the first prompt.
  const size_t common = std::min(common_prefix(held, t2), t2.size() - 1);
  const size_t want = !recurrent || common == held.size() ? common : t1.size();
  ASSERT_GE(common, t1.size()) << "the second prompt starts with the first";
  const int64_t cached = two["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, int64_t(want));
  EXPECT_EQ(two["usage"]["prompt_tokens"], int64_t(t2.size()));
  EXPECT_EQ(metric(c, "moeflux_prompt_tokens_total") - prefilled_before, int64_t(t2.size() - want));
  if (slots == 1) {
    EXPECT_EQ(metric(c, "moeflux_prefix_cache_hits_total"), 1);
  }
  Session alone(s.model);
  EXPECT_EQ(two["choices"][0]["message"]["content"], s.tok.decode(greedy_generate(alone, t2, n)));
  std::printf("second turn: %lld of %zu prompt tokens reused (%zu held)\n", (long long)cached, t2.size(), held.size());
  server.stop();
}

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

TEST(ServerTurns, Qwen3MoeSecondTurnPrefillsOnlyItsNewTokens) {
  const auto m = load_model(kDemo);
  const Tokenizer tok = Tokenizer::load(kDemo);
  ChatTemplates t;
  try {
    t = load_chat_templates(kDemo);
  } catch (const Error&) {
    t.by_name["default"] = kChatMl;
  }
  Served s{*m, tok, t, {}};
  for (int64_t e : m->cfg.eos_token_ids) s.eos.push_back(int32_t(e));
  for (const int slots : {2, 1}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    second_turn_prefills_only_new_tokens(s, false, slots);
  }
}

TEST(ServerTurns, HybridSecondTurnPrefillsOnlyItsNewTokens) {
  const auto m = load_model(test::fixture_dir("qwen3_next/q4"));
  ASSERT_GE(m->cfg.vocab_size, 258);
  const Tokenizer tok = byte_tokenizer();
  ChatTemplates t;
  t.by_name["default"] = kChatMl;
  Served s{*m, tok, t, {257}};
  for (const int slots : {2, 1}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    second_turn_prefills_only_new_tokens(s, true, slots);
  }
}

}  // namespace
}  // namespace moeflux
