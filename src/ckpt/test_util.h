// Helpers the checkpoint engine's tests share (tests only): tensors whose every element is
// known, a directory opened as an object store, and an engine opened or the test failed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gantry/ckpt/checkpoint.h"
#include "gantry/storage/object_store.h"

namespace gantry::ckpt::test_util {

// A float tensor whose every element is a function of (seed, index).
inline std::vector<float> Values(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = seed * 1000.0f + static_cast<float>(i % 9973);
  return v;
}

inline std::unique_ptr<ObjectStore> OpenDir(const std::string& path) {
  auto s = OpenObjectStore(path, {});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::unique_ptr<CheckpointEngine> MustOpen(EngineOptions o) {
  auto e = CheckpointEngine::Open(std::move(o));
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(*e) : nullptr;
}

}  // namespace gantry::ckpt::test_util
