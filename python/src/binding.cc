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
// _gantry.CheckpointError, one class per status code a caller can act on (see ErrorClasses):
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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/env_options.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/common/status.h"
#include "module.h"

namespace py = pybind11;

namespace gantry::ckpt {
namespace {

using pybind11::literals::operator""_a;

// One Python exception class: its parent in this table (nullptr: none), the builtins it also
// derives from, so that Python code catching those catches it, and the status codes raised as
// it. Classes come before their children.
struct ErrorClass {
  const char* name;
  const char* parent;
  std::vector<PyObject*> builtins;
  std::vector<StatusCode> codes;
  const char* doc;
};

// EngineError names no code: it stands for every code no other class names.
std::vector<ErrorClass> ErrorClasses() {
  const char* base = "CheckpointError";
  return {
      {base, nullptr, {PyExc_Exception}, {}, "Base of every error the checkpoint engine reports"},
      {"InvalidArgumentError",
       base,
       {PyExc_ValueError},
       {StatusCode::kInvalidArgument, StatusCode::kOutOfRange},
       "Malformed input: a bad dtype, shape, slice, step, option or manifest"},
      {"NotFoundError",
       base,
       {PyExc_FileNotFoundError, PyExc_KeyError},
       {StatusCode::kNotFound},
       "A checkpoint, tensor or object that does not exist"},
      {"AlreadyExistsError",
       base,
       {PyExc_FileExistsError},
       {StatusCode::kAlreadyExists},
       "A create-only write found the name taken"},
      {"PermissionDeniedError",
       base,
       {PyExc_PermissionError},
       {StatusCode::kPermissionDenied},
       "Not allowed: file permissions, a read-only file system, HTTP 401 or 403"},
      // kAborted: lost a race; retrying from the start may succeed.
      {"UnavailableError",
       base,
       {PyExc_TimeoutError},
       {StatusCode::kUnavailable, StatusCode::kDeadlineExceeded, StatusCode::kAborted},
       "A transient failure, a timeout or a lost race; retrying may help"},
      {"StorageError",
       base,
       {PyExc_OSError},
       {StatusCode::kIoError},
       "An I/O error of a storage tier"},
      {"ResourceExhaustedError",
       "StorageError",
       {},
       {StatusCode::kResourceExhausted},
       "Out of space or quota (ENOSPC, EDQUOT, a full tier, an S3 quota)"},
      {"DataLossError",
       "StorageError",
       {},
       {StatusCode::kDataLoss},
       "Stored bytes are damaged: a checksum mismatch, a truncated object"},
      {"EngineError", base, {PyExc_RuntimeError}, {}, "Any other failure of the checkpoint engine"},
  };
}

// The classes by code, created at import and owned by the module (never freed: the module lives
// until the interpreter ends).
struct Errors {
  std::map<StatusCode, PyObject*> by_code;
  PyObject* other = nullptr;  // EngineError
};
Errors errors;

PyObject* NewError(py::module_& m, const char* name, const std::vector<PyObject*>& bases,
                   const char* doc) {
  py::tuple base_tuple(bases.size());
  for (size_t i = 0; i < bases.size(); ++i) {
    base_tuple[i] = py::reinterpret_borrow<py::object>(bases[i]);
  }
  // Named as the `gantry` package exports them, so that pickle finds the class again (by
  // reference): a DataLoader worker's error crosses to the training process pickled, and a
  // class pickle cannot import was lost on the way, its batch skipped without a word.
  const std::string qualified = std::string("gantry.") + name;
  PyObject* cls =
      PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), /*dict=*/nullptr);
  if (cls == nullptr) throw py::error_already_set();
  // The module keeps its own reference; `cls` (the new reference) is kept for raising.
  m.attr(name) = py::reinterpret_borrow<py::object>(cls);
  return cls;
}

void DefineErrors(py::module_& m) {
  std::map<std::string, PyObject*> by_name;
  for (const ErrorClass& e : ErrorClasses()) {
    std::vector<PyObject*> bases;
    if (e.parent != nullptr) bases.push_back(by_name.at(e.parent));
    bases.insert(bases.end(), e.builtins.begin(), e.builtins.end());
    PyObject* cls = NewError(m, e.name, bases, e.doc);
    by_name[e.name] = cls;
    for (StatusCode code : e.codes) errors.by_code[code] = cls;
  }
  errors.other = by_name.at("EngineError");
}

[[noreturn]] void Throw(const Status& status) {
  auto it = errors.by_code.find(status.code());
  PyErr_SetString(it == errors.by_code.end() ? errors.other : it->second, status.message().c_str());
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

// Runs `fn` without the GIL, since the engine may block on I/O or on its own threads, and turns
// the Status or Result<T> it returns into nothing or the T, or into the Python exception.
template <typename Fn>
auto WithoutGil(Fn&& fn) {
  using R = std::invoke_result_t<Fn&>;
  std::optional<R> result;
  {
    py::gil_scoped_release release;
    result.emplace(fn());
  }
  if constexpr (std::is_same_v<R, Status>) {
    Check(*result);
  } else {
    return Unwrap(std::move(*result));
  }
}

DType ToDType(const std::string& name) { return Unwrap(ParseDType(name)); }

// SaveTensors or RestoreTargets from Python's tensor descriptors, each
// (name, dtype, global_shape, row_offset, rows, data_ptr).
template <typename Tensor>
std::vector<Tensor> FromDescriptors(const py::iterable& descriptors) {
  std::vector<Tensor> out;
  for (const py::handle item : descriptors) {
    auto d = py::reinterpret_borrow<py::sequence>(item);
    if (d.size() != 6) {
      Throw(InvalidArgument(
          "a tensor descriptor is (name, dtype, global_shape, row_offset, rows, data_ptr)"));
    }
    Tensor t;
    t.name = d[0].cast<std::string>();
    t.dtype = ToDType(d[1].cast<std::string>());
    t.global_shape = d[2].cast<std::vector<int64_t>>();
    t.row_offset = d[3].cast<int64_t>();
    t.rows = d[4].cast<int64_t>();
    t.data = reinterpret_cast<decltype(t.data)>(d[5].cast<uintptr_t>());
    out.push_back(std::move(t));
  }
  return out;
}

py::dict StatsDict(const SaveStats& s) {
  return py::dict("step"_a = s.step, "tensors"_a = s.tensors, "bytes_total"_a = s.bytes_total,
                  "chunks_total"_a = s.chunks_total, "chunks_written"_a = s.chunks_written,
                  "bytes_written"_a = s.bytes_written, "written_fraction"_a = s.written_fraction(),
                  "blocking_seconds"_a = s.blocking_seconds, "local_seconds"_a = s.local_seconds,
                  "durable_seconds"_a = s.durable_seconds,
                  "committed_seconds"_a = s.committed_seconds);
}

py::dict RestoreStatsDict(const RestoreStats& s) {
  return py::dict("bytes"_a = s.bytes, "chunks"_a = s.chunks, "from_local"_a = s.from_local,
                  "from_peers"_a = s.from_peers, "from_durable"_a = s.from_durable,
                  "corrupt"_a = s.corrupt, "seconds"_a = s.seconds);
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
    if (!engine_) Throw(FailedPrecondition("the checkpoint engine is closed"));
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
  using Field =
      std::variant<std::string*, std::vector<std::string>*, int*, int64_t*, uint64_t*, bool*>;
  // The S3 endpoint and credentials (endpoint to profile), left empty, fall back to the AWS
  // variables and files.
  const std::map<std::string, Field> fields = {{"local", &o.local_url},
                                               {"peers", &o.peers},
                                               {"job", &o.job},
                                               {"rank", &o.rank},
                                               {"world_size", &o.world_size},
                                               {"chunk_size", &o.chunk_size},
                                               {"host_buffer_bytes", &o.host_buffer_bytes},
                                               {"io_threads", &o.io_threads},
                                               {"keep_local", &o.keep_local},
                                               {"run_id", &o.run_id},
                                               {"local_fsync", &o.local_fsync},
                                               {"keep_last", &o.retention.keep_last},
                                               {"keep_every", &o.retention.keep_every},
                                               {"keep_tagged", &o.retention.keep_tagged},
                                               {"endpoint", &o.store_options.endpoint},
                                               {"region", &o.store_options.region},
                                               {"access_key", &o.store_options.access_key},
                                               {"secret_key", &o.store_options.secret_key},
                                               {"session_token", &o.store_options.session_token},
                                               {"profile", &o.store_options.profile},
                                               {"peer_timeout_ms", &o.peer_timeout_ms},
                                               {"commit_timeout_ms", &o.commit_timeout_ms},
                                               {"gc_grace_seconds", &o.gc_grace_seconds}};
  for (const auto& [key_handle, value] : kwargs) {
    const std::string key = key_handle.cast<std::string>();
    if (key == "codec") {
      o.durable_codec = Unwrap(ParseCodec(value.cast<std::string>()));
      continue;
    }
    if (key == "pack_below_bytes") {  // optional: unset means chunk_size / 16
      o.pack_below_bytes = value.cast<uint64_t>();
      continue;
    }
    auto it = fields.find(key);
    if (it == fields.end()) throw py::type_error("Engine: unknown option '" + key + "'");
    std::visit([&value](auto* field) { *field = value.cast<std::decay_t<decltype(*field)>>(); },
               it->second);
  }
  return o;
}

std::unique_ptr<PyEngine> OpenEngine(const std::string& root, const py::kwargs& kwargs) {
  EngineOptions options = OptionsFromKwargs(root, kwargs);
  return std::make_unique<PyEngine>(
      WithoutGil([&] { return CheckpointEngine::Open(std::move(options)); }));
}

std::shared_ptr<SaveHandle> Save(PyEngine& self, const py::iterable& tensors, int64_t step,
                                 const std::string& durability,
                                 const std::vector<std::string>& tags,
                                 const std::string& metadata_json,
                                 const std::string& structure_json) {
  const std::vector<SaveTensor> list = FromDescriptors<SaveTensor>(tensors);
  SaveOptions options;
  options.step = step;
  options.durability = Unwrap(ParseDurability(durability));
  options.tags = tags;
  options.metadata_json = metadata_json;
  options.structure_json = structure_json;
  CheckpointEngine& engine = self.engine();
  return WithoutGil([&] { return engine.Save(list, options); });
}

py::dict Restore(PyEngine& self, const CheckpointManifest& manifest, const py::iterable& targets,
                 const py::object& progress) {
  const std::vector<RestoreTarget> list = FromDescriptors<RestoreTarget>(targets);
  ProgressFn fn = ToProgress(progress);
  CheckpointEngine& engine = self.engine();
  RestoreStats stats;
  WithoutGil([&] { return engine.Restore(manifest, list, &stats, fn); });
  return RestoreStatsDict(stats);
}

py::dict InfoDict(const CheckpointInfo& info) {
  return py::dict("step"_a = info.step, "committed"_a = info.committed, "damaged"_a = info.damaged,
                  "problem"_a = info.problem, "parts"_a = info.parts,
                  "world_size"_a = info.world_size, "bytes"_a = info.bytes,
                  "created_unix"_a = info.created_unix, "tags"_a = info.tags);
}

py::list SlicesList(const TensorRecord& t) {
  py::list slices;
  for (const SliceRecord& s : t.slices) {
    slices.append(py::dict("rank"_a = s.rank, "row_offset"_a = s.row_offset, "rows"_a = s.rows,
                           "nbytes"_a = s.nbytes, "chunks"_a = s.chunks.size()));
  }
  return slices;
}

void DefineModule(py::module_& m) {
  m.doc() = "Gantry's checkpoint engine (use the `gantry` package, not this module directly)";

  DefineErrors(m);

  m.def(
      "dtype_size", [](const std::string& dtype) { return DTypeSize(ToDType(dtype)); },
      py::arg("dtype"), "Bytes of one element of a checkpoint dtype (\"float32\", ...)");
  m.attr("DEFAULT_CHUNK_SIZE") = kDefaultChunkSize;
  // The environment's checkpointer defaults, read by the same C++ as `gantry ckpt` reads them.
  m.def(
      "env_defaults",
      [] {
        const CkptEnvDefaults env = ReadCkptEnvDefaults();
        return py::dict("root"_a = env.root, "local"_a = env.local, "job"_a = env.job,
                        "peers"_a = env.peers);
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
          "wait", [](SaveHandle& h) { WithoutGil([&] { return h.Wait(); }); },
          "Blocks until the requested durability is reached; raises the save's error")
      .def(
          "wait_for",
          [](SaveHandle& h, const std::string& level) {
            const Durability d = Unwrap(ParseDurability(level));
            WithoutGil([&] { return h.WaitFor(d); });
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
      .def_property_readonly(
          "ranks",
          [](const CheckpointManifest& mf) {
            py::list out;
            for (const RankRecord& r : mf.ranks) {
              out.append(py::dict("rank"_a = r.rank, "bytes_total"_a = r.bytes_total,
                                  "bytes_written"_a = r.bytes_written,
                                  "chunks_total"_a = r.chunks_total,
                                  "chunks_written"_a = r.chunks_written));
            }
            return out;
          })
      .def_property_readonly("tensors",
                             [](const CheckpointManifest& mf) {
                               py::dict out;
                               for (const TensorRecord& t : mf.tensors) {
                                 out[py::str(t.name)] = py::dict("dtype"_a = DTypeName(t.dtype),
                                                                 "global_shape"_a = t.global_shape,
                                                                 "slices"_a = SlicesList(t));
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
           "job, rank, world_size, chunk_size, pack_below_bytes, host_buffer_bytes, io_threads, "
           "codec, "
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
            WithoutGil([&] { return engine.WaitAll(); });
          },
          "Waits for every save in flight; raises the first error")
      .def("list",
           [](PyEngine& e) {
             CheckpointEngine& engine = e.engine();
             py::list out;
             for (const CheckpointInfo& info : WithoutGil([&] { return engine.List(); })) {
               out.append(InfoDict(info));
             }
             return out;
           })
      .def("latest_step",
           [](PyEngine& e) {
             CheckpointEngine& engine = e.engine();
             std::vector<std::string> warnings;
             const int64_t step = WithoutGil([&] { return engine.LatestStep(&warnings); });
             // A damaged latest checkpoint was passed over: say so the Python way.
             for (const std::string& w : warnings) {
               if (PyErr_WarnEx(PyExc_RuntimeWarning, w.c_str(), 1) < 0) {
                 throw py::error_already_set();  // warnings turned into errors
               }
             }
             return step;
           })
      .def(
          "read_manifest",
          [](PyEngine& e, int64_t step) {
            CheckpointEngine& engine = e.engine();
            return WithoutGil([&] { return engine.ReadManifest(step); });
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
            WithoutGil([&] { return engine.Remove(step); });
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
            const CkptGcReport r = WithoutGil([&] { return engine.CollectGarbage(retention); });
            // warnings: damaged checkpoints left in place.
            return py::dict("removed_steps"_a = r.removed_steps,
                            "deleted_chunks"_a = r.deleted_chunks,
                            "deleted_bytes"_a = r.deleted_bytes, "kept_young"_a = r.kept_young,
                            "referenced_chunks"_a = r.referenced_chunks, "warnings"_a = r.warnings);
          },
          py::kw_only(), py::arg("keep_last") = py::none(), py::arg("keep_every") = py::none(),
          py::arg("keep_tagged") = py::none(),
          "Applies retention (the engine's, or these overrides) and deletes unreferenced chunks")
      .def(
          "verify",
          [](PyEngine& e, int64_t step, const py::object& progress) {
            CheckpointEngine& engine = e.engine();
            ProgressFn fn = ToProgress(progress);
            const VerifyCkptReport r = WithoutGil([&] { return engine.Verify(step, fn); });
            return py::dict("chunks"_a = r.chunks, "bytes"_a = r.bytes, "missing"_a = r.missing,
                            "corrupt"_a = r.corrupt, "errors"_a = r.errors);
          },
          py::arg("step"), py::arg("progress") = py::none());
}

}  // namespace

// For the other files of the module (data_binding.cc): the same exception classes.
void ThrowStatus(const Status& status) { Throw(status); }

}  // namespace gantry::ckpt

PYBIND11_MODULE(_gantry, m) {
  gantry::ckpt::DefineModule(m);
  gantry::python::DefineDataModule(m);
}
