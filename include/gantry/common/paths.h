// Questions about local paths that several parts ask the same way: is one folder inside
// another, once links and ".." are resolved. Used where writing into the wrong folder would
// feed a tool its own output (a dataset packed into its input, a shard cache inside the dataset
// it caches).
#pragma once

#include <string>

namespace gantry {

// True if the local path that `url_or_path` names (a plain path or a file:// URL; it need not
// exist yet) is the folder `folder` or lies beneath it, comparing whole components after
// resolving links and "..". False for URLs of other stores (s3://, http://, mem://), which
// are never a local folder, and for an empty `folder`.
bool LocalPathWithin(const std::string& url_or_path, const std::string& folder);

}  // namespace gantry
