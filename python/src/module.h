// What the files of the _gantry extension share: raising a Status as the module's exception
// classes (defined in binding.cc), and the definers of each part of the module.
#pragma once

#include <pybind11/pybind11.h>

#include "gantry/common/status.h"

namespace gantry {
namespace ckpt {
// Raises the Python exception class for status.code() (see binding.cc's ErrorClasses).
[[noreturn]] void ThrowStatus(const Status& status);
}  // namespace ckpt

namespace python {
// _gantry's dataset reader: DataSource, DataReader (data_binding.cc).
void DefineDataModule(pybind11::module_& m);
}  // namespace python
}  // namespace gantry
