// Python-style JSON text (pyjson.h).
#include "data/pyjson.h"

#include <cstdio>

namespace gantry::data::internal {
namespace {

void AppendEscapedCodeUnit(std::string& out, unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", v);
  out += buf;
}

// Python's ensure_ascii: control characters and everything past ASCII as \uXXXX (UTF-16 code
// units, so a character past U+FFFF is a surrogate pair).
void AppendString(std::string& out, const std::string& s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            AppendEscapedCodeUnit(out, c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // nlohmann::json holds valid UTF-8 (it checks on parse and on dump), so decode it.
    unsigned cp = 0;
    size_t n = 0;
    if ((c & 0xe0) == 0xc0) {
      cp = c & 0x1f;
      n = 1;
    } else if ((c & 0xf0) == 0xe0) {
      cp = c & 0x0f;
      n = 2;
    } else {
      cp = c & 0x07;
      n = 3;
    }
    for (size_t k = 1; k <= n && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    }
    i += n + 1;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      AppendEscapedCodeUnit(out, 0xd800 + (cp >> 10));
      AppendEscapedCodeUnit(out, 0xdc00 + (cp & 0x3ff));
    } else {
      AppendEscapedCodeUnit(out, cp);
    }
  }
  out.push_back('"');
}

void Append(std::string& out, const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      out += "null";
      break;
    case nlohmann::json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case nlohmann::json::value_t::string:
      AppendString(out, v.get_ref<const std::string&>());
      break;
    case nlohmann::json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        Append(out, e);
      }
      out.push_back(']');
      break;
    }
    case nlohmann::json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        AppendString(out, k);
        out += ": ";
        Append(out, e);
      }
      out.push_back('}');
      break;
    }
    default:
      out += v.dump();  // integers (and, unused here, floats)
  }
}

}  // namespace

std::string PythonJsonDump(const nlohmann::json& value) {
  std::string out;
  Append(out, value);
  return out;
}

}  // namespace gantry::data::internal
