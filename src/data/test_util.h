// Helpers shared by the data module's tests (header-only, tests only): base64, JSONL reading and
// opening a directory as a read-only store, and small MDS and WebDataset datasets written
// into a directory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gantry/data/mds.h"
#include "gantry/data/webdataset.h"
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

inline std::unique_ptr<ObjectStore> Dir(const std::string& path) {
  auto s = OpenObjectStore("file://" + path, {});
  if (!s.ok()) throw std::runtime_error(s.status().ToString());
  return std::move(*s);
}

// An MDS dataset of `shards` shards of `per_shard` samples ("k<i>" -> 2000 bytes each), with
// xxh64 digests in its index unless not `hashed`; another `salt` changes every value, no size.
inline void WriteMds(const std::string& path, int shards, int per_shard, int salt = 0,
                     bool hashed = true) {
  auto store = Dir(path);
  MdsWriterOptions o;
  o.columns = {{"__key__", "str"}, {"v", "bytes"}};
  if (hashed) o.hashes = {"xxh64"};
  // A sample takes about 2016 bytes (value, key, sizes, offset); the shard's header and config
  // take well under 1000: this cuts exactly per_shard samples per shard.
  o.size_limit = static_cast<uint64_t>(per_shard) * 2016 + 1000;
  auto w = MdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < shards * per_shard; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(
        (*w)->Write({{"__key__", key}, {"v", std::string(2000, static_cast<char>(i + salt))}})
            .ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  ASSERT_EQ((*w)->index().shards.size(), static_cast<size_t>(shards));
}

// A WebDataset of `shards` tar shards of `per_shard` samples ("k<i>" -> a 300-byte text);
// another `salt` changes every text but no size.
inline void WriteWds(const std::string& path, int shards, int per_shard, int salt = 0) {
  auto store = Dir(path);
  WdsWriterOptions o;
  o.max_samples = per_shard;
  auto w = WdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < shards * per_shard; ++i) {
    ASSERT_TRUE(
        (*w)->Write("k" + std::to_string(i), {{"txt", std::string(300, 'a' + (i + salt) % 26)}})
            .ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

// The dataset's shard files ("shard*", not its index), sorted, and their stored bytes.
inline std::vector<std::string> ShardFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("shard", 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
inline uint64_t ShardBytesIn(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& f : ShardFiles(dir)) total += std::filesystem::file_size(f);
  return total;
}

inline std::string FixturesDir() { return std::string(GANTRY_SOURCE_DIR) + "/testdata/datasets"; }

}  // namespace gantry::data::test
