// ApiServer: routes, one Call per completion (the Batcher's callbacks fill it on the batcher's
// thread, the HTTP handler drains it), SSE streaming.
#include "server/api_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <random>

#include "core/error.h"
#include "server/api_request.h"
#include "server/chat_page.h"
#include "server/reply_stream.h"
#include "stream/expert_cache.h"
#include "text/generation.h"
#include "tokenizer/stream_decoder.h"

namespace moeflux {

using Json = nlohmann::ordered_json;

namespace {
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.json(), "application/json");
}

std::atomic<uint64_t> g_ids{0};

Json utf8_bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// OpenAI's logprobs of lps[from, to): chat {"content": [{token, logprob, bytes, top_logprobs}]},
// completions {tokens, token_logprobs, top_logprobs: [{token: logprob}]}.
Json logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps, size_t from, size_t to, bool chat) {
  auto text = [&](int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1)); };
  if (chat) {
    Json content = Json::array();
    for (size_t i = from; i < to; ++i) {
      Json top = Json::array();
      for (const auto& [id, lp] : lps[i].top)
        top.push_back({{"token", text(id)}, {"logprob", lp}, {"bytes", utf8_bytes(text(id))}});
      const std::string t = text(lps[i].token);
      content.push_back({{"token", t}, {"logprob", lps[i].logprob}, {"bytes", utf8_bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  Json tokens = Json::array(), lp = Json::array(), top = Json::array();
  for (size_t i = from; i < to; ++i) {
    tokens.push_back(text(lps[i].token));
    lp.push_back(lps[i].logprob);
    Json alts = Json::object();
    for (const auto& [id, l] : lps[i].top) alts[text(id)] = l;
    top.push_back(alts);
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}};
}

// OpenAI's tool_calls: [{(index,) id, type: "function", function: {name, arguments}}].
Json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& completion_id, bool indexed) {
  Json a = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = Json::object();
    if (indexed) c["index"] = i;
    c["id"] = "call_" + completion_id.substr(completion_id.find('-') + 1) + "_" + std::to_string(i);
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    a.push_back(c);
  }
  return a;
}

// cpp-httplib listens with a backlog of 5: a burst of clients overflows it and some of their
// connections are dropped. The listening socket is widened after the bind.
class Http : public httplib::Server {
 public:
  void widen_backlog(int n) { ::listen(svr_sock_, n); }
};
}  // namespace

// One completion in flight: text pieces from the batcher's thread to the HTTP handler's.
struct ApiServer::Call {
  Call(const Tokenizer& tok, std::vector<std::string> stops, bool tools) : reply(tok, std::move(stops), tools) {}
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  bool done = false;
  std::string finish = "length", error;
  GenUsage usage;
  std::vector<ToolCall> calls;  // set when done
  std::shared_ptr<GenRequest> req;
  ReplyStream reply;  // batcher thread only
  // logprobs: one entry per reported token, the ones not yet streamed from lp_sent on.
  std::vector<TokenLogprobs> lps;
  size_t lp_sent = 0;

  void push(std::string s) {
    if (s.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    pieces.push_back(std::move(s));
    cv.notify_all();
  }
  bool on_token(int32_t t) {
    std::string text;
    const bool more = reply.step(t, &text);
    push(std::move(text));
    return more;  // false ends the request (a stop string)
  }
  void on_done(FinishReason why, const GenUsage& u, const std::string& err) {
    push(reply.finish());
    std::lock_guard<std::mutex> lock(mu);
    calls = reply.tool_calls();
    finish = !calls.empty() ? "tool_calls"
             : reply.stopped() || why == FinishReason::Stop ? "stop"
             : why == FinishReason::Length ? "length"
                                           : finish_reason_name(why);
    usage = u, error = err, done = true;
    cv.notify_all();
  }
};

ApiServer::ApiServer(const Model& m, const Tokenizer& tok, std::optional<ChatTemplates> templates,
                     std::vector<int32_t> eos_ids, const ServeOptions& opt)
    : model_(m),
      tok_(tok),
      templates_(std::move(templates)),
      eos_ids_(std::move(eos_ids)),
      opt_(opt),
      engine_(m),
      batcher_(engine_, opt.batch),
      http_(std::make_unique<Http>()) {
  install_routes();
}

ApiServer::~ApiServer() { stop(); }

int ApiServer::start() {
  const int port = opt_.port == 0 ? http_->bind_to_any_port(opt_.host) : (http_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port < 0) fail("serve: cannot listen on ", opt_.host, ":", opt_.port, " (in use, or not an address of this machine)");
  static_cast<Http&>(*http_).widen_backlog(SOMAXCONN);
  batcher_.start();
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // stop() is a no-op for a server that is not listening yet: return once it is.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!http_->is_running()) fail("serve: the server on ", opt_.host, ":", port, " did not start listening");
  return port;
}

void ApiServer::stop() {
  // The listening socket, then the batcher, then the HTTP threads: what still generates or
  // waits in the queue ends as cancelled, so that a handler waiting for a whole answer answers
  // 503 at once instead of holding the shutdown until every queued generation is done.
  if (http_) http_->stop();
  batcher_.stop();
  if (thread_.joinable()) thread_.join();
}

void ApiServer::install_routes() {
  httplib::Server& s = *http_;
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };  // streams hold their thread
  s.set_payload_max_length(opt_.max_body);
  s.set_read_timeout(60, 0);  // a slow or busy client is not cut off after 5 s
  s.set_write_timeout(60, 0);
  s.set_keep_alive_timeout(1);  // an idle connection holds a shutdown this long at most
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "no route " + req.method + " " + req.path
                             : res.status == 413 ? "the request body is too large"
                                                 : "HTTP " + std::to_string(res.status);
    send_error(res, ApiError(res.status, what));
  });
  auto authorised = [this](const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + opt_.api_key) return true;
    ApiError e(401, "missing or incorrect API key (Authorization: Bearer KEY)");
    send_error(res, e);
    return false;
  };
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page_html(), "text/html; charset=utf-8");
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const BatcherStats st = batcher_.stats();
    std::string m;
    auto line = [&](const char* name, const char* type, double v) {
      m += std::string("# TYPE ") + name + " " + type + "\n" + name + " " + std::to_string(v) + "\n";
    };
    line("moeflux_requests_finished_total", "counter", double(st.finished));
    line("moeflux_prompt_tokens_total", "counter", double(st.prompt_tokens));
    line("moeflux_generated_tokens_total", "counter", double(st.generated_tokens));
    line("moeflux_steps_total", "counter", double(st.steps));
    line("moeflux_cached_prompt_tokens_total", "counter", double(st.cached_tokens));
    line("moeflux_step_seconds_total", "counter", st.step_s);
    line("moeflux_tokens_per_second", "gauge", st.step_s > 0 ? double(st.prompt_tokens + st.generated_tokens) / st.step_s : 0);
    line("moeflux_generated_tokens_per_second", "gauge", st.step_s > 0 ? double(st.generated_tokens) / st.step_s : 0);
    line("moeflux_slots_busy", "gauge", double(st.busy_slots));
    line("moeflux_queue_depth", "gauge", double(st.queued));
    line("moeflux_prefix_cache_hits_total", "counter", double(st.cache_hits));
    line("moeflux_prefix_cache_entries", "gauge", double(st.cache_entries));
    line("moeflux_prefix_cache_bytes", "gauge", double(st.cache_bytes));
    if (const auto* ec = dynamic_cast<const ExpertCache*>(model_.expert_source.get())) {
      const ExpertCacheStats es = ec->stats();
      line("moeflux_expert_cache_lookups_total", "counter", double(es.lookups));
      line("moeflux_expert_cache_hits_total", "counter", double(es.hits));
      line("moeflux_expert_cache_misses_total", "counter", double(es.misses));
      line("moeflux_expert_cache_hit_rate", "gauge", es.hit_rate());
      line("moeflux_expert_cache_resident_bytes", "gauge", double(es.resident_bytes));
    }
    res.set_content(m, "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this, authorised](const httplib::Request& req, httplib::Response& res) {
    if (!authorised(req, res)) return;
    const Json j = {{"object", "list"},
                    {"data", Json::array({{{"id", opt_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "moeflux"}}})}};
    res.set_content(dump(j), "application/json");
  });
  s.Get(R"(/v1/models/(.+))", [this, authorised](const httplib::Request& req, httplib::Response& res) {
    if (!authorised(req, res)) return;
    const std::string id = req.matches[1];
    if (id != opt_.model_name) {
      send_error(res, ApiError(404, "the model '" + id + "' does not exist (this server has '" + opt_.model_name + "')",
                               "model", "invalid_request_error"));
      return;
    }
    res.set_content(dump(Json{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "moeflux"}}), "application/json");
  });
  for (const bool chat : {true, false}) {
    s.Post(chat ? "/v1/chat/completions" : "/v1/completions", [this, chat, authorised](const httplib::Request& req,
                                                                                      httplib::Response& res) {
      if (!authorised(req, res)) return;
      try {
        const CompletionRequest cr = parse_completion_request(req.body, chat, opt_.sampling);
        if (!cr.model.empty() && cr.model != opt_.model_name)
          throw ApiError(400, "the model '" + cr.model + "' is not served here (this server has '" + opt_.model_name + "')",
                         "model", "invalid_request_error");
        std::string text = cr.prompt;
        if (chat) {
          if (!templates_) throw ApiError(400, "this model has no chat template: use /v1/completions");
          try {
            const bool offer = cr.tools.is_array() && cr.tool_choice != "none";
            Json messages = cr.messages;
            if (!opt_.system.empty() && messages[0]["role"] != "system")
              messages.insert(messages.begin(), Json{{"role", "system"}, {"content", opt_.system}});
            text = render_chat(*templates_, messages, offer ? cr.tools : Json(), true);
          } catch (const Error& e) {
            throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
          }
        }
        std::vector<int32_t> ids = tok_.encode(text);
        if (ids.empty()) throw ApiError(400, "the prompt is empty", chat ? "messages" : "prompt");
        const int64_t ctx = model_.cfg.max_seq_len, room = ctx - int64_t(ids.size());
        if (room < 1)
          throw ApiError(400, "the prompt has " + std::to_string(ids.size()) + " tokens; the model's context is " +
                                  std::to_string(ctx), chat ? "messages" : "prompt");
        const bool tools = chat && cr.tools.is_array() && !cr.tools.empty() && cr.tool_choice != "none";
        auto call = std::make_shared<Call>(tok_, cr.stop.empty() ? opt_.stop : cr.stop, tools);
        auto r = std::make_shared<GenRequest>();
        r->prompt = std::move(ids);
        const int64_t asked = cr.max_tokens ? *cr.max_tokens : opt_.max_tokens > 0 ? opt_.max_tokens : room;
        r->max_tokens = int(std::min<int64_t>(asked, room));
        r->sampling = cr.sampling;
        if (!cr.seeded && !opt_.seeded) r->sampling.seed = std::random_device{}();
        r->stop_ids = eos_ids_;
        r->on_token = [call](int32_t t) { return call->on_token(t); };
        r->logprobs = cr.logprobs;
        r->on_logprobs = [call](const TokenLogprobs& t) {
          std::lock_guard<std::mutex> lock(call->mu);
          call->lps.push_back(t);
        };
        r->on_done = [call](FinishReason why, const GenUsage& u, const std::string& err) { call->on_done(why, u, err); };
        call->req = r;
        if (!batcher_.submit(r)) {
          res.set_header("Retry-After", "1");
          throw ApiError(503, "all slots are busy and the queue is full; retry later", "", "server_busy");
        }
        const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++g_ids);
        const int64_t created = int64_t(std::time(nullptr));
        const std::string model = opt_.model_name;
        if (!cr.stream) {
          std::unique_lock<std::mutex> lock(call->mu);
          call->cv.wait(lock, [&] { return call->done; });
          std::string out;
          for (auto& p : call->pieces) out += p;
          if (call->finish == "error") throw ApiError(500, "generation failed: " + call->error, "", "server_error");
          if (call->finish == "cancelled") throw ApiError(503, "the server is stopping", "", "server_busy");
          const Json usage = {{"prompt_tokens", call->usage.prompt_tokens}, {"completion_tokens", call->usage.completion_tokens},
                              {"total_tokens", call->usage.prompt_tokens + call->usage.completion_tokens},
                              {"prompt_tokens_details", {{"cached_tokens", call->usage.cached_tokens}}}};
          Json choice = {{"index", 0}};
          if (chat) {
            choice["message"] = {{"role", "assistant"}, {"content", out}};
            if (!call->calls.empty()) {
              if (out.empty()) choice["message"]["content"] = nullptr;
              choice["message"]["tool_calls"] = tool_calls_json(call->calls, id, false);
            }
          }
          else choice["text"] = out;
          choice["logprobs"] = cr.logprobs >= 0 ? logprobs_json(tok_, call->lps, 0, call->lps.size(), chat) : Json();
          choice["finish_reason"] = call->finish;
          const Json j = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                          {"model", model}, {"choices", Json::array({choice})}, {"usage", usage}};
          res.set_content(dump(j), "application/json");
          return;
        }
        const bool include_usage = cr.include_usage;
        auto chunk = [=](const Json& delta_or_text, const Json& finish, const Json& logprobs = Json()) {
          Json choice = {{"index", 0}};
          if (chat) choice["delta"] = delta_or_text;
          else choice["text"] = delta_or_text;
          if (!logprobs.is_null()) choice["logprobs"] = logprobs;
          choice["finish_reason"] = finish;
          return "data: " + dump(Json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                      {"created", created}, {"model", model}, {"choices", Json::array({choice})}}) +
                 "\n\n";
        };
        res.set_header("Cache-Control", "no-cache");
        auto started = std::make_shared<bool>(false);
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, call, chat, chunk, include_usage, started, id, created, model,
             want_lp = cr.logprobs >= 0](size_t, httplib::DataSink& sink) {
              auto write = [&](const std::string& s) {
                if (sink.write(s.data(), s.size())) return true;
                call->req->cancel = true;  // the client is gone: free the slot
                return false;
              };
              if (chat && !*started && !write(chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
              *started = true;
              std::deque<std::string> out;
              bool done = false;
              Json lp;  // the logprobs of the tokens reported since the last chunk
              {
                std::unique_lock<std::mutex> lock(call->mu);
                call->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !call->pieces.empty() || call->done; });
                out.swap(call->pieces);
                done = call->done;
                if (want_lp && call->lp_sent < call->lps.size()) {
                  lp = logprobs_json(tok_, call->lps, call->lp_sent, call->lps.size(), chat);
                  call->lp_sent = call->lps.size();
                }
              }
              if (out.empty() && !lp.is_null()) out.emplace_back();  // text still held back: the logprobs alone
              for (size_t k = 0; k < out.size(); ++k)
                if (!write(chunk(chat ? Json{{"content", out[k]}} : Json(out[k]), nullptr, k == 0 ? lp : Json())))
                  return false;
              if (!done) return true;
              if (!call->calls.empty() && !write(chunk(Json{{"tool_calls", tool_calls_json(call->calls, id, true)}}, nullptr)))
                return false;
              if (!write(chunk(chat ? Json::object() : Json(""), call->finish))) return false;
              if (include_usage) {
                const Json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                                {"created", created}, {"model", model}, {"choices", Json::array()},
                                {"usage", {{"prompt_tokens", call->usage.prompt_tokens},
                                           {"completion_tokens", call->usage.completion_tokens},
                                           {"total_tokens", call->usage.prompt_tokens + call->usage.completion_tokens},
                                           {"prompt_tokens_details", {{"cached_tokens", call->usage.cached_tokens}}}}}};
                if (!write("data: " + dump(u) + "\n\n")) return false;
              }
              if (!write("data: [DONE]\n\n")) return false;
              sink.done();
              return true;
            },
            [call](bool success) {
              if (!success) call->req->cancel = true;
            });
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(400, e.what()));
      }
    });
  }
}

}  // namespace moeflux
