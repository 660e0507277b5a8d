// Sizes and durations as people type and read them: one parser for every flag and spec field
// that takes "16M", "100GiB" or "1h30m", and one formatter for tables ("1.50 GiB"). Pure
// functions, thread-safe.
//
//   GANTRY_ASSIGN_OR_RETURN(uint64_t part, ParseBytes("16M"));        // 16777216
//   GANTRY_ASSIGN_OR_RETURN(int64_t grace, ParseDurationSeconds("1h"));  // 3600
//   std::puts(FormatBytes(part).c_str());                                 // "16.0 MiB"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gantry/common/status.h"

namespace gantry {

// Bytes from "4096", "512K", "16M", "1.5G", "100GiB", "2TB", "1P". Every unit is binary (K is
// 1024, as in the tier specs and `ls -h`); the letter may be followed by "i", "iB" or "B" and
// is case-insensitive; a bare "B" means bytes. A fraction is allowed with a unit ("1.5G") and
// rounds down to whole bytes.
// InvalidArgument: empty, not a number, negative, unknown unit, a fraction of a byte.
// OutOfRange: more than 2^64 - 1 bytes (the message names the value).
Result<uint64_t> ParseBytes(std::string_view text);

// Seconds from "3600", "90s", "15m", "1h", "2d", "1w" or a sum of such terms ("1h30m").
// InvalidArgument: empty, not a number, negative, unknown unit ("ms" is too fine for the grace
// periods and timeouts this parses). OutOfRange: more than 2^63 - 1 seconds.
Result<int64_t> ParseDurationSeconds(std::string_view text);

// "812 B", "64.0 KiB", "1.50 GiB" (binary units; two decimals below 10, one above).
std::string FormatBytes(uint64_t bytes);

// "45s", "15m", "1h30m", "2d3h" (the largest units first, zero terms left out; "0s" for 0).
std::string FormatDurationSeconds(int64_t seconds);

}  // namespace gantry
