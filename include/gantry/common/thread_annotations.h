// Clang thread-safety annotations and an annotated mutex: which mutex guards which member, and
// which functions must (or must not) be called with it held, written in the code instead of in
// comments, so clang's -Wthread-safety (an error in our clang builds) checks every access.
// On GCC the macros expand to nothing and the types behave exactly like their std:: cores.
//
//   class Queue {
//    public:
//     void Push(int v) EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       items_.push_back(v);
//       cv_.NotifyOne();
//     }
//     int Pop() EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       while (items_.empty()) cv_.Wait(mu_);  // a loop, not a predicate lambda: see CondVar
//       int v = items_.front();
//       items_.pop_front();
//       return v;
//     }
//    private:
//     Mutex mu_;
//     CondVar cv_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//   };
//
// The macro names follow Clang's documentation and Abseil (without Abseil's prefix).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define GANTRY_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define GANTRY_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock (a "capability"); the string names it in diagnostics.
#define CAPABILITY(x) GANTRY_THREAD_ANNOTATION_(capability(x))
// An RAII type that holds a capability for its lifetime.
#define SCOPED_CAPABILITY GANTRY_THREAD_ANNOTATION_(scoped_lockable)
// A data member read or written only with the given mutex held.
#define GUARDED_BY(x) GANTRY_THREAD_ANNOTATION_(guarded_by(x))
// A pointer member whose pointee is accessed only with the given mutex held.
#define PT_GUARDED_BY(x) GANTRY_THREAD_ANNOTATION_(pt_guarded_by(x))
// Lock ordering: this mutex is taken after (before) the listed ones.
#define ACQUIRED_AFTER(...) GANTRY_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) GANTRY_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
// The caller must hold the mutexes (exclusively, or at least shared).
#define REQUIRES(...) GANTRY_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) GANTRY_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
// The caller must not hold the mutexes (the function takes them itself).
#define EXCLUDES(...) GANTRY_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// The function acquires / releases the mutexes (no argument: `this`).
#define ACQUIRE(...) GANTRY_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GANTRY_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) GANTRY_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// Tells the analysis that the mutex is held here (checked at run time by the callee, if at all).
#define ASSERT_CAPABILITY(x) GANTRY_THREAD_ANNOTATION_(assert_capability(x))
// The function returns a reference to the given mutex.
#define RETURN_CAPABILITY(x) GANTRY_THREAD_ANNOTATION_(lock_returned(x))
// Turns the analysis off for one function; say why beside every use.
#define NO_THREAD_SAFETY_ANALYSIS GANTRY_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace gantry {

// A std::mutex the analysis understands. Not recursive. Lock()/Unlock() for code, lock()/unlock()
// so that it is a BasicLockable (std::condition_variable_any, std::scoped_lock); CondVar waits on
// it without the overhead of condition_variable_any.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For functions the analysis cannot follow (callbacks run under the lock): documents the
  // contract; std::mutex cannot check ownership, so this checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable over Mutex (a std::condition_variable on its std::mutex). Waits take the
// mutex the caller holds and hold it again on return. There is deliberately no predicate
// overload: the analysis cannot tell that a predicate lambda runs under the lock, so waits are
// written as loops, `while (!ready_) cv_.Wait(mu_);`, which it checks.
class CondVar {
 public:
  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held; the caller's MutexLock releases it
  }
  // False if the deadline passed (the caller re-checks its condition either way).
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace gantry
