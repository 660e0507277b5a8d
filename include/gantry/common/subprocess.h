// Running other programs: capture a short helper's output, or hand this process over to another
// program (exec), the way `gantry ckpt export` hands over to Python. One careful copy of the
// fork/exec/pipe/waitpid details, so front ends hold none.
//
//   GANTRY_ASSIGN_OR_RETURN(std::string out, RunAndCapture({"/usr/bin/python3", "-c", code}));
//   return ExecReplacingThisProcess({"/usr/bin/python3", "-m", "gantry", "export", ...});
//
// argv[0] is a path (no PATH search). Thread-compatible: ExecReplacingThisProcess ends the
// process on success; RunAndCapture forks, which the caller must not do while other threads
// hold locks the child would need (the child only calls exec).
#pragma once

#include <string>
#include <vector>

#include "gantry/common/status.h"

namespace gantry {

// Runs argv to completion and returns what it wrote to stdout; stderr passes through to ours.
// NotFound if argv[0] cannot be executed (the child exits 127); IoError if it fails otherwise
// (nonzero exit or a signal, named in the message); IoError for pipe/fork failures.
Result<std::string> RunAndCapture(const std::vector<std::string>& argv);

// Flushes stdio and replaces this process with argv (execv), so the program's output, exit
// status and signals become this command's own. Returns only on failure: NotFound when argv[0]
// does not exist, PermissionDenied when it is not executable, IoError otherwise.
Status ExecReplacingThisProcess(const std::vector<std::string>& argv);

// The value of an environment variable, or `fallback` when it is unset or empty.
std::string GetEnvOr(const char* name, const std::string& fallback);

}  // namespace gantry
