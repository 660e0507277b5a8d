// The checkpoint defaults a job's environment supplies: one reading of GANTRY_CKPT_ROOT,
// GANTRY_CKPT_LOCAL, GANTRY_CKPT_JOB, GANTRY_CKPT_PEERS, RANK and WORLD_SIZE, shared by
// `gantry ckpt`, the Python Checkpointer (through the binding) and the coming daemon, so one
// environment means the same checkpointer everywhere.
//
//   const CkptEnvDefaults env = ReadCkptEnvDefaults();
//   if (flags.root.empty()) flags.root = env.root;
//   GANTRY_ASSIGN_OR_RETURN(int rank, RankFromEnv());
//
// Pure functions over a lookup; thread-safe as far as getenv is (nothing here calls setenv).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry::ckpt {

inline constexpr const char* kEnvRoot = "GANTRY_CKPT_ROOT";
inline constexpr const char* kEnvLocal = "GANTRY_CKPT_LOCAL";
inline constexpr const char* kEnvJob = "GANTRY_CKPT_JOB";
inline constexpr const char* kEnvPeers = "GANTRY_CKPT_PEERS";
inline constexpr const char* kEnvRank = "RANK";
inline constexpr const char* kEnvWorldSize = "WORLD_SIZE";

// What the environment says; a variable that is unset or empty leaves the default.
struct CkptEnvDefaults {
  std::string root;                // GANTRY_CKPT_ROOT; empty: none (callers must ask for one)
  std::string local;               // GANTRY_CKPT_LOCAL; empty: no local tier
  std::string job = "default";     // GANTRY_CKPT_JOB
  std::vector<std::string> peers;  // GANTRY_CKPT_PEERS, comma-separated, empty items dropped
};

// A variable's value, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
// The process environment (getenv).
std::optional<std::string> ProcessEnv(const char* name);

CkptEnvDefaults ReadCkptEnvDefaults(const EnvLookup& lookup = ProcessEnv);

// This process's rank and the world size as launchers set them (RANK, 0 when unset; WORLD_SIZE,
// 1 when unset). Separate from the rest because only a caller that uses them may fail on them:
// InvalidArgument naming the variable and its value when it is not an integer (a rank at
// least 0, a world size at least 1).
Result<int> RankFromEnv(const EnvLookup& lookup = ProcessEnv);
Result<int> WorldSizeFromEnv(const EnvLookup& lookup = ProcessEnv);

// "http://a:7070,,http://b:7070" -> {"http://a:7070", "http://b:7070"}.
std::vector<std::string> SplitPeerList(std::string_view list);

// The one line every front end prints when no root is given or set.
inline constexpr const char* kNoRootHint =
    "no checkpoint root: pass one (a path, file:///dir or s3://bucket/prefix) or set "
    "GANTRY_CKPT_ROOT";

}  // namespace gantry::ckpt
