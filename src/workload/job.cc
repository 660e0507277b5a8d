#include "gantry/workload/job.h"

namespace gantry {

NameTable::NameTable(std::vector<std::string>& table) : table_(table) {
  for (size_t i = 0; i < table_.size(); ++i) index_.emplace(table_[i], static_cast<int32_t>(i));
}

int32_t NameTable::Intern(const std::string& name) {
  auto [it, inserted] = index_.emplace(name, static_cast<int32_t>(table_.size()));
  if (inserted) table_.push_back(name);
  return it->second;
}

}  // namespace gantry
