#include "gantry/common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>

namespace gantry {
namespace {

TEST(ThreadPool, RunsEveryTaskAndReturnsResults) {
  std::atomic<int> sum{0};
  std::vector<std::future<int>> results;
  {
    ThreadPool pool(4);
    for (int i = 1; i <= 100; ++i) {
      results.push_back(pool.Submit([i, &sum] {
        sum += i;
        return i * 2;
      }));
    }
    int total = 0;
    for (auto& f : results) total += f.get();
    EXPECT_EQ(total, 2 * 5050);
  }
  EXPECT_EQ(sum.load(), 5050);
}

TEST(ThreadPool, DestructorDrainsQueuedTasks) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) pool.Submit([&done] { ++done; });
  }
  EXPECT_EQ(done.load(), 50);
}

}  // namespace
}  // namespace gantry
