// _gantry: the pybind11 binding of the checkpoint engine (gantry::ckpt::CheckpointEngine) that
// the pure-Python package `gantry` builds its user API on. It speaks in flat tensor descriptors
// (name, dtype, global shape, row slice, data pointer as an int); turning a state dict into
// descriptors and a structure JSON is the Python side's job (gantry/checkpoint.py).
//
// The binding never keeps a data pointer past the call that received it: Save copies the
// tensors into the engine's host buffers before it returns, Restore writes into the targets
// before it returns. Every call that may block (opening, the snapshot, waiting, restoring,
// listing, GC, verification) releases the GIL, so training threads keep running.
//
// Errors become Python exceptions carrying the C++ message, all derived from
// _gantry.CheckpointError, one class per status code a caller can act on (see Throw):
// InvalidArgumentError (also a ValueError), NotFoundError (also a FileNotFoundError and a
// KeyError), AlreadyExistsError (also a FileExistsError), PermissionDeniedError (also a
// PermissionError), UnavailableError (also a TimeoutError), StorageError (also an OSError) with
// its subclasses ResourceExhaustedError (out of space or quota) and DataLossError (damaged
// bytes), and EngineError (also a RuntimeError) for the rest.
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/env_options.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/common/status.h"

namespace py = pybind11;

namespace gantry::ckpt {
namespace {

// Exception classes, created at import and owned by the module (never freed: the module lives
// until the interpreter ends).
struct Errors {
  PyObject* base = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* not_found = nullptr;
  PyObject* already_exists = nullptr;
  PyObject* permission_denied = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* storage = nullptr;
  PyObject* resource_exhausted = nullptr;
  PyObject* data_loss = nullptr;
  PyObject* failed = nullptr;
};
Errors errors;

PyObject* NewError(py::module_& m, const char* name, std::vector<PyObject*> bases,
                   const char* doc) {
  py::tuple base_tuple(bases.size());
  for (size_t i = 0; i < bases.size(); ++i) {
    base_tuple[i] = py::reinterpret_borrow<py::object>(bases[i]);
  }
  const std::string qualified = std::string("gantry._gantry.") + name;
  PyObject* cls =
      PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), /*dict=*/nullptr);
  if (cls == nullptr) throw py::error_already_set();
  // The module keeps its own reference; `cls` (the new reference) is kept for raising.
  m.attr(name) = py::reinterpret_borrow<py::object>(cls);
  return cls;
}

[[noreturn]] void Throw(const Status& status) {
  PyObject* cls = errors.failed;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      cls = errors.invalid_argument;
      break;
    case StatusCode::kNotFound:
      cls = errors.not_found;
      break;
    case StatusCode::kAlreadyExists:
      cls = errors.already_exists;
      break;
    case StatusCode::kPermissionDenied:
      cls = errors.permission_denied;
      break;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kAborted:  // lost a race: retrying from the start may succeed
      cls = errors.unavailable;
      break;
    case StatusCode::kIoError:
      cls = errors.storage;
      break;
    case StatusCode::kResourceExhausted:
      cls = errors.resource_exhausted;
      break;
    case StatusCode::kDataLoss:
      cls = errors.data_loss;
      break;
    case StatusCode::kOk:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal:
    case StatusCode::kUnimplemented:
    case StatusCode::kCancelled:
      break;
  }
  PyErr_SetString(cls, status.message().c_str());
  throw py::error_already_set();
}

void Check(const Status& status) {
  if (!status.ok()) Throw(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) Throw(result.status());
  return std::move(result).value();
}

DType ToDType(const std::string& name) { return Unwrap(ParseDType(name)); }

// A tensor descriptor from Python: (name, dtype, global_shape, row_offset, rows, data_ptr).
struct Descriptor {
  std::string name;
  DType dtype;
  std::vector<int64_t> global_shape;
  int64_t row_offset;
  int64_t rows;
  uintptr_t data;
};

Descriptor ToDescriptor(const py::handle& item) {
  auto t = py::reinterpret_borrow<py::sequence>(item);
  if (t.size() != 6) {
    PyErr_SetString(errors.invalid_argument,
                    "a tensor descriptor is (name, dtype, global_shape, row_offset, rows, "
                    "data_ptr)");
    throw py::error_already_set();
  }
  Descriptor d;
  d.name = t[0].cast<std::string>();
  d.dtype = ToDType(t[1].cast<std::string>());
  d.global_shape = t[2].cast<std::vector<int64_t>>();
  d.row_offset = t[3].cast<int64_t>();
  d.rows = t[4].cast<int64_t>();
  d.data = t[5].cast<uintptr_t>();
  return d;
}

py::dict StatsDict(const SaveStats& s) {
  py::dict d;
  d["step"] = s.step;
  d["tensors"] = s.tensors;
  d["bytes_total"] = s.bytes_total;
  d["chunks_total"] = s.chunks_total;
  d["chunks_written"] = s.chunks_written;
  d["bytes_written"] = s.bytes_written;
  d["written_fraction"] = s.written_fraction();
  d["blocking_seconds"] = s.blocking_seconds;
  d["local_seconds"] = s.local_seconds;
  d["durable_seconds"] = s.durable_seconds;
  d["committed_seconds"] = s.committed_seconds;
  return d;
}

py::dict RestoreStatsDict(const RestoreStats& s) {
  py::dict d;
  d["bytes"] = s.bytes;
  d["chunks"] = s.chunks;
  d["from_local"] = s.from_local;
  d["from_peers"] = s.from_peers;
  d["from_durable"] = s.from_durable;
  d["corrupt"] = s.corrupt;
  d["seconds"] = s.seconds;
  return d;
}

// Wraps a Python progress callable for the engine, which calls it from its own threads. A
// callback that raises is disabled rather than allowed to abort the restore half-way.
ProgressFn ToProgress(const py::object& callback) {
  if (callback.is_none()) return nullptr;
  auto fn = std::make_shared<py::object>(callback);
  auto failed = std::make_shared<std::atomic<bool>>(false);
  return [fn, failed](uint64_t done, uint64_t total) {
    if (failed->load()) return;
    py::gil_scoped_acquire gil;
    try {
      (*fn)(done, total);
    } catch (py::error_already_set& e) {
      failed->store(true);
      e.discard_as_unraisable("gantry progress callback");
    }
  };
}

// The engine as Python sees it: close() lets the owner wait for saves in flight without holding
// the GIL, instead of in a destructor run by the garbage collector.
class PyEngine {
 public:
  explicit PyEngine(std::unique_ptr<CheckpointEngine> engine) : engine_(std::move(engine)) {}
  ~PyEngine() { Close(); }

  CheckpointEngine& engine() {
    if (!engine_) {
      PyErr_SetString(errors.failed, "the checkpoint engine is closed");
      throw py::error_already_set();
    }
    return *engine_;
  }
  void Close() {
    if (!engine_) return;
    std::unique_ptr<CheckpointEngine> engine = std::move(engine_);
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      engine.reset();
    } else {
      engine.reset();
    }
  }
  bool closed() const { return engine_ == nullptr; }

 private:
  std::unique_ptr<CheckpointEngine> engine_;
};

// EngineOptions from Engine(root, **options); unknown keys are a TypeError, like any Python call.
EngineOptions OptionsFromKwargs(const std::string& root, const py::kwargs& kwargs) {
  EngineOptions o;
  o.durable_url = root;
  for (const auto& [key_handle, value] : kwargs) {
    const std::string key = key_handle.cast<std::string>();
    if (key == "local") {
      o.local_url = value.cast<std::string>();
    } else if (key == "peers") {
      o.peers = value.cast<std::vector<std::string>>();
    } else if (key == "job") {
      o.job = value.cast<std::string>();
    } else if (key == "rank") {
      o.rank = value.cast<int>();
    } else if (key == "world_size") {
      o.world_size = value.cast<int>();
    } else if (key == "chunk_size") {
      o.chunk_size = value.cast<uint64_t>();
    } else if (key == "host_buffer_bytes") {
      o.host_buffer_bytes = value.cast<uint64_t>();
    } else if (key == "io_threads") {
      o.io_threads = value.cast<int>();
    } else if (key == "codec") {
      o.durable_codec = Unwrap(ParseCodec(value.cast<std::string>()));
    } else if (key == "keep_local") {
      o.keep_local = value.cast<int>();
    } else if (key == "run_id") {
      o.run_id = value.cast<std::string>();
    } else if (key == "local_fsync") {
      o.local_fsync = value.cast<bool>();
    } else if (key == "keep_last") {
      o.retention.keep_last = value.cast<int>();
    } else if (key == "keep_every") {
      o.retention.keep_every = value.cast<int64_t>();
    } else if (key == "keep_tagged") {
      o.retention.keep_tagged = value.cast<bool>();
    } else if (key == "peer_timeout_ms") {
      o.peer_timeout_ms = value.cast<int>();
    } else if (key == "commit_timeout_ms") {
      o.commit_timeout_ms = value.cast<int64_t>();
    } else if (key == "gc_grace_seconds") {
      o.gc_grace_seconds = value.cast<int64_t>();
    } else if (key == "endpoint") {  // S3; empty fields fall back to the AWS variables and files
      o.store_options.endpoint = value.cast<std::string>();
    } else if (key == "region") {
      o.store_options.region = value.cast<std::string>();
    } else if (key == "access_key") {
      o.store_options.access_key = value.cast<std::string>();
    } else if (key == "secret_key") {
      o.store_options.secret_key = value.cast<std::string>();
    } else if (key == "session_token") {
      o.store_options.session_token = value.cast<std::string>();
    } else if (key == "profile") {
      o.store_options.profile = value.cast<std::string>();
    } else {
      throw py::type_error("Engine: unknown option '" + key + "'");
    }
  }
  return o;
}

std::unique_ptr<PyEngine> OpenEngine(const std::string& root, const py::kwargs& kwargs) {
  EngineOptions options = OptionsFromKwargs(root, kwargs);
  Result<std::unique_ptr<CheckpointEngine>> engine = [&] {
    py::gil_scoped_release release;
    return CheckpointEngine::Open(std::move(options));
  }();
  return std::make_unique<PyEngine>(Unwrap(std::move(engine)));
}

std::shared_ptr<SaveHandle> Save(PyEngine& self, const py::iterable& tensors, int64_t step,
                                 const std::string& durability,
                                 const std::vector<std::string>& tags,
                                 const std::string& metadata_json,
                                 const std::string& structure_json) {
  std::vector<SaveTensor> list;
  for (const py::handle item : tensors) {
    Descriptor d = ToDescriptor(item);
    SaveTensor t;
    t.name = std::move(d.name);
    t.dtype = d.dtype;
    t.global_shape = std::move(d.global_shape);
    t.row_offset = d.row_offset;
    t.rows = d.rows;
    t.data = reinterpret_cast<const void*>(d.data);
    list.push_back(std::move(t));
  }
  SaveOptions options;
  options.step = step;
  options.durability = Unwrap(ParseDurability(durability));
  options.tags = tags;
  options.metadata_json = metadata_json;
  options.structure_json = structure_json;
  CheckpointEngine& engine = self.engine();
  Result<std::shared_ptr<SaveHandle>> handle = [&] {
    py::gil_scoped_release release;
    return engine.Save(list, options);
  }();
  return Unwrap(std::move(handle));
}

py::dict Restore(PyEngine& self, const CheckpointManifest& manifest, const py::iterable& targets,
                 const py::object& progress) {
  std::vector<RestoreTarget> list;
  for (const py::handle item : targets) {
    Descriptor d = ToDescriptor(item);
    RestoreTarget t;
    t.name = std::move(d.name);
    t.dtype = d.dtype;
    t.global_shape = std::move(d.global_shape);
    t.row_offset = d.row_offset;
    t.rows = d.rows;
    t.data = reinterpret_cast<void*>(d.data);
    list.push_back(std::move(t));
  }
  ProgressFn fn = ToProgress(progress);
  CheckpointEngine& engine = self.engine();
  RestoreStats stats;
  Status status;
  {
    py::gil_scoped_release release;
    status = engine.Restore(manifest, list, &stats, fn);
  }
  Check(status);
  return RestoreStatsDict(stats);
}

py::dict InfoDict(const CheckpointInfo& info) {
  py::dict d;
  d["step"] = info.step;
  d["committed"] = info.committed;
  d["damaged"] = info.damaged;
  d["problem"] = info.problem;
  d["parts"] = info.parts;
  d["world_size"] = info.world_size;
  d["bytes"] = info.bytes;
  d["created_unix"] = info.created_unix;
  d["tags"] = info.tags;
  return d;
}

py::list SlicesList(const TensorRecord& t) {
  py::list slices;
  for (const SliceRecord& s : t.slices) {
    py::dict d;
    d["rank"] = s.rank;
    d["row_offset"] = s.row_offset;
    d["rows"] = s.rows;
    d["nbytes"] = s.nbytes;
    d["chunks"] = s.chunks.size();
    slices.append(std::move(d));
  }
  return slices;
}

void DefineModule(py::module_& m) {
  m.doc() = "Gantry's checkpoint engine (use the `gantry` package, not this module directly)";

  errors.base = NewError(m, "CheckpointError", {PyExc_Exception},
                         "Base of every error the checkpoint engine reports");
  errors.invalid_argument =
      NewError(m, "InvalidArgumentError", {errors.base, PyExc_ValueError},
               "Malformed input: a bad dtype, shape, slice, step, option or manifest");
  errors.not_found =
      NewError(m, "NotFoundError", {errors.base, PyExc_FileNotFoundError, PyExc_KeyError},
               "A checkpoint, tensor or object that does not exist");
  errors.already_exists = NewError(m, "AlreadyExistsError", {errors.base, PyExc_FileExistsError},
                                   "A create-only write found the name taken");
  errors.permission_denied =
      NewError(m, "PermissionDeniedError", {errors.base, PyExc_PermissionError},
               "Not allowed: file permissions, a read-only file system, HTTP 401 or 403");
  errors.unavailable = NewError(m, "UnavailableError", {errors.base, PyExc_TimeoutError},
                                "A transient failure, a timeout or a lost race; retrying may help");
  errors.storage =
      NewError(m, "StorageError", {errors.base, PyExc_OSError}, "An I/O error of a storage tier");
  errors.resource_exhausted =
      NewError(m, "ResourceExhaustedError", {errors.storage},
               "Out of space or quota (ENOSPC, EDQUOT, a full tier, an S3 quota)");
  errors.data_loss = NewError(m, "DataLossError", {errors.storage},
                              "Stored bytes are damaged: a checksum mismatch, a truncated object");
  errors.failed = NewError(m, "EngineError", {errors.base, PyExc_RuntimeError},
                           "Any other failure of the checkpoint engine");

  m.def(
      "dtype_size", [](const std::string& dtype) { return DTypeSize(ToDType(dtype)); },
      py::arg("dtype"), "Bytes of one element of a checkpoint dtype (\"float32\", ...)");
  m.attr("DEFAULT_CHUNK_SIZE") = kDefaultChunkSize;
  // The environment's checkpointer defaults, read by the same C++ as `gantry ckpt` reads them.
  m.def(
      "env_defaults",
      [] {
        const CkptEnvDefaults env = ReadCkptEnvDefaults();
        py::dict d;
        d["root"] = env.root;
        d["local"] = env.local;
        d["job"] = env.job;
        d["peers"] = env.peers;
        return d;
      },
      "{root, local, job, peers} from GANTRY_CKPT_ROOT, GANTRY_CKPT_LOCAL, GANTRY_CKPT_JOB "
      "(default 'default') and GANTRY_CKPT_PEERS (comma-separated)");
  m.def(
      "env_rank", [] { return Unwrap(RankFromEnv()); },
      "RANK (default 0); InvalidArgumentError when it is not an integer");
  m.def(
      "env_world_size", [] { return Unwrap(WorldSizeFromEnv()); },
      "WORLD_SIZE (default 1); InvalidArgumentError when it is not an integer");

  py::class_<SaveHandle, std::shared_ptr<SaveHandle>>(m, "SaveHandle")
      .def_property_readonly("step", &SaveHandle::step)
      .def("done", &SaveHandle::done, "True once the requested durability is reached or failed")
      .def(
          "wait",
          [](SaveHandle& h) {
            Status s;
            {
              py::gil_scoped_release release;
              s = h.Wait();
            }
            Check(s);
          },
          "Blocks until the requested durability is reached; raises the save's error")
      .def(
          "wait_for",
          [](SaveHandle& h, const std::string& level) {
            const Durability d = Unwrap(ParseDurability(level));
            Status s;
            {
              py::gil_scoped_release release;
              s = h.WaitFor(d);
            }
            Check(s);
          },
          py::arg("level"))
      .def_property_readonly("stats", [](const SaveHandle& h) { return StatsDict(h.stats()); });

  py::class_<CheckpointManifest>(m, "Manifest")
      .def_readonly("job", &CheckpointManifest::job)
      .def_readonly("step", &CheckpointManifest::step)
      .def_readonly("world_size", &CheckpointManifest::world_size)
      .def_readonly("chunk_size", &CheckpointManifest::chunk_size)
      .def_readonly("created_unix", &CheckpointManifest::created_unix)
      .def_readonly("tags", &CheckpointManifest::tags)
      .def_readonly("metadata_json", &CheckpointManifest::metadata_json)
      .def_property_readonly("total_bytes", &CheckpointManifest::TotalBytes)
      .def(
          "structure_json",
          [](const CheckpointManifest& mf, int rank) -> py::object {
            for (const RankRecord& r : mf.ranks) {
              if (r.rank == rank) return py::str(r.structure_json);
            }
            return py::none();
          },
          py::arg("rank"), "The structure JSON rank `rank` saved, or None")
      .def_property_readonly("ranks",
                             [](const CheckpointManifest& mf) {
                               py::list out;
                               for (const RankRecord& r : mf.ranks) {
                                 py::dict d;
                                 d["rank"] = r.rank;
                                 d["bytes_total"] = r.bytes_total;
                                 d["bytes_written"] = r.bytes_written;
                                 d["chunks_total"] = r.chunks_total;
                                 d["chunks_written"] = r.chunks_written;
                                 out.append(std::move(d));
                               }
                               return out;
                             })
      .def_property_readonly("tensors",
                             [](const CheckpointManifest& mf) {
                               py::dict out;
                               for (const TensorRecord& t : mf.tensors) {
                                 py::dict d;
                                 d["dtype"] = DTypeName(t.dtype);
                                 d["global_shape"] = t.global_shape;
                                 d["slices"] = SlicesList(t);
                                 out[py::str(t.name)] = std::move(d);
                               }
                               return out;
                             })
      .def("to_json", &CheckpointManifest::ToJson)
      .def_static(
          "from_json",
          [](const std::string& json, const std::string& what) {
            return Unwrap(CheckpointManifest::FromJson(json, what));
          },
          py::arg("json"), py::arg("what") = "manifest");

  py::class_<PyEngine>(m, "Engine")
      .def(py::init(&OpenEngine), py::arg("root"),
           "Opens the engine: root (durable tier URL or path) and keyword options local, peers, "
           "job, rank, world_size, chunk_size, host_buffer_bytes, io_threads, codec, "
           "keep_local, local_fsync, run_id, keep_last, keep_every, keep_tagged, peer_timeout_ms, "
           "commit_timeout_ms, gc_grace_seconds, endpoint, region, access_key, secret_key, "
           "session_token, profile")
      .def("close", &PyEngine::Close, "Waits for saves in flight and releases the engine")
      .def_property_readonly("closed", &PyEngine::closed)
      .def_property_readonly("rank", [](PyEngine& e) { return e.engine().options().rank; })
      .def_property_readonly("world_size",
                             [](PyEngine& e) { return e.engine().options().world_size; })
      .def_property_readonly("job", [](PyEngine& e) { return e.engine().options().job; })
      .def("save", &Save, py::arg("tensors"), py::kw_only(), py::arg("step"),
           py::arg("durability") = "committed", py::arg("tags") = std::vector<std::string>{},
           py::arg("metadata_json") = "{}", py::arg("structure_json") = "null",
           "Snapshots the tensors (descriptors (name, dtype, global_shape, row_offset, rows, "
           "data_ptr)) and returns a SaveHandle; the writes run in the background")
      .def(
          "wait_all",
          [](PyEngine& e) {
            CheckpointEngine& engine = e.engine();
            Status s;
            {
              py::gil_scoped_release release;
              s = engine.WaitAll();
            }
            Check(s);
          },
          "Waits for every save in flight; raises the first error")
      .def("list",
           [](PyEngine& e) {
             CheckpointEngine& engine = e.engine();
             Result<std::vector<CheckpointInfo>> infos = [&] {
               py::gil_scoped_release release;
               return engine.List();
             }();
             py::list out;
             for (const CheckpointInfo& info : Unwrap(std::move(infos))) out.append(InfoDict(info));
             return out;
           })
      .def("latest_step",
           [](PyEngine& e) {
             CheckpointEngine& engine = e.engine();
             Result<int64_t> step = [&] {
               py::gil_scoped_release release;
               return engine.LatestStep();
             }();
             return Unwrap(std::move(step));
           })
      .def(
          "read_manifest",
          [](PyEngine& e, int64_t step) {
            CheckpointEngine& engine = e.engine();
            Result<CheckpointManifest> mf = [&] {
              py::gil_scoped_release release;
              return engine.ReadManifest(step);
            }();
            return Unwrap(std::move(mf));
          },
          py::arg("step"))
      .def("restore", &Restore, py::arg("manifest"), py::arg("targets"),
           py::arg("progress") = py::none(),
           "Fills the targets (descriptors (name, dtype, global_shape, row_offset, rows, "
           "data_ptr)) from the checkpoint; returns restore statistics")
      .def(
          "remove",
          [](PyEngine& e, int64_t step) {
            CheckpointEngine& engine = e.engine();
            Status s;
            {
              py::gil_scoped_release release;
              s = engine.Remove(step);
            }
            Check(s);
          },
          py::arg("step"))
      .def(
          "gc",
          [](PyEngine& e, std::optional<int> keep_last, std::optional<int64_t> keep_every,
             std::optional<bool> keep_tagged) {
            CheckpointEngine& engine = e.engine();
            std::optional<Retention> retention;
            if (keep_last || keep_every || keep_tagged) {
              retention = engine.options().retention;
              if (keep_last) retention->keep_last = *keep_last;
              if (keep_every) retention->keep_every = *keep_every;
              if (keep_tagged) retention->keep_tagged = *keep_tagged;
            }
            Result<CkptGcReport> report = [&] {
              py::gil_scoped_release release;
              return engine.CollectGarbage(retention);
            }();
            CkptGcReport r = Unwrap(std::move(report));
            py::dict d;
            d["removed_steps"] = r.removed_steps;
            d["deleted_chunks"] = r.deleted_chunks;
            d["deleted_bytes"] = r.deleted_bytes;
            d["kept_young"] = r.kept_young;
            d["referenced_chunks"] = r.referenced_chunks;
            d["warnings"] = r.warnings;  // damaged checkpoints left in place
            return d;
          },
          py::kw_only(), py::arg("keep_last") = py::none(), py::arg("keep_every") = py::none(),
          py::arg("keep_tagged") = py::none(),
          "Applies retention (the engine's, or these overrides) and deletes unreferenced chunks")
      .def(
          "verify",
          [](PyEngine& e, int64_t step, const py::object& progress) {
            CheckpointEngine& engine = e.engine();
            ProgressFn fn = ToProgress(progress);
            Result<VerifyCkptReport> report = [&] {
              py::gil_scoped_release release;
              return engine.Verify(step, fn);
            }();
            VerifyCkptReport r = Unwrap(std::move(report));
            py::dict d;
            d["chunks"] = r.chunks;
            d["bytes"] = r.bytes;
            d["missing"] = r.missing;
            d["corrupt"] = r.corrupt;
            d["errors"] = r.errors;
            return d;
          },
          py::arg("step"), py::arg("progress") = py::none());
}

}  // namespace
}  // namespace gantry::ckpt

PYBIND11_MODULE(_gantry, m) { gantry::ckpt::DefineModule(m); }
