#include "gantry/common/units.h"

#include <cctype>
#include <cstdio>
#include <limits>

namespace gantry {
namespace {

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// The integer part of a decimal number at text[*pos...] as a 128-bit value (saturating just
// above the 64-bit range, which is all the callers need to report OutOfRange), and the
// fraction as digits over 10^frac_digits. False when there is no digit at all.
struct Decimal {
  unsigned __int128 whole = 0;
  unsigned __int128 frac = 0;
  unsigned __int128 frac_scale = 1;
  bool has_fraction = false;
};

constexpr unsigned __int128 kSaturate = static_cast<unsigned __int128>(1) << 100;

bool ParseDecimal(std::string_view text, size_t* pos, Decimal* out) {
  size_t i = *pos;
  bool digits = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (out->whole < kSaturate) out->whole = out->whole * 10 + (text[i] - '0');
    digits = true;
    ++i;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    out->has_fraction = true;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      // 18 digits of fraction are finer than any unit we multiply by can show.
      if (out->frac_scale < static_cast<unsigned __int128>(1000000000000000000ull)) {
        out->frac = out->frac * 10 + (text[i] - '0');
        out->frac_scale *= 10;
      }
      digits = true;
      ++i;
    }
  }
  *pos = i;
  return digits;
}

}  // namespace

Result<uint64_t> ParseBytes(std::string_view text) {
  const std::string example = " (e.g. 4096, 512K, 16M, 1.5G, 100GiB)";
  if (text.empty()) return InvalidArgument("size is empty" + example);
  if (text.front() == '-') return InvalidArgument("size " + Quoted(text) + " is negative");
  size_t pos = 0;
  Decimal d;
  if (!ParseDecimal(text, &pos, &d)) {
    return InvalidArgument("size " + Quoted(text) + " is not a number" + example);
  }
  std::string unit;
  for (size_t i = pos; i < text.size(); ++i) unit += Lower(text[i]);
  unsigned __int128 scale = 1;
  if (!unit.empty() && unit != "b") {
    int power = 0;
    switch (unit[0]) {
      case 'k':
        power = 1;
        break;
      case 'm':
        power = 2;
        break;
      case 'g':
        power = 3;
        break;
      case 't':
        power = 4;
        break;
      case 'p':
        power = 5;
        break;
      case 'e':
        power = 6;
        break;
      default:
        power = 0;
    }
    const std::string_view rest = std::string_view(unit).substr(1);
    if (power == 0 || !(rest.empty() || rest == "i" || rest == "ib" || rest == "b")) {
      return InvalidArgument("size " + Quoted(text) + ": unknown unit '" +
                             std::string(text.substr(pos)) +
                             "' (known: K, M, G, T, P, E; KiB "
                             "and KB are the same, 1024)");
    }
    for (int i = 0; i < power; ++i) scale *= 1024;
  } else if (d.has_fraction && d.frac != 0) {
    return InvalidArgument("size " + Quoted(text) + " is a fraction of a byte");
  }
  const unsigned __int128 bytes = d.whole * scale + d.frac * scale / d.frac_scale;
  if (d.whole >= kSaturate || bytes > std::numeric_limits<uint64_t>::max()) {
    return OutOfRange("size " + Quoted(text) + " is too large (at most 2^64 - 1 bytes, 16 EiB)");
  }
  return static_cast<uint64_t>(bytes);
}

Result<int64_t> ParseDurationSeconds(std::string_view text) {
  const std::string example = " (e.g. 3600, 90s, 15m, 1h, 1h30m, 2d)";
  if (text.empty()) return InvalidArgument("duration is empty" + example);
  if (text.front() == '-') return InvalidArgument("duration " + Quoted(text) + " is negative");
  unsigned __int128 total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    Decimal d;
    if (!ParseDecimal(text, &pos, &d) || d.has_fraction) {
      return InvalidArgument("duration " + Quoted(text) + " is not a whole number of units" +
                             example);
    }
    const size_t unit_start = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos]))) ++pos;
    std::string unit;
    for (size_t i = unit_start; i < pos; ++i) unit += Lower(text[i]);
    unsigned __int128 scale = 0;
    if (unit.empty() && pos == text.size() && unit_start == pos && total == 0) {
      scale = 1;  // a bare number is seconds
    } else if (unit == "s" || unit == "sec") {
      scale = 1;
    } else if (unit == "m" || unit == "min") {
      scale = 60;
    } else if (unit == "h") {
      scale = 3600;
    } else if (unit == "d") {
      scale = 86400;
    } else if (unit == "w") {
      scale = 7 * 86400;
    } else {
      return InvalidArgument("duration " + Quoted(text) + ": unknown unit '" +
                             std::string(text.substr(unit_start, pos - unit_start)) +
                             "' (known: s, m, h, d, w)");
    }
    if (d.whole >= kSaturate) total = kSaturate;
    total += d.whole * scale;
    if (total > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
      return OutOfRange("duration " + Quoted(text) + " is too long (at most 2^63 - 1 seconds)");
    }
  }
  return static_cast<int64_t>(total);
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

std::string FormatDurationSeconds(int64_t seconds) {
  if (seconds == 0) return "0s";
  if (seconds < 0) {
    return "-" + FormatDurationSeconds(seconds == std::numeric_limits<int64_t>::min()
                                           ? std::numeric_limits<int64_t>::max()
                                           : -seconds);
  }
  static const struct {
    int64_t size;
    const char* name;
  } kUnits[] = {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}};
  std::string out;
  for (const auto& u : kUnits) {
    if (seconds >= u.size) {
      out += std::to_string(seconds / u.size) + u.name;
      seconds %= u.size;
    }
  }
  return out;
}

}  // namespace gantry
