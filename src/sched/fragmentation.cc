#include "gantry/sched/fragmentation.h"

namespace gantry {

TaskClass TaskMix::ClassOf(const JobRequest& job) {
  TaskClass c;
  c.types = job.gpu_type_mask;
  if (IsShare(job)) {
    c.gpus = 1;
    c.milli = job.gpu_milli;
  } else if (job.nodes > 0 && job.gpus_per_node > 0) {
    c.gpus = job.gpus_per_node;
  } else {
    c.gpus = 1;  // "any": every free GPU of an allowed type is one it could use
  }
  return c;
}

int TaskMix::Find(const JobRequest& job) const {
  TaskClass c = ClassOf(job);
  for (size_t i = 0; i < classes_.size(); ++i) {
    c.share = classes_[i].share;
    if (classes_[i] == c) return static_cast<int>(i);
  }
  return -1;
}

void TaskMix::Add(const JobRequest& job) {
  int i = Find(job);
  if (i < 0) {
    classes_.push_back(ClassOf(job));
    counts_.push_back(0);
    i = static_cast<int>(classes_.size()) - 1;
  }
  ++counts_[i];
  ++tasks_;
  for (size_t k = 0; k < classes_.size(); ++k) {
    classes_[k].share = static_cast<double>(counts_[k]) / static_cast<double>(tasks_);
  }
}

int DeviceNeed(const TaskClass& m, int capacity) {
  if (m.milli <= 0) return capacity;
  // Rounded up: a slice too small for the task is of no use to it.
  return static_cast<int>((static_cast<int64_t>(m.milli) * capacity + kMilliPerGpu - 1) /
                          kMilliPerGpu);
}

int64_t TaskFragment(std::span<const int> device_free, int capacity, GpuTypeIndex type,
                     const TaskClass& m) {
  if (!((m.types >> type) & 1u)) return 0;
  const int need = DeviceNeed(m, capacity);
  int64_t total = 0, small = 0;  // all free units; free units on devices below `need`
  int fits = 0;                  // devices with at least `need` free
  for (int f : device_free) {
    total += f;
    if (f >= need) {
      ++fits;
    } else {
      small += f;
    }
  }
  const int want = m.milli > 0 ? 1 : m.gpus;
  return fits >= want ? small : total;
}

double NodeFragmentation(std::span<const int> device_free, int capacity, GpuTypeIndex type,
                         const TaskMix& mix) {
  double f = 0;
  for (const TaskClass& m : mix.classes()) {
    f += m.share * static_cast<double>(TaskFragment(device_free, capacity, type, m));
  }
  return f;
}

double WholeGpuFragmentation(int free, GpuTypeIndex type, const TaskMix& mix) {
  double f = 0;
  for (const TaskClass& m : mix.classes()) {
    if (((m.types >> type) & 1u) && free < (m.milli > 0 ? 1 : m.gpus)) f += m.share * free;
  }
  return f;
}

double TypeContention(const TaskMix& mix, GpuTypeIndex type, uint32_t mask,
                      uint32_t cluster_types) {
  mask &= cluster_types;
  double narrower = 0, all = 0;
  for (const TaskClass& m : mix.classes()) {
    const double demand = m.share * (m.milli > 0 ? m.milli / double{kMilliPerGpu} : m.gpus);
    all += demand;
    const uint32_t types = m.types & cluster_types;
    const bool strict_subset = (types & mask) == types && types != mask;
    if (((types >> type) & 1u) && strict_subset) narrower += demand;
  }
  return all > 0 ? narrower / all : 0;
}

}  // namespace gantry
