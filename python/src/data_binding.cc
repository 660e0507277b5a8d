// _gantry's dataset reader: the binding of gantry::data's shard sources and per-reader iterator
// (include/gantry/data/loader.h) that gantry/data.py builds StreamingDataset on.
//
//   source = _gantry.DataSource("s3://bkt/train", wds_shard_samples=None, verify_hashes=False)
//   reader = _gantry.DataReader(source, seed=0, shuffle=True, window=262144, epoch=0,
//                               world=1, rank=0, workers=0, worker=0, batch=1, start=0)
//   for position, key, fields in reader: ...   # fields: [(name, encoding, bytes)]
//
// The order and the iteration are C++; fetching a shard releases the GIL. Each field's bytes
// are copied into a Python bytes object (the shard is dropped once its window has passed).
// Objects are for one thread; a DataLoader worker opens its own (they are not picklable).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gantry/data/dataset.h"
#include "gantry/data/loader.h"
#include "gantry/data/order.h"
#include "module.h"

namespace py = pybind11;

namespace gantry::python {
namespace {

using data::EpochOrder;
using data::OrderOptions;
using data::SampleIterator;
using data::ShardSource;

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ckpt::ThrowStatus(result.status());
  return std::move(result).value();
}

struct PySource {
  std::shared_ptr<ShardSource> source;
  std::string url;
};

PySource OpenSource(const std::string& url, std::optional<std::vector<uint64_t>> wds_samples,
                    bool verify_hashes) {
  Result<std::unique_ptr<ShardSource>> opened = [&]() -> Result<std::unique_ptr<ShardSource>> {
    py::gil_scoped_release release;
    GANTRY_ASSIGN_OR_RETURN(data::DatasetLocation d, data::LocateDataset(url, {}));
    data::ShardSourceOptions options;
    options.verify_hashes = verify_hashes;
    if (wds_samples) options.wds_shard_samples = *wds_samples;
    return data::OpenShardSource(std::move(d), options);
  }();
  return PySource{std::shared_ptr<ShardSource>(Unwrap(std::move(opened))), url};
}

class PyReader {
 public:
  PyReader(const PySource& source, const OrderOptions& options, uint64_t epoch,
           const data::Slot& slot, uint64_t start)
      : source_(source.source),
        order_(Unwrap(EpochOrder::Create(source_->shard_samples(), options, epoch))),
        it_(Unwrap(SampleIterator::Create(*source_, order_, slot, start))) {}

  uint64_t remaining() const { return it_.remaining(); }
  uint64_t shards_read() const { return it_.shards_read(); }

  // (position, key, [(name, encoding, bytes)]); StopIteration at the end.
  py::tuple Next() {
    Result<bool> more = [&] {
      py::gil_scoped_release release;  // may fetch a shard
      return it_.Next(sample_);
    }();
    if (!Unwrap(std::move(more))) throw py::stop_iteration();
    py::list fields;
    for (const data::SampleField& f : sample_.fields) {
      fields.append(py::make_tuple(py::str(f.name.data(), f.name.size()),
                                   py::str(f.encoding.data(), f.encoding.size()),
                                   py::bytes(f.bytes.data(), f.bytes.size())));
    }
    // Keys may not be UTF-8 (tar member names are bytes): decoded with surrogateescape.
    PyObject* key = PyUnicode_DecodeUTF8(
        sample_.key.data(), static_cast<Py_ssize_t>(sample_.key.size()), "surrogateescape");
    if (key == nullptr) throw py::error_already_set();
    return py::make_tuple(sample_.position, py::reinterpret_steal<py::object>(key), fields);
  }

 private:
  std::shared_ptr<ShardSource> source_;
  EpochOrder order_;
  SampleIterator it_;
  data::Sample sample_;
};

}  // namespace

void DefineDataModule(py::module_& m) {
  py::class_<PySource>(m, "DataSource",
                       "A dataset's shards (MDS or WebDataset) at a store URL, for DataReader")
      .def(py::init(&OpenSource), py::arg("url"), py::arg("wds_shard_samples") = py::none(),
           py::arg("verify_hashes") = false)
      .def_readonly("url", &PySource::url)
      .def_property_readonly(
          "format", [](const PySource& s) { return data::DatasetFormatName(s.source->format()); })
      .def_property_readonly("shard_samples",
                             [](const PySource& s) { return s.source->shard_samples(); })
      .def("shard_name", [](const PySource& s, uint32_t i) {
        if (i >= s.source->shard_samples().size()) throw py::index_error("no such shard");
        return s.source->ShardName(i);
      });

  py::class_<PyReader>(m, "DataReader",
                       "One reader's samples of one epoch, in the global order (docs/data.md)")
      .def(py::init([](const PySource& source, uint64_t seed, bool shuffle, uint64_t window,
                       uint64_t epoch, uint32_t world, uint32_t rank, uint32_t workers,
                       uint32_t worker, uint64_t batch, uint64_t start) {
             return std::make_unique<PyReader>(source, OrderOptions{seed, shuffle, window}, epoch,
                                               data::Slot{world, rank, workers, worker, batch},
                                               start);
           }),
           py::arg("source"), py::kw_only(), py::arg("seed") = 0, py::arg("shuffle") = true,
           py::arg("window") = uint64_t{1} << 18, py::arg("epoch") = 0, py::arg("world") = 1,
           py::arg("rank") = 0, py::arg("workers") = 0, py::arg("worker") = 0, py::arg("batch") = 1,
           py::arg("start") = 0)
      .def_property_readonly("remaining", &PyReader::remaining)
      .def_property_readonly("shards_read", &PyReader::shards_read)
      .def("__iter__", [](PyReader& r) -> PyReader& { return r; })
      .def("__next__", &PyReader::Next);

  m.def(
      "slot_samples",
      [](uint32_t world, uint32_t rank, uint32_t workers, uint32_t worker, uint64_t batch,
         uint64_t start, uint64_t end) {
        return Unwrap(
                   data::SlotPositions::Create({world, rank, workers, worker, batch}, start, end))
            .size();
      },
      py::arg("world"), py::arg("rank"), py::arg("workers"), py::arg("worker"), py::arg("batch"),
      py::arg("start"), py::arg("end"),
      "How many positions of [start, end) the slot reads (the uneven tail: docs/data.md)");
}

}  // namespace gantry::python
