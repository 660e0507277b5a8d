// gantry-agent: serves a node's local tier directory to peers over HTTP (read-only, byte
// ranges), so a restoring node can fetch checkpoint chunks from a neighbour instead of the
// durable tier; with --data-cache, also stages datasets into the node's shard cache when asked
// (POST /v1/stage). Peers must present the cluster's agent token (--token-file, or
// $GANTRY_AGENT_TOKEN); /healthz is open. Runs until SIGINT or SIGTERM.
//
//   gantry-agent --root /nvme/gantry --listen 10.0.0.7:7070 --token-file /etc/gantry/agent-token
//       --data-cache /nvme/gantry-data --data-cache-bytes 2T   (one command line)
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
#include "gantry/common/daemon.h"
#include "gantry/common/units.h"
#include "gantry/storage/object_store.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitBadRoot = 3;
constexpr int kExitCannotListen = 4;

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
  std::string data_cache_bytes = "0";
  app.add_option("--data-cache", options.data_cache_dir,
                 "The node-local shard cache directory (the loader's cache_dir, e.g. "
                 "$GANTRY_DATA_CACHE_DIR) that POST /v1/stage stages datasets into; without it "
                 "the /v1/stage routes answer 501. Staging reads any dataset URL the token "
                 "holder names, as this agent's user");
  app.add_option("--data-cache-bytes", data_cache_bytes,
                 "The shard cache's byte budget, as the loaders on the node use it (e.g. 500G, "
                 "2TiB); 0: no limit")
      ->capture_default_str();
  app.add_option("--stage-threads", options.stage_threads,
                 "Datasets staged at once, on threads apart from the object workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  // A duration in seconds, at most 30 days.
  const auto seconds_option = [&](const std::string& name, int64_t& value,
                                  const std::string& help) {
    app.add_option(name, value, help)
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{30} * 86400));
  };
  seconds_option("--stage-pin-s", options.stage_pin_seconds,
                 "The longest a dataset staged for a job stays pinned in the shard cache, from "
                 "the job's latest request (gantryd releases it when the job starts or ends); 0 "
                 "never pins");
  app.add_option("--stage-allow", options.stage_allow,
                 "A URL prefix staged datasets, checkpoint locations asked about and the roots "
                 "of checkpoint drains must start with (repeatable; e.g. s3://datasets/, "
                 "file:///lustre/ckpt/); others are refused with 403 (a drain skips them). Set "
                 "it on any cluster with more than one user: the agent reads and writes as its "
                 "own user");
  seconds_option("--drain-every-s", options.drain_every_seconds,
                 "The agent's own sweep of checkpoint saves left short of their durable root: "
                 "every this many seconds it drains those older than --drain-min-age-s (gantryd "
                 "also asks when a job ends); 0: only when asked");
  seconds_option("--drain-min-age-s", options.drain_min_age_seconds,
                 "How old a left save must be for the sweep to finish it (younger ones may "
                 "still be draining from their own process)");
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

  if (gantry::Status s = gantry::ParseHostPort(listen, &options.host, &options.port); !s.ok()) {
    std::cerr << "gantry-agent: --listen " << s.message() << "\n";
    return kExitUsage;
  }
  if (gantry::Result<uint64_t> b = gantry::ParseBytes(data_cache_bytes); b.ok()) {
    options.data_cache_bytes = *b;
  } else {
    std::cerr << "gantry-agent: --data-cache-bytes " << b.status().message() << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(root, ec);
  options.root = ec ? root : abs.lexically_normal().string();
  options.threads = threads;
  gantry::Result<std::string> token = gantry::AgentTokenFrom(token_file);
  if (!token.ok()) {
    std::cerr << "gantry-agent: " << (token_file.empty() ? "" : "--token-file: ")
              << token.status().message() << "\n";
    return kExitUsage;
  }
  options.token = std::move(token).value();
  if (options.token.empty() && !allow_unauthenticated) {
    std::cerr << "gantry-agent: no agent token: pass --token-file FILE or set "
              << gantry::kAgentTokenEnv
              << " (the same on every node of the cluster), or --allow-unauthenticated on a "
                 "network where every host is trusted\n";
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
  gantry::Status written =
      port_file.empty() ? gantry::Status::Ok() : gantry::WritePortFile(port_file, (*agent)->port());
  if (!written.ok()) {
    std::cerr << "gantry-agent: --port-file: " << written.message() << "\n";
    (*agent)->Stop();
    return kExitUsage;
  }
  std::cout << "gantry-agent: serving " << options.root << " on " << (*agent)->url();
  if (!options.data_cache_dir.empty()) {
    std::cout << "; staging datasets into " << options.data_cache_dir;
  }
  std::cout << std::endl;
  if (options.stage_allow.empty()) {
    std::cerr << "gantry-agent: warning: no --stage-allow: any holder of the agent token may have "
                 "this agent read any URL it can"
              << (options.data_cache_dir.empty() ? "" : " into the node's shared cache")
              << ", and a checkpoint drain writes to whatever root a record on this node "
                 "names\n";
  }

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  std::cerr << "gantry-agent: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping\n";
  (*agent)->Stop();
  return 0;
}
