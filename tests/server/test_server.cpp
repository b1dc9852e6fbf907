// moeflux serve's ApiServer on the demo model, driven over HTTP (cpp-httplib's client):
// greedy chat and text completions equal the same prompt generated alone, streamed (SSE) and
// not; 16 concurrent streaming clients each get their own text; usage; stop strings; the error
// cases (bad JSON, wrong types, context overflow, API key, oversized body, unknown route);
// a client that disconnects mid-stream frees its slot.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/registry.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/session.h"
#include "server/api_request.h"
#include "server/api_server.h"
#include "text/generation.h"
#include "util/test_util.h"

namespace moeflux {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDemo = std::string(MOEFLUX_SOURCE_DIR) + "/models/demo-qwen3-moe-q4";

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_model(kDemo).release();
    tok_ = new Tokenizer(Tokenizer::load(kDemo));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
  }
  // `on`: the model to serve (default: the demo on the cpu backend).
  void start(ServeOptions o = {}, const Model* on = nullptr) {
    o.port = 0, o.model_name = "demo";
    std::optional<ChatTemplates> t;
    try {
      t = load_chat_templates(kDemo);
    } catch (const Error&) {
    }
    has_template_ = t.has_value();
    server_ = std::make_unique<ApiServer>(on ? *on : *model_, *tok_, std::move(t), std::vector<int32_t>{}, o);
    port_ = server_->start();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // The text greedy decoding gives for `prompt` (text) alone, n tokens.
  std::string alone(const std::string& prompt, int n) const {
    Session s(*model_);
    const auto ids = greedy_generate(s, tok_->encode(prompt), n);
    return tok_->decode(ids);
  }
  static Model* model_;
  static Tokenizer* tok_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
  bool has_template_ = false;
};
Model* ServerTest::model_ = nullptr;
Tokenizer* ServerTest::tok_ = nullptr;

// The text of an SSE stream of chunks; usage and [DONE] checked.
std::string sse_text(const std::string& body, bool chat, Json* usage = nullptr, std::string* finish = nullptr) {
  std::string text;
  bool done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const Json j = Json::parse(data);
    if (j.contains("usage") && usage) *usage = j["usage"];
    if (j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (chat && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!chat) text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null() && finish) *finish = c["finish_reason"];
  }
  EXPECT_TRUE(done) << body;
  return text;
}

TEST_F(ServerTest, CompletionsStreamedAndNotEqualGenerationAlone) {
  start();
  auto c = client();
  const std::string prompt = "The jury said that the";
  const Json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], alone(prompt, 12));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens"], int64_t(tok_->encode(prompt).size()));
  Json sb = body;
  sb["stream"] = true, sb["stream_options"] = {{"include_usage", true}};
  auto s = c.Post("/v1/completions", sb.dump(), "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  EXPECT_NE(s->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  Json usage;
  std::string finish;
  EXPECT_EQ(sse_text(s->body, false, &usage, &finish), alone(prompt, 12));
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 12);
  // A stop string ends the text before it.
  const std::string full = alone(prompt, 12);
  const std::string stop = full.substr(full.size() / 2, 3);
  Json stopped = body;
  stopped["stop"] = stop;
  auto st = c.Post("/v1/completions", stopped.dump(), "application/json");
  ASSERT_TRUE(st);
  const Json sj = Json::parse(st->body);
  EXPECT_EQ(sj["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(sj["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, ChatCompletionThroughTheTemplate) {
  start();
  if (!has_template_) GTEST_SKIP() << "the demo model has no chat template";
  auto c = client();
  const Json msgs = Json::array({{{"role", "user"}, {"content", "Hello"}}});
  const Json body = {{"model", "demo"}, {"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string prompt = render_chat(load_chat_templates(kDemo), msgs, nullptr, true);
  const Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], alone(prompt, 8));
  Json sb = body;
  sb["stream"] = true;
  auto s = c.Post("/v1/chat/completions", sb.dump(), "application/json");
  ASSERT_TRUE(s);
  EXPECT_EQ(sse_text(s->body, true), alone(prompt, 8));
}

// logprobs: chat (logprobs + top_logprobs), streamed and not, and completions (logprobs N): one
// entry per generated token, greedy tokens the most likely of their alternatives.
TEST_F(ServerTest, Logprobs) {
  start();
  auto c = client();
  if (has_template_) {
    const Json msgs = Json::array({{{"role", "user"}, {"content", "Hello"}}});
    const Json body = {{"messages", msgs}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Json::parse(r->body);
    const Json& content = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 5u) << r->body;
    for (const Json& e : content) {
      ASSERT_EQ(e["top_logprobs"].size(), 2u);
      EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
      EXPECT_LE(e["logprob"].get<double>(), 0.0);
    }
    Json sb = body;
    sb["stream"] = true;
    auto s = c.Post("/v1/chat/completions", sb.dump(), "application/json");
    ASSERT_TRUE(s);
    size_t entries = 0;  // one per token, with its alternatives
    for (size_t p = 0; (p = s->body.find("\"top_logprobs\":[{", p)) != std::string::npos; ++p) ++entries;
    EXPECT_EQ(entries, 5u) << s->body;
  }
  const Json body = {{"prompt", "The jury said"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json lp = Json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_LE(lp["top_logprobs"][0].size(), 3u);
  auto bad = c.Post("/v1/completions", R"({"prompt": "a", "logprobs": 9})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST_F(ServerTest, SixteenConcurrentStreamsEachGetTheirOwnText) {
  ServeOptions o;
  o.batch.slots = 8;
  start(o);
  std::vector<std::string> prompts, want;
  for (int i = 0; i < 16; ++i) prompts.push_back("Number " + std::to_string(i) + " of the county said that");
  for (const auto& p : prompts) want.push_back(alone(p, 10));  // before the clients: one user of the model at a time
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < 16; ++i)
    got.push_back(std::async(std::launch::async, [&, i] {
      auto c = client();
      const Json body = {{"prompt", prompts[size_t(i)]}, {"max_tokens", 10}, {"temperature", 0}, {"stream", true}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      if (!r) return "<no response: " + httplib::to_string(r.error()) + ">";
      return r->status == 200 ? sse_text(r->body, false) : "<HTTP " + std::to_string(r->status) + ": " + r->body + ">";
    }));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[size_t(i)].get(), want[size_t(i)]) << "client " << i;
  EXPECT_EQ(server_->stats().finished, 16);
}

TEST_F(ServerTest, ErrorsInOpenAIShape) {
  ServeOptions o;
  o.api_key = "sekrit";
  o.max_body = 4096;
  start(o);
  auto c = client();
  httplib::Headers key = {{"Authorization", "Bearer sekrit"}};
  auto expect_error = [&](const httplib::Result& r, int status, const std::string& needle) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
  };
  expect_error(c.Post("/v1/completions", R"({"prompt": "a"})", "application/json"), 401, "API key");
  expect_error(c.Post("/v1/completions", httplib::Headers{{"Authorization", "Bearer wrong"}}, R"({"prompt": "a"})",
                      "application/json"),
               401, "API key");
  expect_error(c.Post("/v1/completions", key, "{not json", "application/json"), 400, "not valid JSON");
  expect_error(c.Post("/v1/completions", key, "[1, 2]", "application/json"), 400, "JSON object");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": 5})", "application/json"), 400, "'prompt'");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "max_tokens": -1})", "application/json"), 400,
               "max_tokens");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "temperature": "hot"})", "application/json"), 400,
               "temperature");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "n": 2})", "application/json"), 400, "'n'");
  expect_error(c.Post("/v1/chat/completions", key, R"({"messages": []})", "application/json"), 400, "messages");
  expect_error(c.Post("/v1/chat/completions", key, R"({"messages": [{"role": "wizard", "content": "x"}]})",
                      "application/json"),
               400, "role");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "model": "gpt-4o"})", "application/json"), 400,
               "'gpt-4o' is not served here");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "response_format": {"type": "json_object"}})",
                      "application/json"),
               400, "not supported");
  expect_error(c.Post("/v1/completions", key, R"({"prompt": "a", "response_format": "json"})", "application/json"), 400,
               "response_format");
  for (const char* bad : {R"({"abc": 1})", R"({"5": 200})", R"([1])", R"({"99999999": 1})"})
    expect_error(c.Post("/v1/completions", key, std::string(R"({"prompt": "a", "logit_bias": )") + bad + "}", "application/json"),
                 400, "logit_bias");
  auto named = c.Post("/v1/completions", key, R"({"prompt": "a", "model": "demo", "max_tokens": 1, "response_format": {"type": "text"}})",
                      "application/json");
  ASSERT_TRUE(named);
  EXPECT_EQ(named->status, 200) << named->body;
  expect_error(c.Post("/v1/completions", key, std::string(8192, ' '), "application/json"), 413, "too large");
  expect_error(c.Get("/v1/nothing", key), 404, "no route");
  auto ok = c.Get("/v1/models", key);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(Json::parse(ok->body)["data"][0]["id"], "demo");
  auto page = c.Get("/");  // the chat page: no key needed to load it; it asks /v1 with the key
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_NE(page->body.find("stream: true"), std::string::npos);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("moeflux_slots_busy"), std::string::npos);
}

TEST_F(ServerTest, ContextOverflowIsA400) {
  start();
  auto c = client();
  std::string words;
  for (int64_t i = 0; i < model_->cfg.max_seq_len + 10; ++i) words += " jury";
  const Json body = {{"prompt", words}, {"max_tokens", 4}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("context"), std::string::npos);
}

// ServeOptions::max_tokens (serve's -n) bounds the requests that give no max_tokens, and only
// those; without it they run to the context's end.
TEST_F(ServerTest, ServeMaxTokensIsTheDefaultOfRequestsWithout) {
  ServeOptions o;
  o.max_tokens = 5;
  start(o);
  const std::string prompt = "The jury said that the";
  auto usage = [&](const Json& body) {
    auto r = client().Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? Json::parse(r->body)["usage"]["completion_tokens"].get<int64_t>() : -1;
  };
  EXPECT_EQ(usage({{"prompt", prompt}, {"temperature", 0}}), 5);
  EXPECT_EQ(usage({{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 9}}), 9);
  server_.reset();
  start();  // no default: up to the context's end (this test server has no end-of-text ids)
  EXPECT_GT(usage({{"prompt", prompt}, {"temperature", 0}}), 5);
}

// logit_bias: +100 on one token makes greedy decoding repeat it; -100 on the greedy first token
// bans it.
TEST_F(ServerTest, LogitBias) {
  start();
  auto c = client();
  auto text = [&](const Json& bias) {
    auto r = c.Post("/v1/completions", Json{{"prompt", "The jury said that the"}, {"max_tokens", 3}, {"temperature", 0},
                                            {"logit_bias", bias}}.dump(),
                    "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? Json::parse(r->body)["choices"][0]["text"].get<std::string>() : "";
  };
  const std::vector<int32_t> forced{17, 17, 17};
  EXPECT_EQ(text({{"17", 100}}), tok_->decode(forced));
  Session s(*model_);
  const int32_t first = greedy_generate(s, tok_->encode("The jury said that the"), 1)[0];
  const std::string banned = text({{std::to_string(first), -100}});
  EXPECT_NE(tok_->encode(banned).at(0), first);
}

// serve --stop and --system: the stop strings and the system message of requests without
// them; GET /v1/models/{id}.
TEST_F(ServerTest, ServeStopAndSystemAreDefaultsAndModelsById) {
  const std::string prompt = "The jury said that the";
  const std::string full = alone(prompt, 12);
  ServeOptions o;
  o.stop = {full.substr(full.size() / 2, 3)};
  o.system = "You are terse.";
  start(o);
  auto c = client();
  auto text = [&](const Json& body) {
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r ? Json::parse(r->body)["choices"][0]["text"].get<std::string>() : "";
  };
  EXPECT_EQ(text({{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}}), full.substr(0, full.find(o.stop[0])));
  EXPECT_EQ(text({{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"stop", "zzqx"}}), full);
  if (has_template_) {
    const Json msgs = Json::array({{{"role", "user"}, {"content", "Hello"}}});
    auto r = c.Post("/v1/chat/completions", Json{{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}, {"stop", "zzqx"}}.dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200);
    Json with_system = msgs;
    with_system.insert(with_system.begin(), Json{{"role", "system"}, {"content", o.system}});
    EXPECT_EQ(Json::parse(r->body)["choices"][0]["message"]["content"],
              alone(render_chat(load_chat_templates(kDemo), with_system, nullptr, true), 8));
  }
  auto m = c.Get("/v1/models/demo");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(Json::parse(m->body)["id"], "demo");
  auto missing = c.Get("/v1/models/other/model");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["param"], "model");
}

// A server stopped right after start() (before its listening thread ran, or with a client's
// idle keep-alive connection open) stops within a few seconds: never a hang.
TEST_F(ServerTest, StopsAtOnceAfterStartAndWithIdleConnections) {
  auto quick = std::async(std::launch::async, [&] {
    for (int i = 0; i < 10; ++i) {
      start();
      server_.reset();
    }
  });
  ASSERT_EQ(quick.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "start / stop hangs";
  start();
  httplib::Client c = client();
  c.set_keep_alive(true);
  ASSERT_TRUE(c.Get("/health"));
  const auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.5);
}

// stop() while one request generates and two wait for the slot: all three end at once as 503
// ("the server is stopping") instead of the shutdown waiting for every whole answer (the HTTP
// threads used to be joined before the batcher was stopped). The model runs on the reference
// backend, so that the first answer (to the context's end) is still generating when the other
// two have queued, however busy the machine.
TEST_F(ServerTest, StopCancelsWhatGeneratesAndWaits) {
  BackendOptions ref;
  ref.name = "ref";
  const auto slow = load_model(kDemo, MapMode::Map, make_backend(ref));
  struct StopFirst {  // the server goes before the model it serves, also when an assertion returns
    std::unique_ptr<ApiServer>& server;
    ~StopFirst() { server.reset(); }
  } stop_first{server_};
  ServeOptions o;
  o.batch.slots = 1;
  start(o, slow.get());
  const std::string body = Json{{"prompt", "The jury said that the"}, {"temperature", 0}}.dump();  // to the context's end
  std::vector<std::future<int>> status;
  for (int i = 0; i < 3; ++i)
    status.push_back(std::async(std::launch::async, [&] {
      auto r = client().Post("/v1/completions", body, "application/json");
      return r ? r->status : -1;
    }));
  for (int i = 0; i < 2000 && server_->stats().queued < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const BatcherStats st = server_->stats();
  ASSERT_EQ(st.busy_slots, 1);
  ASSERT_EQ(st.queued, 2u);
  server_->stop();
  for (auto& f : status) EXPECT_EQ(f.get(), 503);
}

TEST_F(ServerTest, ADisconnectedStreamFreesItsSlot) {
  ServeOptions o;
  o.batch.slots = 1;
  start(o);
  {
    auto c = client();
    int chunks = 0;
    const Json body = {{"prompt", "The jury said that the"}, {"max_tokens", 2000}, {"temperature", 0}, {"stream", true}};
    httplib::Request req;
    req.method = "POST", req.path = "/v1/completions", req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // hang up
    c.send(req);
  }
  // The one slot is free again: a second request completes; the first stopped early.
  auto c = client();
  const Json body = {{"prompt", "The jury said that the"}, {"max_tokens", 4}, {"temperature", 0}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["text"], alone("The jury said that the", 4));
  EXPECT_EQ(server_->stats().finished, 2);
  EXPECT_LT(server_->stats().generated_tokens, 500);  // not the 2000 asked for
}

TEST(ApiRequest, ParsesWhatOpenAIClientsSend) {
  const CompletionRequest r = parse_completion_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": " brief"}]},
          {"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": []}],
          "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "stop": ["x", "y"], "seed": 3,
          "stream": true, "stream_options": {"include_usage": true}, "logprobs": false, "n": 1})",
      true);
  EXPECT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "logprobs": true})", false), ApiError);  // completions: a count
  EXPECT_THROW(parse_completion_request(R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})", true),
               ApiError);  // needs logprobs: true
  EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true})", true).logprobs,
            0);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "stop": ["", "b"]})", false), ApiError);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", false), ApiError);
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["one"]})", false).prompt, "one");
}

}  // namespace
}  // namespace moeflux
