#include "gantry/report/chart_library.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifndef GANTRY_WEB_DIR
#define GANTRY_WEB_DIR ""
#endif

namespace gantry {

std::string ChartLibraryDir() {
  const char* env = std::getenv("GANTRY_WEB_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  // PREFIX/bin/EXE -> PREFIX/share/gantry/web, when the first file of the library is there.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed =
        exe.parent_path().parent_path() / kInstalledChartLibrary;
    if (std::filesystem::is_regular_file(installed / "vega/build/vega.min.js", ec)) {
      return installed.string();
    }
  }
  return GANTRY_WEB_DIR;
}

Result<std::vector<ChartLibraryFile>> LoadChartLibrary(const std::string& dir) {
  std::vector<ChartLibraryFile> files = {
      {"vega.min.js", "vega/build/vega.min.js", ""},
      {"vega-lite.min.js", "vega-lite/build/vega-lite.min.js", ""},
      {"vega-embed.min.js", "vega-embed/build/vega-embed.min.js", ""}};
  for (ChartLibraryFile& f : files) {
    const std::string path = dir + "/" + f.relative_path;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    if (in) ss << in.rdbuf();
    if (!in || ss.str().empty()) {
      return FailedPrecondition(
          "the chart library " + path +
          " is missing: run scripts/setup (it runs `npm ci --prefix web`), or set "
          "GANTRY_WEB_DIR to a node_modules directory holding vega, vega-lite and vega-embed");
    }
    f.content = std::move(ss).str();
  }
  return files;
}

}  // namespace gantry
