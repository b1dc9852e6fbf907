// BPE model: loading from JSON and the heap-driven merge loop (lowest rank first, leftmost
// first among equal ranks, as Hugging Face's Word::merge_all).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace moeflux {

std::unique_ptr<BpeModel> BpeModel::from_json(const Json& m, const std::string& where) {
  auto bpe = std::make_unique<BpeModel>();
  if (const Json* d = json_opt(m, "dropout"))
    if (!d->is_number() || d->get<double>() != 0.0) fail(where, ".dropout: BPE dropout is not supported");
  const Json& vocab = json_field(m, "vocab", where);
  if (!vocab.is_object()) fail(where, ".vocab: expected an object");
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = json_int(it.value(), where + ".vocab[\"" + it.key() + "\"]");
    // Ids index a table: keep them dense enough that a hostile file cannot demand gigabytes.
    if (id < 0 || id >= static_cast<int64_t>(vocab.size()) + (1 << 20))
      fail(where, ".vocab[\"", it.key(), "\"]: id ", id, " out of range");
    bpe->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe->has_id_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : bpe->vocab_) {
    bpe->id_to_token_[static_cast<size_t>(id)] = tok;
    bpe->has_id_[static_cast<size_t>(id)] = true;
  }

  if (const Json* p = json_opt(m, "continuing_subword_prefix")) bpe->prefix_ = json_string(*p, where + ".continuing_subword_prefix");
  if (const Json* s = json_opt(m, "end_of_word_suffix")) bpe->suffix_ = json_string(*s, where + ".end_of_word_suffix");
  bpe->fuse_unk_ = json_bool(m, "fuse_unk", false, where);
  bpe->byte_fallback_ = json_bool(m, "byte_fallback", false, where);
  bpe->ignore_merges_ = json_bool(m, "ignore_merges", false, where);
  if (const Json* u = json_opt(m, "unk_token")) {
    bpe->unk_token_ = json_string(*u, where + ".unk_token");
    if (auto id = bpe->token_to_id(bpe->unk_token_)) bpe->unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto id = bpe->token_to_id(name);
    bpe->byte_ids_[static_cast<size_t>(b)] = id ? *id : -1;
  }

  const Json* merges = json_opt(m, "merges");
  if (!merges) {
    bpe->build_merge_table();
    return bpe;
  }
  if (!merges->is_array()) fail(where, ".merges: expected an array");
  bpe->merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const Json& e = (*merges)[rank];
    const std::string at = cat(where, ".merges[", rank, "]");
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail(at, ": expected \"a b\" (two tokens separated by one space)");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = json_string(e[0], at + "[0]");
      b = json_string(e[1], at + "[1]");
    } else {
      fail(at, ": expected a string or a pair of strings");
    }
    auto ia = bpe->token_to_id(a), ib = bpe->token_to_id(b);
    if (!ia || !ib) fail(at, ": token '", ia ? b : a, "' is not in the vocab");
    if (b.compare(0, bpe->prefix_.size(), bpe->prefix_) != 0) fail(at, ": '", b, "' lacks the continuing prefix");
    const std::string merged = a + b.substr(bpe->prefix_.size());
    auto in = bpe->token_to_id(merged);
    if (!in) fail(at, ": merged token '", merged, "' is not in the vocab");
    bpe->merges_[pair_key(*ia, *ib)] = Merge{static_cast<int32_t>(rank), *in};
  }
  bpe->build_merge_table();
  return bpe;
}

void BpeModel::build_merge_table() {
  size_t slots = 16;
  while (slots < 2 * merges_.size()) slots *= 2;
  merge_slots_.assign(slots, MergeSlot{});
  merge_shift_ = 64 - __builtin_ctzll(slots);
  for (const auto& [key, m] : merges_) {
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;
    while (merge_slots_[i].key != kEmpty) i = (i + 1) & (slots - 1);
    merge_slots_[i] = MergeSlot{key, m};
  }
  merges_.clear();
  char_ids_.assign(kCharTable, -1);
  if (!prefix_.empty() || !suffix_.empty()) return;  // characters then take a prefix or suffix
  std::string ch;
  for (int32_t cp = 0; cp < kCharTable; ++cp) {
    ch.clear();
    utf8_append(ch, cp);
    if (auto id = token_to_id(ch)) char_ids_[static_cast<size_t>(cp)] = *id;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWord;
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  encode_uncached(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(first), out.end()));
  }
}

namespace {
struct Symbol {
  int32_t id, prev, next;
  bool alive;
};
struct Candidate {
  int32_t rank, pos, new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};
}  // namespace

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> syms;
  thread_local std::string scratch;
  syms.clear();
  const auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, true});
  };
  // An unknown character leaves a pending <unk> (fused with the next unknown ones when
  // fuse_unk); it is written when a known character comes or the word ends. Fallback bytes do
  // not flush it, so they can come out before it: Hugging Face's order, kept on purpose.
  bool pending_unk = false;
  const auto known = [&](int32_t id) {
    if (pending_unk) push(*unk_id_);
    pending_unk = false;
    push(id);
  };
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    const size_t len = std::max<size_t>(1, utf8_valid_len(word, i));
    i = std::min(word.size(), i + len);
    std::string_view ch = word.substr(start, i - start);
    if (len <= 2) {  // code points below 0x800: one table lookup instead of hashing
      size_t k = start;
      const int32_t cp = len == 1 && static_cast<uint8_t>(word[start]) >= 0x80 ? -1 : utf8_next(word, k);
      if (cp >= 0 && cp < kCharTable && char_ids_[static_cast<size_t>(cp)] >= 0) {
        known(char_ids_[static_cast<size_t>(cp)]);
        continue;
      }
    }
    if (!prefix_.empty() || !suffix_.empty()) {
      scratch.clear();
      if (start > 0) scratch += prefix_;
      scratch += ch;
      if (i == word.size()) scratch += suffix_;
      ch = scratch;
    }
    if (auto id = token_to_id(ch)) {
      known(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all &= byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) push(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_token_.empty()) continue;  // no unk token: the character is dropped
    if (!unk_id_) fail("BPE unk_token '", unk_token_, "' is not in the vocab");
    if (pending_unk && !fuse_unk_) push(*unk_id_);
    pending_unk = true;
  }
  if (pending_unk) push(*unk_id_);
  for (size_t k = 0; k + 1 < syms.size(); ++k) syms[k].next = static_cast<int32_t>(k + 1);

  thread_local std::vector<Candidate> heap;  // a min-heap on (rank, pos) through std::*_heap
  heap.clear();
  const auto consider = [&](int32_t pos) {
    const Symbol& s = syms[static_cast<size_t>(pos)];
    if (s.next < 0) return;
    if (const Merge* m = find_merge(s.id, syms[static_cast<size_t>(s.next)].id)) {
      heap.push_back({m->rank, pos, m->new_id});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (size_t k = 0; k + 1 < syms.size(); ++k) consider(static_cast<int32_t>(k));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& s = syms[static_cast<size_t>(c.pos)];
    if (!s.alive || s.next < 0) continue;
    Symbol& n = syms[static_cast<size_t>(s.next)];
    const Merge* m = find_merge(s.id, n.id);
    if (!m || m->new_id != c.new_id) continue;  // stale entry
    s.id = c.new_id;
    n.alive = false;
    s.next = n.next;
    if (s.next >= 0) syms[static_cast<size_t>(s.next)].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (const Symbol& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace moeflux
