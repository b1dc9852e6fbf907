// placeholder
#include "cli/commands.h"
namespace moeflux::cli {
Runner register_synth(CLI::App& app) { app.add_subcommand("synth", "x"); return [] { return 0; }; }
}
