// What every `gantry` subcommand shares: the status -> exit code table, the error line, and
// flags with units (commands.h).
#include <cstdio>

#include "commands.h"
#include "gantry/common/units.h"

namespace gantry::cli {

int ExitCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
    case StatusCode::kAlreadyExists:
    case StatusCode::kUnimplemented:
      return kExitBadInput;
    case StatusCode::kUnavailable:
    case StatusCode::kInternal:
    case StatusCode::kIoError:
    case StatusCode::kResourceExhausted:
    case StatusCode::kPermissionDenied:
    case StatusCode::kDataLoss:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:
    case StatusCode::kCancelled:
      return kExitFailure;
  }
  return kExitFailure;
}

int ReportFailure(const std::string& command, const Status& s) {
  std::fprintf(stderr, "gantry %s: %s\n", command.c_str(), s.message().c_str());
  return ExitCodeFor(s.code());
}

void ExitWith(int code) {
  if (code != kExitOk) throw CLI::RuntimeError(code);
}

CLI::Option* AddSizeOption(CLI::App* cmd, const std::string& name, uint64_t* out,
                           const std::string& help) {
  CLI::Option* opt = cmd->add_option_function<std::string>(
      name,
      [out, name](const std::string& text) {
        Result<uint64_t> bytes = ParseBytes(text);
        if (!bytes.ok()) throw CLI::ValidationError(name, bytes.status().message());
        *out = *bytes;
      },
      help + " (units: K, M, G, T; e.g. 16M)");
  opt->default_str(FormatBytes(*out));
  opt->type_name("SIZE");
  return opt;
}

CLI::Option* AddDurationOption(CLI::App* cmd, const std::string& name, int64_t* out,
                               const std::string& help) {
  CLI::Option* opt = cmd->add_option_function<std::string>(
      name,
      [out, name](const std::string& text) {
        Result<int64_t> seconds = ParseDurationSeconds(text);
        if (!seconds.ok()) throw CLI::ValidationError(name, seconds.status().message());
        *out = *seconds;
      },
      help + " (units: s, m, h, d; e.g. 90s, 1h30m)");
  opt->default_str(FormatDurationSeconds(*out));
  opt->type_name("DURATION");
  return opt;
}

}  // namespace gantry::cli
