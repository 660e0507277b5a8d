#include "gantry/ckpt/env_options.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace gantry::ckpt {
namespace {

// A non-empty value, or nullopt.
std::optional<std::string> Get(const EnvLookup& lookup, const char* name) {
  std::optional<std::string> v = lookup(name);
  if (!v.has_value() || v->empty()) return std::nullopt;
  return v;
}

Result<int> ParseInt(const char* name, const std::string& value, int min) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno == ERANGE || v < min ||
      v > std::numeric_limits<int>::max()) {
    return InvalidArgument("environment variable " + std::string(name) + "='" + value +
                           "' is not an integer of at least " + std::to_string(min));
  }
  return static_cast<int>(v);
}

}  // namespace

std::vector<std::string> SplitPeerList(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    if (comma > start) out.emplace_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::optional<std::string> ProcessEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

CkptEnvDefaults ReadCkptEnvDefaults(const EnvLookup& lookup) {
  CkptEnvDefaults d;
  if (auto v = Get(lookup, kEnvRoot)) d.root = *v;
  if (auto v = Get(lookup, kEnvLocal)) d.local = *v;
  if (auto v = Get(lookup, kEnvJob)) d.job = *v;
  if (auto v = Get(lookup, kEnvPeers)) d.peers = SplitPeerList(*v);
  return d;
}

Result<int> RankFromEnv(const EnvLookup& lookup) {
  if (auto v = Get(lookup, kEnvRank)) return ParseInt(kEnvRank, *v, 0);
  return 0;
}

Result<int> WorldSizeFromEnv(const EnvLookup& lookup) {
  if (auto v = Get(lookup, kEnvWorldSize)) return ParseInt(kEnvWorldSize, *v, 1);
  return 1;
}

}  // namespace gantry::ckpt
