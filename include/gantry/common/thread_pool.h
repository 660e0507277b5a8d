// ThreadPool: a fixed set of worker threads running submitted tasks in FIFO order.
//
// Used for I/O parallelism (many object-store operations in flight). Thread-safe. The
// destructor finishes queued tasks, then joins.
//
//   ThreadPool pool(8);
//   std::future<int> f = pool.Submit([] { return 42; });
#pragma once

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "gantry/common/thread_annotations.h"

namespace gantry {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  template <typename F>
  auto Submit(F&& f) -> std::future<std::invoke_result_t<F>> {
    using R = std::invoke_result_t<F>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> result = task->get_future();
    Enqueue([task] { (*task)(); });
    return result;
  }

 private:
  void Enqueue(std::function<void()> task) EXCLUDES(mu_);
  void Work() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // written only by the constructor
};

}  // namespace gantry
