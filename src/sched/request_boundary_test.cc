// The engine's job is a JobRequest, never the trace's record (workload/job.h, with the true run
// time). Two checks keep it so:
//   - at compile time, this file includes every public sched header and then declares its own
//     ::Job under `using namespace gantry`: if any sched header exposed gantry::Job, the
//     unqualified name below would be ambiguous and this file would not compile;
//   - at test time, no engine or plugin source (src/sched, include/gantry/sched; benchmarks and
//     tests are drivers and exempt) includes a header that declares Job.
// This file must therefore include nothing that declares gantry::Job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gantry/sched/engine.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/registry.h"
#include "gantry/workload/job_request.h"

using namespace gantry;  // NOLINT(google-build-using-namespace): the probe needs it
struct Job {
  char probe;
};
static_assert(sizeof(Job) == 1, "a sched header exposes gantry::Job; include job_request.h");

namespace gantry {
namespace {

TEST(RequestBoundary, NoEngineOrPluginSourceIncludesTheTraceRecord) {
  namespace fs = std::filesystem;
  const fs::path root = GANTRY_SOURCE_DIR;
  // Headers that declare Job (directly or through what they include).
  const std::vector<std::string> forbidden = {"gantry/workload/job.h", "gantry/workload/trace.h",
                                              "gantry/workload/synth.h", "gantry/sim/",
                                              "gantry/report/"};
  int checked = 0;
  for (const fs::path& dir : {root / "src/sched", root / "include/gantry/sched"}) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with("_test.cc") || name.ends_with("_benchmark.cc") ||
          name == "benchmark_support.h") {
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        if (!line.starts_with("#include")) continue;
        for (const std::string& f : forbidden) {
          EXPECT_EQ(line.find(f), std::string::npos)
              << entry.path() << " includes " << f << ": the engine sees JobRequest only";
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);  // the directories were found and read
}

}  // namespace
}  // namespace gantry
