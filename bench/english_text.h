// A deterministic English-like text for benchmarks: Zipf-weighted common words in sentences
// and paragraphs, with capitals, punctuation, contractions and numbers. No downloads.
#pragma once
#include <cstddef>
#include <string>

namespace moeflux {

// About `bytes` bytes of text (whole paragraphs separated by blank lines); same seed, same text.
std::string english_text(size_t bytes, unsigned seed = 1);

}  // namespace moeflux
