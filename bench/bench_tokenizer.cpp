// bench_tokenizer: single-core encode / decode speed of the real tokenizers on generated English
// text (bench/english_text.h), as a table: MB/s (mean +- sd over repeats, warm BPE cache), the
// first cold run, tokens/s and load time. scripts/bench_tokenizer_hf.py measures Hugging Face
// `tokenizers` on the same text (--write-text FILE writes it). Run: build/bench/bench_tokenizer
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "english_text.h"
#include "tokenizer/tokenizer.h"

namespace {

// Process CPU time, not wall time: on a shared machine it still measures one core's work
// (equal to wall time on an idle one). The HF script uses time.process_time() likewise.
double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Paragraphs (each keeps its trailing blank line): the unit a server would encode.
std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

void usage() {
  std::fprintf(stderr,
               "usage: bench_tokenizer [--mb N] [--reps R] [--text FILE] [--write-text FILE] [TOKENIZER_PATH...]\n");
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 2.0;
  int reps = 5;
  std::string text_file, write_text;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--mb" && has) mb = std::atof(argv[++i]);
    else if (a == "--reps" && has) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--text" && has) text_file = argv[++i];
    else if (a == "--write-text" && has) write_text = argv[++i];
    else if (!a.empty() && a[0] != '-') paths.push_back(a);
    else return usage(), 2;
  }
  std::string text;
  if (!text_file.empty()) {
    std::ifstream f(text_file, std::ios::binary);
    if (!f) return std::fprintf(stderr, "cannot read %s\n", text_file.c_str()), 1;
    std::ostringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  } else {
    text = moeflux::english_text(static_cast<size_t>(mb * 1e6));
  }
  if (!write_text.empty()) {
    std::ofstream(write_text, std::ios::binary) << text;
    std::printf("wrote %zu bytes to %s\n", text.size(), write_text.c_str());
    return 0;
  }
  if (paths.empty())
    for (const char* n : {"qwen3", "deepseek_v3", "llama2"}) paths.push_back(std::string(MOEFLUX_TOKENIZER_DATA) + "/" + n);
  const auto paras = paragraphs(text);
  const double bytes = static_cast<double>(text.size());
  std::printf("text: %.2f MB English, %zu paragraphs; one thread, CPU time; %d warm repeats\n", bytes / 1e6, paras.size(), reps);
  std::printf("%-14s %8s %14s %12s %12s %12s %14s\n", "tokenizer", "load s", "encode MB/s", "cold MB/s",
              "Mtok/s", "bytes/tok", "decode MB/s");
  for (const auto& path : paths) {
    try {
      double t0 = now_s();
      const auto tok = moeflux::Tokenizer::load(path);
      const double load = now_s() - t0;
      std::vector<std::vector<int32_t>> ids(paras.size());
      std::vector<double> rates;
      double cold = 0;
      size_t n_tokens = 0;
      for (int r = 0; r <= reps; ++r) {
        t0 = now_s();
        n_tokens = 0;
        for (size_t k = 0; k < paras.size(); ++k) {
          ids[k] = tok.encode(paras[k]);
          n_tokens += ids[k].size();
        }
        const double rate = bytes / (now_s() - t0) / 1e6;
        if (r == 0) cold = rate;
        else rates.push_back(rate);
      }
      double mean = 0, var = 0;
      for (double x : rates) mean += x / static_cast<double>(rates.size());
      for (double x : rates) var += (x - mean) * (x - mean) / static_cast<double>(rates.size());
      t0 = now_s();
      size_t out_bytes = 0;
      for (const auto& v : ids) out_bytes += tok.decode(v).size();
      const double dec = static_cast<double>(out_bytes) / (now_s() - t0) / 1e6;
      const std::string name = path.substr(path.find_last_of('/') + 1);
      char enc[32];
      std::snprintf(enc, sizeof(enc), "%.2f +- %.2f", mean, std::sqrt(var));
      std::printf("%-14s %8.2f %14s %12.2f %12.3f %12.2f %14.2f\n", name.c_str(), load, enc, cold,
                  mean * 1e6 / (bytes / static_cast<double>(n_tokens)) / 1e6, bytes / static_cast<double>(n_tokens), dec);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  return 0;
}
