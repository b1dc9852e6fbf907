// Subcommands of the `moeflux` executable. Each registers its options on the app and returns
// the function that runs it; main() runs the chosen one and maps moeflux::Error to exit 1.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace moeflux::cli {

using Runner = std::function<int()>;

Runner register_logits(CLI::App& app);
Runner register_template(CLI::App& app);
Runner register_tokenize(CLI::App& app);
Runner register_run(CLI::App& app);
Runner register_chat(CLI::App& app);
Runner register_serve(CLI::App& app);
Runner register_perplexity(CLI::App& app);
Runner register_bench(CLI::App& app);
Runner register_convert(CLI::App& app);
Runner register_inspect(CLI::App& app);
Runner register_verify(CLI::App& app);
Runner register_synth(CLI::App& app);

}  // namespace moeflux::cli
