// gantry-agent: serves a node's local tier directory to peers over HTTP (read-only, byte
// ranges), so a restoring node can fetch checkpoint chunks from a neighbour instead of the
// durable tier. Peers must present the cluster's agent token (--token-file, or
// $GANTRY_AGENT_TOKEN); /healthz is open. Runs until SIGINT or SIGTERM.
//
//   gantry-agent --root /nvme/gantry --listen 10.0.0.7:7070 --token-file /etc/gantry/agent-token
//
// Exit status: 0 after a signal, 2 on a usage error, 3 if the root cannot be served, 4 if the
// address cannot be bound.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "gantry/agent/agent.h"
#include "gantry/storage/object_store.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitBadRoot = 3;
constexpr int kExitCannotListen = 4;

// "HOST:PORT" or "[V6]:PORT" into host and port; false with *why set on anything else.
bool ParseListen(const std::string& s, std::string* host, int* port, std::string* why) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    *why = "expected HOST:PORT, like 127.0.0.1:7070 or 0.0.0.0:0";
    return false;
  }
  std::string h = s.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') {
      *why = "an IPv6 host must be bracketed, like [::1]:7070";
      return false;
    }
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    *why = "an IPv6 host must be bracketed, like [::1]:7070";
    return false;
  }
  const std::string p = s.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535) {
    *why = "port '" + p + "' is not a number from 0 to 65535";
    return false;
  }
  *host = h;
  *port = std::stoi(p);
  return true;
}

// Writes the port beside `path` and renames it into place, so a script polling for the file
// never reads a partial number.
bool WritePortFile(const std::string& path, int port, std::string* why) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const std::string text = std::to_string(port) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_err = errno;
  if (::close(fd) != 0 || !written) {
    *why = "write " + tmp + ": " + std::strerror(written ? errno : write_err);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "rename " + tmp + " to " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// The token in `path`: the whole file, less trailing whitespace (the newline an editor or
// `echo` adds). False with *why set if it cannot be read or is empty.
bool ReadTokenFile(const std::string& path, std::string* token, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) {
    *why = path + " is empty";
    return false;
  }
  *token = std::move(text);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gantry-agent: serves this node's local tier directory to peers over HTTP, read-only.\n"
      "Peers read it as an object store at http://HOST:PORT (GET/HEAD /v1/objects/KEY with byte\n"
      "ranges; /healthz; /metrics in Prometheus text). Every request but /healthz must carry\n"
      "'Authorization: Bearer TOKEN' with the cluster's agent token, read from --token-file or\n"
      "else $GANTRY_AGENT_TOKEN (peers' gantry commands and Checkpointers send the same "
      "variable).\n"
      "Runs until SIGINT or SIGTERM (exit 0).",
      "gantry-agent"};
  std::string root;
  std::string listen = "127.0.0.1:7070";
  int threads = 8;
  std::string port_file;
  std::string token_file;
  bool allow_unauthenticated = false;
  gantry::AgentOptions options;
  app.add_option("--root", root, "Directory to serve (a posix tier root, e.g. /nvme/gantry)")
      ->required();
  app.add_option("--listen", listen,
                 "Address to listen on, HOST:PORT ([V6]:PORT for IPv6); port 0 picks a free one")
      ->capture_default_str();
  app.add_option("--threads", threads,
                 "Object requests served at once, once their headers are in; more wait in a queue "
                 "(/healthz and /metrics have a thread of their own)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--port-file", port_file,
                 "Write the bound port to this file (atomically) once listening; useful with "
                 "port 0");
  app.add_option("--token-file", token_file,
                 "File holding the cluster's agent token (trailing whitespace ignored); default: "
                 "$GANTRY_AGENT_TOKEN");
  app.add_flag("--allow-unauthenticated", allow_unauthenticated,
               "Serve without a token: only where every host that can reach the port is trusted");
  app.add_option("--header-timeout-ms", options.header_timeout_ms,
                 "A client must send its whole request head within this time, or is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600 * 1000));
  app.add_option("--keep-alive-s", options.keep_alive_timeout_s,
                 "Seconds an idle connection stays open for the peer's next request (held by "
                 "no worker); 0: one request per connection")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--max-connections-per-client", options.max_connections_per_client,
                 "Connections one client address may hold open; more are refused (503)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.set_version_flag("--version", "gantry-agent 0.1.0");
  app.footer(
      "Example:\n  GANTRY_AGENT_TOKEN=$(cat /etc/gantry/agent-token) \\\n"
      "    gantry-agent --root /nvme/gantry --listen 10.0.0.7:7070 --threads 32\n"
      "Exit status: 0 after SIGINT/SIGTERM, 2 usage error, 3 root cannot be served, 4 address "
      "cannot be bound.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  std::string why;
  if (!ParseListen(listen, &options.host, &options.port, &why)) {
    std::cerr << "gantry-agent: --listen '" << listen << "': " << why << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(root, ec);
  options.root = ec ? root : abs.lexically_normal().string();
  options.threads = threads;
  if (!token_file.empty()) {
    if (!ReadTokenFile(token_file, &options.token, &why)) {
      std::cerr << "gantry-agent: --token-file: " << why << "\n";
      return kExitUsage;
    }
  } else {
    options.token = gantry::DefaultAgentToken();
  }
  if (options.token.empty() && !allow_unauthenticated) {
    std::cerr << "gantry-agent: no agent token: pass --token-file FILE or set "
              << gantry::kAgentTokenEnv
              << " (the same on every node of the cluster), or --allow-unauthenticated on a "
                 "network where every host is trusted\n";
    return kExitUsage;
  }
  if (!gantry::IsValidAgentToken(options.token)) {
    std::cerr << "gantry-agent: the agent token may hold only printable ASCII without spaces\n";
    return kExitUsage;
  }
  options.allow_unauthenticated = allow_unauthenticated;

  // Block the stop signals before any thread starts, so every thread inherits the mask and the
  // main thread alone receives them through sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A peer hanging up mid-response must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);

  gantry::Result<std::unique_ptr<gantry::AgentServer>> agent = gantry::AgentServer::Start(options);
  if (!agent.ok()) {
    std::cerr << agent.status().message() << "\n";
    return agent.status().code() == gantry::StatusCode::kUnavailable ? kExitCannotListen
                                                                     : kExitBadRoot;
  }
  if (!port_file.empty() && !WritePortFile(port_file, (*agent)->port(), &why)) {
    std::cerr << "gantry-agent: --port-file: " << why << "\n";
    (*agent)->Stop();
    return kExitUsage;
  }
  std::cout << "gantry-agent: serving " << options.root << " on " << (*agent)->url() << std::endl;

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  std::cerr << "gantry-agent: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping\n";
  (*agent)->Stop();
  return 0;
}
