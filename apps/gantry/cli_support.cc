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

namespace {

// A flag whose text `parse` turns into *out when the command line is parsed; a value it refuses
// is a usage error naming the flag.
template <typename T, typename Parse, typename Format>
CLI::Option* AddParsedOption(CLI::App* cmd, const std::string& name, T* out,
                             const std::string& help, const char* type, Parse parse,
                             Format format) {
  CLI::Option* opt = cmd->add_option_function<std::string>(
      name,
      [out, name, parse](const std::string& text) {
        Result<T> value = parse(text);
        if (!value.ok()) throw CLI::ValidationError(name, value.status().message());
        *out = *value;
      },
      help);
  opt->default_str(format(*out));
  opt->type_name(type);
  return opt;
}

}  // namespace

CLI::Option* AddSizeOption(CLI::App* cmd, const std::string& name, uint64_t* out,
                           const std::string& help) {
  return AddParsedOption(
      cmd, name, out, help + " (units: K, M, G, T; e.g. 16M)", "SIZE",
      [](const std::string& t) { return ParseBytes(t); }, FormatBytes);
}

CLI::Option* AddDurationOption(CLI::App* cmd, const std::string& name, int64_t* out,
                               const std::string& help) {
  return AddParsedOption(
      cmd, name, out, help + " (units: s, m, h, d; e.g. 90s, 1h30m)", "DURATION",
      [](const std::string& t) { return ParseDurationSeconds(t); }, FormatDurationSeconds);
}

}  // namespace gantry::cli
