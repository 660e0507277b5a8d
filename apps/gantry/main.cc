// gantry: the command-line entry point. Subcommands live in *_command.cc beside this file.
#include <CLI/CLI.hpp>

#include "commands.h"

namespace {

// "ckpt gc": the subcommands parsed so far, for the error line of a usage error.
std::string CommandPath(const CLI::App* app) {
  std::string path;
  for (;;) {
    std::vector<const CLI::App*> parsed =
        app->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    if (parsed.empty()) return path;
    app = parsed.front();
    path += (path.empty() ? "" : " ") + app->get_name();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gantry: scheduling and data for GPU superclusters.", "gantry"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gantry 0.1.0");
  // Usage errors read like every other error: "gantry ckpt gc: --grace: duration ...".
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    const std::string path = CommandPath(root);
    return "gantry" + (path.empty() ? std::string() : " " + path) + ": " + e.what() +
           "\nRun 'gantry" + (path.empty() ? std::string() : " " + path) +
           " --help' for usage and examples.\n";
  });
  gantry::cli::RegisterSimCommand(app);
  gantry::cli::RegisterTraceCommands(app);
  gantry::cli::RegisterSynthCommand(app);
  gantry::cli::RegisterClusterCommands(app);
  gantry::cli::RegisterStoreCommands(app);
  gantry::cli::RegisterCacheCommands(app);
  gantry::cli::RegisterCkptCommands(app);
  gantry::cli::RegisterDataCommands(app);
  gantry::cli::RegisterQueueCommands(app);
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
