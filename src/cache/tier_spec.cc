#include "gantry/cache/tier_spec.h"

#include <set>

#include "gantry/common/units.h"

namespace gantry {

Result<TierOptions> ParseTierSpec(std::string_view spec, size_t index) {
  const std::string where = "tier '" + std::string(spec) + "'";
  TierOptions t;
  std::set<std::string> seen;
  size_t start = 0;
  bool first = true;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view part = spec.substr(start, comma - start);
    start = comma + 1;
    if (first) {
      t.url = std::string(part);
      first = false;
      continue;
    }
    if (part.empty()) continue;  // "url,durable," and "url,,durable" mean what they say
    const size_t eq = part.find('=');
    const std::string key(part.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (!seen.insert(key).second) {
      return InvalidArgument(where + ": '" + key + "' is given twice");
    }
    if (key == "durable" && eq == std::string_view::npos) {
      t.durable = true;
    } else if (key == "name" && eq != std::string_view::npos) {
      if (value.empty()) return InvalidArgument(where + ": name= is empty");
      t.name = std::string(value);
    } else if (key == "capacity" && eq != std::string_view::npos) {
      Result<uint64_t> bytes = ParseBytes(value);
      if (!bytes.ok()) {
        return Status(bytes.status().code(), where + ": capacity: " + bytes.status().message());
      }
      t.capacity_bytes = *bytes;
    } else if (key == "codec" && eq != std::string_view::npos) {
      Result<Codec> codec = ParseCodec(value);
      if (!codec.ok()) return codec.status().WithContext(where);
      t.codec = *codec;
    } else {
      return InvalidArgument(where + ": unknown setting '" + std::string(part) +
                             "' (known: name=N, capacity=SIZE, durable, codec=none|lz4|zstd)");
    }
  }
  if (t.url.empty()) return InvalidArgument(where + " has no URL");
  if (t.name.empty()) t.name = "tier" + std::to_string(index);
  return t;
}

Result<std::vector<TierOptions>> ParseTierSpecs(const std::vector<std::string>& specs) {
  if (specs.empty()) {
    return InvalidArgument(
        "no tiers: give one spec per tier, fastest first, as "
        "URL[,capacity=SIZE][,durable]");
  }
  std::vector<TierOptions> tiers;
  std::set<std::string> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    GANTRY_ASSIGN_OR_RETURN(TierOptions t, ParseTierSpec(specs[i], i));
    if (!names.insert(t.name).second) {
      return InvalidArgument("tier '" + specs[i] + "': another tier is already named '" + t.name +
                             "'");
    }
    tiers.push_back(std::move(t));
  }
  return tiers;
}

std::string FormatTierSpec(const TierOptions& tier) {
  std::string out = tier.url + ",name=" + tier.name;
  if (tier.capacity_bytes > 0) out += ",capacity=" + std::to_string(tier.capacity_bytes);
  if (tier.durable) out += ",durable";
  if (tier.codec != Codec::kNone) out += std::string(",codec=") + CodecName(tier.codec);
  return out;
}

}  // namespace gantry
