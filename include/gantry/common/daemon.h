// What Gantry's daemons (gantry-agent, gantryd) share around their flags: reading a listen
// address, a secret from a file, publishing the port they bound for scripts, and the checks
// of `gantryd --check` that a service manager runs before each start.
#pragma once

#include <string>

#include "gantry/common/status.h"

namespace gantry {

// "HOST:PORT" or "[V6]:PORT" (port 0..65535) into host and port; InvalidArgument saying what
// is expected otherwise.
Status ParseHostPort(const std::string& text, std::string* host, int* port);

// Writes `port` and a newline beside `path` and renames it into place, so a script polling for
// the file never reads a partial number.
Status WritePortFile(const std::string& path, int port);

// A secret (a token) kept in a file: the whole file, less trailing whitespace (the newline an
// editor or `echo` adds). NotFound / PermissionDenied as the file system says; InvalidArgument
// when it is empty.
Result<std::string> ReadSecretFile(const std::string& path);

// FailedPrecondition naming the mode when the secret file at `path` may be read by its group
// or by others (any of mode 077): a token anyone on the host can read is no token. OK when
// only its owner may read it; the file system's error when it cannot be looked at.
Status CheckSecretFileMode(const std::string& path);

// Whether a daemon can keep a file at `path` that it creates, rewrites by renaming a new copy
// into place, or grows companions beside (SQLite's -wal and -shm): its folder exists and the
// daemon may create files in it, and the file, when it already exists, is a regular file it
// may read and write. NotFound for a missing folder, PermissionDenied or FailedPrecondition
// otherwise, each naming the path. Checked as this process's user: run it as the service's.
Status CheckWritablePath(const std::string& path);

}  // namespace gantry
