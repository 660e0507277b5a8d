// The `gantry` command line: each file registers one family of subcommands on the root app.
#pragma once

#include <CLI/CLI.hpp>

namespace gantry::cli {

void RegisterSimCommand(CLI::App& app);       // gantry sim          (sim_command.cc)
void RegisterTraceCommands(CLI::App& app);    // gantry trace ...    (trace_command.cc)
void RegisterSynthCommand(CLI::App& app);     // gantry trace synth  (synth_command.cc)
void RegisterClusterCommands(CLI::App& app);  // gantry cluster ...  (cluster_command.cc)
void RegisterStoreCommands(CLI::App& app);    // gantry store ...    (store_command.cc)
void RegisterCacheCommands(CLI::App& app);    // gantry cache ...    (cache_command.cc)

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;     // bad flags or arguments
inline constexpr int kExitBadInput = 3;  // malformed spec, trace or profile
inline constexpr int kExitFailure = 1;   // anything else

}  // namespace gantry::cli
