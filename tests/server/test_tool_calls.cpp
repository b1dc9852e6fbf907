// Tool calls in answers: each format the chat templates use parsed into name + JSON-object
// arguments, malformed ones refused; ReplyStream (the real Qwen3 tokenizer, token by token)
// sends the text before a call as content and takes the call out, cuts at stop strings, and
// sends everything as text when the request offered no tools; tool_choice parsing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_request.h"
#include "server/reply_stream.h"
#include "server/tool_calls.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using Json = nlohmann::json;

void expect_calls(const std::string& text, const std::vector<std::pair<std::string, Json>>& want) {
  const auto got = parse_tool_calls(text);
  ASSERT_TRUE(got.has_value()) << text;
  ASSERT_EQ(got->size(), want.size()) << text;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i].name, want[i].first);
    EXPECT_EQ(Json::parse((*got)[i].arguments), want[i].second) << (*got)[i].arguments;
  }
}

TEST(ToolCalls, EachFormat) {
  expect_calls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               {{"get_weather", {{"city", "Paris"}}}});
  expect_calls("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
               "\"arguments\": \"{\\\"x\\\": [1, 2]}\"}\n</tool_call>",
               {{"a", Json::object()}, {"b", {{"x", {1, 2}}}}});
  expect_calls("<tool_call>\n{\"name\": \"open\", \"arguments\": {\"path\": \"/tmp\"}}", {{"open", {{"path", "/tmp"}}}});
  expect_calls("<tool_call>\n<function=search>\n<parameter=query>\nmoe kernels\n</parameter>\n<parameter=limit>\n5\n"
               "</parameter>\n</function>\n</tool_call>",
               {{"search", {{"query", "moe kernels"}, {"limit", 5}}}});
  expect_calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
               "\"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```"
               "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {{"get_weather", {{"city", "Paris"}}}, {"now", Json::object()}});
  expect_calls("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜>"
               "<｜tool▁calls▁end｜>",
               {{"get_weather", {{"city", "Rome"}}}});
  expect_calls("[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]", {{"add", {{"a", 1}, {"b", 2}}}});
}

TEST(ToolCalls, MalformedOnesAreNotCalls) {
  for (const std::string bad : {
           "no call at all",
           "<tool_call>\n{\"name\": 3}\n</tool_call>",
           "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
           "<tool_call>\n{\"name\": \"f\", \"arguments\": \"not json\"}\n</tool_call>",
           "<tool_call>\nnot json\n</tool_call>",
           "<tool_call>\n{\"name\": \"f\"}\n</tool_call> and then some text",
           "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n[1]\n```<｜tool▁call▁end｜>",
           "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>",
           "[TOOL_CALLS] []",
           "[TOOL_CALLS] [{\"arguments\": {}}]",
       })
    EXPECT_FALSE(parse_tool_calls(bad).has_value()) << bad;
}

class ReplyStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(test::data_dir() + "/tokenizers/qwen3")); }
  static void TearDownTestSuite() { delete tok_; }
  // Feeds `text`'s tokens one by one; the content sent, and whether a stop string ended it.
  static std::string feed(ReplyStream& r, const std::string& text, bool* ended = nullptr) {
    std::string sent, piece;
    bool more = true;
    for (int32_t t : tok_->encode(text)) {
      more = r.step(t, &piece);
      sent += piece;
      if (!more) break;
    }
    if (ended) *ended = !more;
    return sent + r.finish();
  }
  static Tokenizer* tok_;
};
Tokenizer* ReplyStreamTest::tok_ = nullptr;

TEST_F(ReplyStreamTest, TheTextBeforeACallIsContentAndTheCallIsTakenOut) {
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  ReplyStream r(*tok_, {}, true);
  EXPECT_EQ(feed(r, "Let me check the weather.\n\n" + call), "Let me check the weather.\n\n");
  ASSERT_EQ(r.tool_calls().size(), 1u);
  EXPECT_EQ(r.tool_calls()[0].name, "get_weather");
  EXPECT_EQ(Json::parse(r.tool_calls()[0].arguments), Json({{"city", "Paris"}}));
  // Without tools offered the same answer is all text.
  ReplyStream plain(*tok_, {}, false);
  EXPECT_EQ(feed(plain, "Let me check.\n" + call), "Let me check.\n" + call);
  EXPECT_TRUE(plain.tool_calls().empty());
  // A malformed call is sent as the text it is; a "<tool" that opens nothing passes through.
  ReplyStream bad(*tok_, {}, true);
  EXPECT_EQ(feed(bad, "Hm <tool_call>\n{\"name\": 3}\n</tool_call>"), "Hm <tool_call>\n{\"name\": 3}\n</tool_call>");
  EXPECT_TRUE(bad.tool_calls().empty());
  ReplyStream near(*tok_, {}, true);
  EXPECT_EQ(feed(near, "a <tool> tag and <tool_cal"), "a <tool> tag and <tool_cal");
}

TEST_F(ReplyStreamTest, StopStrings) {
  bool ended = false;
  ReplyStream r(*tok_, {"END"}, true);
  EXPECT_EQ(feed(r, "one two END three", &ended), "one two ");
  EXPECT_TRUE(ended);
  EXPECT_TRUE(r.stopped());
  ReplyStream c(*tok_, {"\n\n"}, true);  // a stop inside the calls cuts them there
  EXPECT_EQ(feed(c, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nmore", &ended), "");
  EXPECT_TRUE(ended);
  ASSERT_EQ(c.tool_calls().size(), 1u);
  EXPECT_EQ(c.tool_calls()[0].name, "f");
}

TEST(ToolChoice, Parsing) {
  const std::string base = R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
      "function": {"name": "f", "parameters": {}}}]})";
  auto with = [&](const std::string& choice) {
    return parse_completion_request(base.substr(0, base.size() - 1) + R"(, "tool_choice": )" + choice + "}", true);
  };
  EXPECT_EQ(with(R"("none")").tool_choice, "none");
  EXPECT_EQ(with(R"("auto")").tool_choice, "auto");
  EXPECT_EQ(with(R"("required")").tool_choice, "auto");
  EXPECT_EQ(with(R"({"type": "function", "function": {"name": "f"}})").tool_choice, "auto");
  for (const std::string bad : {R"("sometimes")", "3", R"({"type": "function"})", R"({"type": 1, "function": {}})"}) {
    try {
      with(bad);
      ADD_FAILURE() << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "tool_choice");
    }
  }
  try {
    parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [3]})", true);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
  }
}

}  // namespace
}  // namespace moeflux
