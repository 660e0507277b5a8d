// The `gantry` command line: each file registers one family of subcommands on the root app, and
// this header holds what they share — the exit codes and the one table that maps a Status to
// them, the error line format, and flags that take units. Commands parse flags, call the
// libraries and print; the logic they run lives in the libraries (storage, cache, ckpt, common)
// so the daemon and the Python module share it.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
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
void RegisterDataCommands(CLI::App& app);     // gantry data ...     (data_command.cc)
void RegisterQueueCommands(CLI::App& app);    // gantry queue|explain (queue_command.cc)

// Exit codes shared by all subcommands (docs/storage.md, "Exit codes", has the full table).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the operation failed, or found damage (verify)
inline constexpr int kExitUsage = 2;     // bad flags or arguments
inline constexpr int kExitBadInput = 3;  // the request cannot be honoured as given

// The one mapping from a status to an exit code:
//   3  InvalidArgument, NotFound, FailedPrecondition, OutOfRange, AlreadyExists, Unimplemented:
//      the input names something missing, malformed, refused or not possible here; rerunning
//      the same command cannot help.
//   1  everything else (IoError, Unavailable, DeadlineExceeded, Aborted, ResourceExhausted,
//      PermissionDenied, DataLoss, Internal, Cancelled): the environment or the data failed.
int ExitCodeFor(StatusCode code);

// Prints "gantry <command>: <what happened>" to stderr (the message only, no code name) and
// returns ExitCodeFor(s.code()).
int ReportFailure(const std::string& command, const Status& s);

// Ends the running subcommand's callback with `code` (main returns it); 0 returns normally.
void ExitWith(int code);

// Flags that take units: "--part-size 16M", "--grace 1h". The value is parsed when the command
// line is, so a bad one is a usage error (exit 2) naming the flag and the value.
CLI::Option* AddSizeOption(CLI::App* cmd, const std::string& name, uint64_t* out,
                           const std::string& help);
CLI::Option* AddDurationOption(CLI::App* cmd, const std::string& name, int64_t* out,
                               const std::string& help);

}  // namespace gantry::cli
