// Code that breaks the locking contract it declares. It must NOT compile under clang's
// -Wthread-safety -Werror: the test ThreadSafetyAnalysisRejectsMisuse (tests/CMakeLists.txt)
// compiles it and expects the diagnostics below, proving that the annotations in
// gantry/common/thread_annotations.h are seen by the compiler rather than silently ignored.
#include "gantry/common/thread_annotations.h"

namespace gantry {

class Account {
 public:
  void Deposit(int v) { balance_ += v; }  // no lock: "requires holding mutex 'mu_'"
  void Audit() REQUIRES(mu_) {}
  void AuditUnlocked() { Audit(); }  // "calling function 'Audit' requires holding mutex"
  void WaitUnlocked() { cv_.Wait(mu_); }

 private:
  Mutex mu_;
  CondVar cv_;
  int balance_ GUARDED_BY(mu_) = 0;
};

}  // namespace gantry
