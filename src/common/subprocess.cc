#include "gantry/common/subprocess.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gantry {
namespace {

constexpr int kExecFailedStatus = 127;  // what shells report for "command not found"

std::vector<char*> CArgs(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  return args;
}

}  // namespace

Result<std::string> RunAndCapture(const std::vector<std::string>& argv) {
  if (argv.empty()) return InvalidArgument("RunAndCapture: empty argv");
  std::vector<char*> args = CArgs(argv);
  int fds[2];
  if (::pipe(fds) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);  // buffered output must not be written twice (by the child too)
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return IoError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(args[0], args.data());
    ::_exit(kExecFailedStatus);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExecFailedStatus) {
    return NotFound("'" + argv[0] + "' could not be run (exit status 127)");
  }
  if (WIFSIGNALED(status)) {
    return IoError("'" + argv[0] + "' was killed by signal " + std::to_string(WTERMSIG(status)));
  }
  return IoError("'" + argv[0] + "' failed (exit status " +
                 std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
}

Status ExecReplacingThisProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) return InvalidArgument("exec: empty argv");
  std::vector<char*> args = CArgs(argv);
  std::fflush(nullptr);
  ::execv(args[0], args.data());
  const int err = errno;
  const std::string what = "cannot run '" + argv[0] + "': " + std::strerror(err);
  if (err == ENOENT || err == ENOTDIR) return NotFound(what);
  if (err == EACCES || err == EPERM) return PermissionDenied(what);
  return IoError(what);
}

std::string GetEnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace gantry
