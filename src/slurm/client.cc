// SlurmClient: runs Slurm's command-line tools with a deadline and maps their failures to codes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gantry/slurm/slurm.h"

extern char** environ;

namespace gantry::slurm {
namespace {

struct Output {
  int exit_code = 0;  // 128 + signal when killed
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Runs argv (argv[0] a path) with `env_extra` added to this process's environment, collecting
// stdout and stderr until it exits or `timeout_ms` passes (then it is killed).
Result<Output> RunWithDeadline(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env_extra, int timeout_ms) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return StatusFromErrno(errno, "pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return StatusFromErrno(e, "pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const std::string& extra : env_extra) {
      const size_t eq = extra.find('=');
      if (entry.compare(0, eq + 1, extra, 0, eq + 1) == 0) replaced = true;
    }
    if (!replaced) env_strings.push_back(std::move(entry));
  }
  for (const std::string& extra : env_extra) env_strings.push_back(extra);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> c_argv;
  for (std::string& s : args) c_argv.push_back(s.data());
  c_argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, c_argv[0], &actions, nullptr, c_argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (rc == ENOENT) return NotFound(argv[0] + ": not installed");
    return StatusFromErrno(rc, "starting " + argv[0]);
  }

  Output result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

SlurmClient::SlurmClient(SlurmOptions options) : options_(std::move(options)) {
  if (options_.bin_dir.empty()) options_.bin_dir = "/usr/bin";
}

Status SlurmClient::CheckCommands() const {
  for (const char* name : {"sinfo", "squeue", "scontrol", "scancel"}) {
    const std::string path = options_.bin_dir + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return StatusFromErrno(errno, "Slurm's " + std::string(name) + " (" + path + ")");
    }
    if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
      return PermissionDenied("Slurm's " + std::string(name) + " (" + path +
                              ") is not an executable file");
    }
  }
  const char* env = std::getenv("SLURM_CONF");
  const std::string conf = !options_.slurm_conf.empty() ? options_.slurm_conf : env ? env : "";
  if (!conf.empty() && ::access(conf.c_str(), R_OK) != 0) {
    return StatusFromErrno(errno, "slurm.conf " + conf);
  }
  return Status::Ok();
}

namespace {

// The failure of a finished command as a status: its stderr (or stdout, or exit status) mapped.
Status FailureOf(const Output& o, const std::string& what) {
  std::string text = o.err.empty() ? o.out : o.err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) text = "exit status " + std::to_string(o.exit_code);
  return StatusFromSlurmError(text, what);
}

}  // namespace

Result<std::string> SlurmClient::Run(std::vector<std::string> argv) const {
  const std::string what = Join(argv, " ");
  argv[0] = options_.bin_dir + "/" + argv[0];
  std::vector<std::string> env;
  if (!options_.slurm_conf.empty()) env.push_back("SLURM_CONF=" + options_.slurm_conf);
  GANTRY_ASSIGN_OR_RETURN(Output o, RunWithDeadline(argv, env, options_.timeout_ms));
  if (o.timed_out) {
    return DeadlineExceeded(what + ": no answer within " + std::to_string(options_.timeout_ms) +
                            " ms");
  }
  // The tools print nothing to stderr when they succeed, so anything there is an error even
  // with exit status 0.
  if (o.exit_code != 0 || !o.err.empty()) return FailureOf(o, what);
  return std::move(o.out);
}

Result<std::vector<SlurmNode>> SlurmClient::Nodes() const {
  GANTRY_ASSIGN_OR_RETURN(std::string out, Run({"sinfo", "--json"}));
  return ParseSinfoJson(out);
}

Result<std::vector<SlurmJob>> SlurmClient::Jobs() const {
  GANTRY_ASSIGN_OR_RETURN(std::string out, Run({"squeue", "--json"}));
  return ParseSqueueJson(out);
}

Result<SlurmJob> SlurmClient::Job(int64_t id) const {
  // squeue --json ignores -j in 22.05 (it returns every job), so filter here.
  GANTRY_ASSIGN_OR_RETURN(std::vector<SlurmJob> jobs, Jobs());
  for (SlurmJob& j : jobs) {
    if (j.id == id) return std::move(j);
  }
  return NotFound("Slurm job " + std::to_string(id) + " is not known to slurmctld");
}

Status SlurmClient::StartOnNodes(int64_t id, const std::vector<std::string>& nodes) const {
  if (nodes.empty()) return InvalidArgument("StartOnNodes: no nodes given");
  const std::string job = std::to_string(id);
  // Exactly as many nodes as listed: a shorter node count would be grown silently to the
  // list, and a longer one would let Slurm add nodes of its own choice.
  GANTRY_RETURN_IF_ERROR(
      Run({"scontrol", "update", "JobId=" + job, "ReqNodeList=" + Join(nodes, ","),
           "NumNodes=" + std::to_string(nodes.size()), "StartTime=now"})
          .status());
  return Run({"scontrol", "release", job}).status();
}

Status SlurmClient::Hold(int64_t id) const {
  return Run({"scontrol", "hold", std::to_string(id)}).status();
}

Status SlurmClient::Release(int64_t id) const {
  return Run({"scontrol", "release", std::to_string(id)}).status();
}

Status SlurmClient::Cancel(int64_t id) const { return Scancel(id, {}); }

Status CheckSignalName(std::string_view signal) {
  if (signal.empty() ||
      signal.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != std::string::npos) {
    return InvalidArgument("signal '" + std::string(signal) + "': a name like TERM or USR1");
  }
  return Status::Ok();
}

Status SlurmClient::Signal(int64_t id, const std::string& signal) const {
  GANTRY_RETURN_IF_ERROR(CheckSignalName(signal));
  return Scancel(id, {"--signal=" + signal, "--full"});
}

Status SlurmClient::Scancel(int64_t id, const std::vector<std::string>& flags) const {
  // scancel exits 0 and prints nothing when Slurm refuses, unless asked to be verbose; then it
  // also reports success on stderr ("scancel: Terminating job 7"), and a refusal as
  // "scancel: error: Kill job error on job id 7: <Slurm's error>".
  std::string what = "scancel";
  std::vector<std::string> argv = {options_.bin_dir + "/scancel", "-v"};
  for (const std::string& f : flags) {
    what += " " + f;
    argv.push_back(f);
  }
  what += " " + std::to_string(id);
  argv.push_back(std::to_string(id));
  std::vector<std::string> env;
  if (!options_.slurm_conf.empty()) env.push_back("SLURM_CONF=" + options_.slurm_conf);
  GANTRY_ASSIGN_OR_RETURN(Output o, RunWithDeadline(argv, env, options_.timeout_ms));
  if (o.timed_out) return DeadlineExceeded(what + ": no answer");
  const size_t error = o.err.find("error:");
  if (error != std::string::npos) {
    Output failed = o;
    failed.err = o.err.substr(error);
    return FailureOf(failed, what);
  }
  if (o.exit_code != 0) return FailureOf(o, what);
  return Status::Ok();
}

Status SlurmClient::RequeueHeld(int64_t id) const {
  Status s = Run({"scontrol", "requeuehold", std::to_string(id)}).status();
  // ESLURM_DISABLED here means this job may not be requeued (sbatch --no-requeue, or
  // `scontrol update Requeue=0`): not a state that passes, so a code of its own.
  if (s.code() == StatusCode::kFailedPrecondition &&
      s.message().find("Requested operation is presently disabled") != std::string::npos) {
    return PermissionDenied(s.message());
  }
  return s;
}

Status SlurmClient::DrainNode(const std::string& node, const std::string& reason) const {
  Status s =
      Run({"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + reason}).status();
  // For a node (not a job), an invalid name means the node does not exist.
  if (s.code() == StatusCode::kFailedPrecondition &&
      s.message().find("Invalid node name") != std::string::npos) {
    return NotFound(s.message());
  }
  return s;
}

Status SlurmClient::ResumeNode(const std::string& node) const {
  Status s = Run({"scontrol", "update", "NodeName=" + node, "State=RESUME"}).status();
  if (s.code() == StatusCode::kFailedPrecondition &&
      s.message().find("Invalid node name") != std::string::npos) {
    return NotFound(s.message());
  }
  return s;
}

Result<std::string> SlurmClient::ClusterName() const {
  GANTRY_ASSIGN_OR_RETURN(std::string out, Run({"scontrol", "show", "config"}));
  // "ClusterName             = gantrylab"
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("ClusterName", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) break;
    std::string value = line.substr(eq + 1);
    value.erase(0, value.find_first_not_of(' '));
    while (!value.empty() && value.back() == ' ') value.pop_back();
    if (!value.empty()) return value;
  }
  return IoError("scontrol show config: no ClusterName");
}

Result<std::vector<SlurmSwitch>> SlurmClient::Topology() const {
  Result<std::string> out = Run({"scontrol", "show", "topology"});
  if (!out.ok()) {
    // Without a topology plugin scontrol says so on stderr; that is a flat cluster.
    if (out.status().message().find("No topology information") != std::string::npos) {
      return std::vector<SlurmSwitch>{};
    }
    return out.status();
  }
  return ParseTopology(*out);
}

Result<std::vector<SlurmAccount>> SlurmClient::Accounts() const {
  GANTRY_ASSIGN_OR_RETURN(std::string cluster, ClusterName());
  GANTRY_ASSIGN_OR_RETURN(std::string out,
                          Run({"sacctmgr", "-nP", "show", "assoc", "cluster=" + cluster,
                               "format=account,user,grptres,fairshare"}));
  return ParseAssociations(out);
}

Result<std::vector<SlurmQos>> SlurmClient::QosList() const {
  GANTRY_ASSIGN_OR_RETURN(std::string out,
                          Run({"sacctmgr", "-nP", "show", "qos",
                               "format=name,priority,preempt,usagefactor,gracetime"}));
  return ParseQosList(out);
}

}  // namespace gantry::slurm
