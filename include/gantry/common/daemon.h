// What Gantry's daemons (gantry-agent, gantryd) share around their flags: reading a listen
// address, a secret from a file, and publishing the port they bound for scripts.
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

}  // namespace gantry
