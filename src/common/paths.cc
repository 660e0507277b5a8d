// Local path questions (paths.h).
#include "gantry/common/paths.h"

#include <filesystem>
#include <system_error>

namespace gantry {

namespace {

// The path with links and ".." resolved as far as it exists, made absolute; empty on error.
std::filesystem::path Resolved(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return {};
  std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  if (ec) return {};
  if (!p.has_filename()) p = p.parent_path();  // "/a/b/" is "/a/b"
  return p;
}

}  // namespace

bool LocalPathWithin(const std::string& url_or_path, const std::string& folder) {
  if (folder.empty() || url_or_path.empty()) return false;
  std::string path = url_or_path;
  if (path.rfind("file://", 0) == 0) {
    path = path.substr(7);
  } else if (path.find("://") != std::string::npos) {
    return false;
  }
  const std::filesystem::path inner = Resolved(path);
  const std::filesystem::path outer = Resolved(folder);
  if (inner.empty() || outer.empty()) return false;
  auto i = inner.begin();
  for (const std::filesystem::path& part : outer) {
    if (i == inner.end() || *i != part) return false;
    ++i;
  }
  return true;
}

}  // namespace gantry
