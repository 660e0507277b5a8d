#include "gantry/common/subprocess.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace gantry {
namespace {

TEST(RunAndCapture, ReturnsStdout) {
  Result<std::string> out = RunAndCapture({"/bin/sh", "-c", "printf 'a\\nb'; echo err >&2"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "a\nb");
}

TEST(RunAndCapture, LargeOutputDoesNotDeadlock) {
  Result<std::string> out = RunAndCapture({"/bin/sh", "-c", "head -c 1000000 /dev/zero"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->size(), 1000000u);
}

TEST(RunAndCapture, FailuresAreStatuses) {
  Result<std::string> missing = RunAndCapture({"/nonexistent/program"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  Result<std::string> fails = RunAndCapture({"/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(fails.status().code(), StatusCode::kIoError);
  EXPECT_NE(fails.status().message().find("exit status 3"), std::string::npos);
  Result<std::string> killed = RunAndCapture({"/bin/sh", "-c", "kill -9 $$"});
  EXPECT_NE(killed.status().message().find("signal 9"), std::string::npos);
  EXPECT_EQ(RunAndCapture({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExecReplacingThisProcess, RunsTheProgramInPlaceOrSaysWhy) {
  EXPECT_EQ(ExecReplacingThisProcess({"/nonexistent/program"}).code(), StatusCode::kNotFound);
  // In a child: the exec'd program's exit status becomes the process's own.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Status s = ExecReplacingThisProcess({"/bin/sh", "-c", "exit 42"});
    _exit(s.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

TEST(GetEnvOr, UnsetAndEmptyFallBack) {
  setenv("GANTRY_SUBPROCESS_TEST_VAR", "", 1);
  EXPECT_EQ(GetEnvOr("GANTRY_SUBPROCESS_TEST_VAR", "fb"), "fb");
  setenv("GANTRY_SUBPROCESS_TEST_VAR", "v", 1);
  EXPECT_EQ(GetEnvOr("GANTRY_SUBPROCESS_TEST_VAR", "fb"), "v");
  unsetenv("GANTRY_SUBPROCESS_TEST_VAR");
  EXPECT_EQ(GetEnvOr("GANTRY_SUBPROCESS_TEST_VAR", "fb"), "fb");
}

}  // namespace
}  // namespace gantry
