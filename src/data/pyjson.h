// JSON text as Python's json.dumps(obj, sort_keys=True) writes it (", " and ": " separators,
// non-ASCII as \uXXXX escapes), so that the index.json and shard headers Gantry writes are
// byte-for-byte what MosaicML Streaming's MDSWriter writes for the same settings. Private to
// src/data; pure, thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gantry::data::internal {

// Numbers must be integers (the MDS settings hold no floats); objects come out with sorted keys.
std::string PythonJsonDump(const nlohmann::json& value);

}  // namespace gantry::data::internal
