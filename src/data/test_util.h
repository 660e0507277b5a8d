// Helpers shared by the data module's tests (header-only, tests only): base64, JSONL reading and
// opening a directory as a read-only store.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gantry/storage/object_store.h"

namespace gantry::data::test {

inline std::string Base64Decode(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) throw std::runtime_error("bad base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

inline std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

inline std::unique_ptr<ObjectStore> OpenDir(const std::string& dir, bool create = false) {
  StoreOptions o;
  o.create_root = create;
  auto s = OpenObjectStore("file://" + dir, o);
  if (!s.ok()) throw std::runtime_error(s.status().ToString());
  return std::move(*s);
}

inline std::string FixturesDir() { return std::string(GANTRY_SOURCE_DIR) + "/testdata/datasets"; }

}  // namespace gantry::data::test
