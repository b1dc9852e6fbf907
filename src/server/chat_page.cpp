// The chat page of `moeflux serve` (GET /): one HTML file with its script, no external assets.
// It keeps the conversation in the page, sends it to /v1/chat/completions with stream: true,
// shows the answer as its chunks arrive and the decode speed when it ends; Enter sends,
// Shift+Enter breaks the line; an API key, when the server asks for one, is kept in the page.
#include "server/chat_page.h"

namespace moeflux {

const char* chat_page_html() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>moeflux chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 16px; background: #1f2933; color: #f5f7fa; display: flex; gap: 16px; align-items: center; }
  header .stats { margin-left: auto; font-size: 0.9em; opacity: 0.8; }
  #log { flex: 1; overflow-y: auto; padding: 16px; }
  .msg { max-width: 48em; margin: 0 0 12px; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #e4e7eb; margin-left: auto; }
  .assistant { background: #f0f4f8; border: 1px solid #d9e2ec; }
  .error { background: #ffe3e3; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid #d9e2ec; }
  textarea { flex: 1; resize: none; font: inherit; padding: 8px; }
  button { font: inherit; padding: 0 16px; }
</style>
</head>
<body>
<header><strong>moeflux</strong><span id="model"></span><button id="reset" type="button">New chat</button>
<span class="stats" id="stats"></span></header>
<div id="log"></div>
<form id="form"><textarea id="input" rows="2" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
<button id="send" type="submit">Send</button></form>
<script>
const log = document.getElementById("log"), input = document.getElementById("input");
const stats = document.getElementById("stats"), send = document.getElementById("send");
let messages = [], key = localStorage.getItem("moeflux-key") || "";
function headers() {
  const h = {"Content-Type": "application/json"};
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}
function bubble(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role;
  d.textContent = text;
  log.appendChild(d);
  log.scrollTop = log.scrollHeight;
  return d;
}
fetch("/v1/models", {headers: headers()}).then(r => r.json()).then(j => {
  if (j.data) document.getElementById("model").textContent = j.data[0].id;
}).catch(() => {});
document.getElementById("reset").onclick = () => { messages = []; log.innerHTML = ""; stats.textContent = ""; };
input.addEventListener("keydown", e => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); document.getElementById("form").requestSubmit(); }
});
document.getElementById("form").addEventListener("submit", async e => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || send.disabled) return;
  input.value = "";
  messages.push({role: "user", content: text});
  bubble("user", text);
  const out = bubble("assistant", "");
  send.disabled = true;
  const t0 = performance.now();
  let first = 0, tokens = 0, answer = "";
  try {
    let r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(),
      body: JSON.stringify({messages, stream: true, stream_options: {include_usage: true}})});
    if (r.status === 401) {
      key = prompt("API key") || "";
      localStorage.setItem("moeflux-key", key);
      r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(),
        body: JSON.stringify({messages, stream: true, stream_options: {include_usage: true}})});
    }
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const j = JSON.parse(line.slice(6));
        if (j.usage) tokens = j.usage.completion_tokens;
        const piece = j.choices.length ? (j.choices[0].delta.content || "") : "";
        if (piece) {
          if (!first) first = performance.now();
          answer += piece;
          out.textContent = answer;
          log.scrollTop = log.scrollHeight;
        }
      }
    }
    messages.push({role: "assistant", content: answer});
    const secs = (performance.now() - (first || t0)) / 1000;
    stats.textContent = tokens + " tokens, " + (tokens > 1 && secs > 0 ? ((tokens - 1) / secs).toFixed(1) : "-") +
      " tok/s, first token after " + (((first || performance.now()) - t0) / 1000).toFixed(2) + " s";
  } catch (err) {
    out.className = "msg error";
    out.textContent = String(err.message || err);
    messages.pop();
  }
  send.disabled = false;
  input.focus();
});
</script>
</body>
</html>
)HTML";
}

}  // namespace moeflux
