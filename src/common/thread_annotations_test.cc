// Tests of the annotated Mutex, MutexLock and CondVar (the annotations themselves are checked
// at compile time: see tests/thread_annotations_misuse.cc).
#include "gantry/common/thread_annotations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

namespace gantry {
namespace {

class Queue {
 public:
  void Push(int v) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    items_.push_back(v);
    cv_.NotifyOne();
  }
  int Pop() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (items_.empty()) cv_.Wait(mu_);
    const int v = items_.front();
    items_.pop_front();
    return v;
  }
  // False if nothing came within the timeout.
  bool PopFor(std::chrono::milliseconds timeout, int* v) EXCLUDES(mu_) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(mu_);
    while (items_.empty()) {
      if (!cv_.WaitUntil(mu_, deadline) && items_.empty()) return false;
    }
    *v = items_.front();
    items_.pop_front();
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<int> items_ GUARDED_BY(mu_);
};

TEST(ThreadAnnotationsTest, ProducersAndConsumersHandOverEveryItemOnce) {
  Queue q;
  constexpr int kPerProducer = 2000;
  std::atomic<long> sum{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < 3; ++c) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2 * kPerProducer; ++i) sum += q.Pop();
    });
  }
  for (int p = 0; p < 3; ++p) {
    threads.emplace_back([&] {
      for (int i = 1; i <= 2 * kPerProducer; ++i) q.Push(i);
    });
  }
  for (auto& t : threads) t.join();
  const long n = 2 * kPerProducer;
  EXPECT_EQ(sum.load(), 3 * n * (n + 1) / 2);
  int v = 0;
  EXPECT_FALSE(q.PopFor(std::chrono::milliseconds(1), &v));
}

TEST(ThreadAnnotationsTest, WaitForTimesOutAndWakesOnNotify) {
  Queue q;
  int v = 0;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(q.PopFor(std::chrono::milliseconds(50), &v));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    q.Push(7);
  });
  EXPECT_TRUE(q.PopFor(std::chrono::seconds(10), &v));
  EXPECT_EQ(v, 7);
  late.join();
}

TEST(ThreadAnnotationsTest, TryLockFailsWhileAnotherThreadHoldsTheMutex) {
  Mutex mu;
  mu.Lock();
  bool got = true;
  std::thread other([&] {
    if (mu.TryLock()) {
      mu.Unlock();
    } else {
      got = false;
    }
  });
  other.join();
  EXPECT_FALSE(got);
  mu.Unlock();
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "TryLock failed on a free mutex";
  }
}

}  // namespace
}  // namespace gantry
