// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab, merges (as "a b" strings
// or [a, b] pairs), unk_token / fuse_unk, byte_fallback (<0xNN> tokens), ignore_merges,
// continuing_subword_prefix / end_of_word_suffix. Merging uses a heap over a linked list of
// symbols (O(n log n) per word), and repeated words hit a cache.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"

namespace moeflux {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static std::unique_ptr<BpeModel> from_json(const Json& model, const std::string& where);

  // Appends the ids of one pre-tokenised piece.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }  // max id + 1

 private:
  struct Merge {
    int32_t rank, new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;

  // Open-addressing table of merges keyed by pair_key (linear probing; kEmpty marks free
  // slots, never a real key since ids are below 2^31): the merge loop's only hot lookup.
  static constexpr uint64_t kEmpty = ~0ull;
  struct MergeSlot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  const Merge* find_merge(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & (merge_slots_.size() - 1)) {
      const MergeSlot& s = merge_slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  void build_merge_table();
  // Id of a one-character token by code point (for code points below kCharTable), -1 if none.
  static constexpr int32_t kCharTable = 0x800;
  std::vector<int32_t> char_ids_;

  TokenMap vocab_;
  std::vector<MergeSlot> merge_slots_;
  int merge_shift_ = 64;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string unk_token_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> token ids, -1 where absent

  static constexpr size_t kCacheMaxWord = 256, kCacheCapacity = 1 << 15;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace moeflux
