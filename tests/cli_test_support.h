// Helpers of the end-to-end tests that run the real `gantry` binary (header-only): run a shell
// command line under a timeout and capture its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gantry::cli_test {

struct CliRun {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Single-quoted for the shell (the paths of these tests hold no quote).
inline std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Runs `command` under a timeout (a hang fails the test instead of stalling it), stderr into
// `err_file`, and returns what it printed.
inline CliRun RunShell(const std::string& command, const std::filesystem::path& err_file,
                       int timeout_seconds = 60) {
  const std::string cmd = "timeout " + std::to_string(timeout_seconds) + " " + command + " 2>" +
                          Quote(err_file.string());
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "", "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, ReadFile(err_file)};
}

}  // namespace gantry::cli_test
