// gantry: the command-line entry point. Subcommands live in *_command.cc beside this file.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Gantry: scheduling and data for GPU superclusters.", "gantry"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gantry 0.1.0");
  gantry::cli::RegisterSimCommand(app);
  gantry::cli::RegisterTraceCommands(app);
  gantry::cli::RegisterSynthCommand(app);
  gantry::cli::RegisterClusterCommands(app);
  gantry::cli::RegisterStoreCommands(app);
  gantry::cli::RegisterCacheCommands(app);
  gantry::cli::RegisterCkptCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    // A subcommand finished with its own exit code (kExitBadInput, ...); it printed the error.
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : gantry::cli::kExitUsage;
  }
  return 0;
}
