#include "gantry/common/daemon.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace gantry {

Status ParseHostPort(const std::string& s, std::string* host, int* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return InvalidArgument("'" + s + "': expected HOST:PORT, like 127.0.0.1:7070 or 0.0.0.0:0");
  }
  std::string h = s.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') {
      return InvalidArgument("'" + s + "': an IPv6 host must be bracketed, like [::1]:7070");
    }
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return InvalidArgument("'" + s + "': an IPv6 host must be bracketed, like [::1]:7070");
  }
  const std::string p = s.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535) {
    return InvalidArgument("'" + s + "': port '" + p + "' is not a number from 0 to 65535");
  }
  *host = h;
  *port = std::stoi(p);
  return Status::Ok();
}

Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return StatusFromErrno(errno, "create " + tmp);
  const std::string text = std::to_string(port) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_err = errno;
  if (::close(fd) != 0 || !written) {
    const int err = written ? errno : write_err;
    ::unlink(tmp.c_str());
    return StatusFromErrno(err, "write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return StatusFromErrno(err, "rename " + tmp + " to " + path);
  }
  return Status::Ok();
}

Result<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return StatusFromErrno(errno, "cannot read " + path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) return InvalidArgument(path + " is empty");
  return text;
}

Status CheckSecretFileMode(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return StatusFromErrno(errno, "cannot look at " + path);
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return FailedPrecondition(path + " may be read by its group or others (mode " + mode +
                              "): chmod 600 it, owned by the service's user");
  }
  return Status::Ok();
}

Status CheckWritablePath(const std::string& path) {
  if (path.empty()) return InvalidArgument("an empty path");
  const size_t slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0) {
    return StatusFromErrno(errno, "folder " + folder + " of " + path);
  }
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(folder + " (of " + path + ") is no folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return StatusFromErrno(errno, "cannot create files in " + folder + " (for " + path + ")");
  }
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();  // created on first use
    return StatusFromErrno(errno, "cannot look at " + path);
  }
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(path + " exists and is no regular file");
  if (::access(path.c_str(), R_OK | W_OK) != 0) {
    return StatusFromErrno(errno, "cannot read and write " + path);
  }
  return Status::Ok();
}

}  // namespace gantry
