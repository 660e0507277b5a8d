// The `gantry` command line: each file registers one family of subcommands on the root app.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "gantry/common/status.h"

namespace gantry::cli {

void RegisterSimCommand(CLI::App& app);       // gantry sim          (sim_command.cc)
void RegisterTraceCommands(CLI::App& app);    // gantry trace ...    (trace_command.cc)
void RegisterSynthCommand(CLI::App& app);     // gantry trace synth  (synth_command.cc)
void RegisterClusterCommands(CLI::App& app);  // gantry cluster ...  (cluster_command.cc)
void RegisterStoreCommands(CLI::App& app);    // gantry store ...    (store_command.cc)
void RegisterCacheCommands(CLI::App& app);    // gantry cache ...    (cache_command.cc)
void RegisterCkptCommands(CLI::App& app);     // gantry ckpt ...     (ckpt_command.cc)

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;     // bad flags or arguments
inline constexpr int kExitBadInput = 3;  // malformed spec, trace or profile
inline constexpr int kExitFailure = 1;   // anything else

// Prints "gantry <command>: <status>" to stderr and returns the exit code the status maps to:
// bad input (invalid, missing, refused) or failure.
inline int ReportFailure(const std::string& command, const Status& s) {
  std::fprintf(stderr, "gantry %s: %s\n", command.c_str(), s.ToString().c_str());
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

}  // namespace gantry::cli
