// Tier specs: the one-line form of a cache tier that the command line and config files use,
// `URL[,name=N][,capacity=SIZE][,durable][,codec=none|lz4|zstd]`, parsed into TierOptions.
//
//   GANTRY_ASSIGN_OR_RETURN(TierOptions t, ParseTierSpec("file:///nvme/cache,capacity=100G", 0));
//
// Sizes take units through ParseBytes ("9M", "100GiB"); a capacity too large for 64 bits is
// OutOfRange naming the value, never a silent wrap. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cache/chunk_store.h"
#include "gantry/common/status.h"

namespace gantry {

// One spec; `index` names an unnamed tier "tier<index>". InvalidArgument (naming the spec and
// the setting) for an empty URL, an unknown or repeated setting, a bad codec or size;
// OutOfRange for a capacity past 2^64 - 1 bytes.
Result<TierOptions> ParseTierSpec(std::string_view spec, size_t index);

// Every spec, fastest first; also InvalidArgument for none at all or two tiers with one name.
Result<std::vector<TierOptions>> ParseTierSpecs(const std::vector<std::string>& specs);

// The spec that parses back to `tier` (url, name, capacity, durable, codec).
std::string FormatTierSpec(const TierOptions& tier);

}  // namespace gantry
