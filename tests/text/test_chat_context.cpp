// A chat that outgrows the context drops its oldest turns (the system message stays) instead
// of failing every later turn; a message that cannot fit even alone is an error naming it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/chat.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

TEST(ChatContext, OldestTurnsDroppedKeepingTheSystemMessage) {
  auto model = load_model(kDemo);
  model->cfg.max_seq_len = 120;
  const Tokenizer tok = Tokenizer::load(kDemo);
  ChatSession chat(*model, tok, load_chat_templates(kDemo), "Answer briefly.");
  GenerateOptions opt;
  opt.max_tokens = 16;
  opt.sampling = SamplingParams::greedy();
  int dropped = 0;
  for (int turn = 0; turn < 8; ++turn) {
    GenerateStats st;
    ASSERT_NO_THROW(st = chat.turn("Tell me about the jury and the house, turn " + std::to_string(turn), opt, nullptr))
        << "turn " << turn;
    EXPECT_GT(st.generated_tokens, 0);
    EXPECT_LE(chat.context_tokens(), 120);
    dropped += chat.dropped_turns();
    const auto& m = chat.messages();
    ASSERT_GE(m.size(), 3u);
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[0]["content"], "Answer briefly.");
    EXPECT_EQ(m[m.size() - 2]["content"], "Tell me about the jury and the house, turn " + std::to_string(turn));
    EXPECT_EQ(m.back()["role"], "assistant");
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(chat.messages().size(), 1u + 2 * 8);
}

TEST(ChatContext, AMessageTooLongAloneIsAnError) {
  auto model = load_model(kDemo);
  model->cfg.max_seq_len = 40;
  const Tokenizer tok = Tokenizer::load(kDemo);
  ChatSession chat(*model, tok, load_chat_templates(kDemo), "");
  GenerateOptions opt;
  opt.max_tokens = 4;
  opt.sampling = SamplingParams::greedy();
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "the jury said ";
  try {
    chat.turn(long_text, opt, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the context of 40 tokens"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(chat.messages().empty());  // the refused message is not kept
  EXPECT_NO_THROW(chat.turn("Hi", opt, nullptr));
}

}  // namespace
}  // namespace moeflux
