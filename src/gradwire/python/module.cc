// gradwire._C: the Python module's C++ half (pybind11). The pure-Python half is
// python/gradwire/; this file only converts: Python objects to the torch layer's types,
// gradwire's C++ exceptions to gradwire's Python ones (gradwire.Error and its subclasses),
// and the torch layer's futures to torch.futures.Future. Every call that may wait
// (a collective, an exchange) releases the GIL.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "gradwire/comm/gloo_collectives.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/torch/ddp_comm_hook.h"
#include "gradwire/torch/diloco_model.h"
#include "gradwire/version.h"

namespace py = pybind11;

namespace gradwire::python {
namespace {

// gradwire's exception types in Python, made once at import (module-lifetime handles).
struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* config = nullptr;
  PyObject* payload = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* timeout = nullptr;
  PyObject* system = nullptr;
};
ErrorTypes errors;

// Sets the Python error for the C++ exception `e` (the GIL held).
void set_python_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const python_error& x) {
    python_error copy(x);
    copy.restore();
  } catch (const TimeoutError& x) {
    PyErr_SetString(errors.timeout, x.what());
  } catch (const MismatchError& x) {
    PyErr_SetString(errors.mismatch, x.what());
  } catch (const PayloadError& x) {
    PyErr_SetString(errors.payload, x.what());
  } catch (const ConfigError& x) {
    PyErr_SetString(errors.config, x.what());
  } catch (const SystemError& x) {
    PyErr_SetString(errors.system, x.what());
  } catch (const Error& x) {
    PyErr_SetString(errors.error, x.what());
  } catch (const std::exception& x) {
    PyErr_SetString(PyExc_RuntimeError, x.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

// The exception a future fails with, as one that keeps its Python type through DDP: DDP's
// backward() rethrows the future's exception, and PyTorch restores a python_error's type,
// where any other C++ exception becomes a RuntimeError. Takes the GIL.
std::exception_ptr as_python_error(std::exception_ptr e) {
  py::gil_scoped_acquire gil;
  set_python_error(std::move(e));
  python_error error;
  error.persist();
  return std::make_exception_ptr(std::move(error));
}

// A future of the torch layer (holding a tensor) as the torch.futures.Future a Python hook
// returns: DDP requires its value to be a Python object. The copy completes on the thread
// that completes `inner` (the exchange thread), which takes the GIL only to wrap the tensor.
py::object python_future(const c10::intrusive_ptr<c10::ivalue::Future>& inner) {
  auto outer = c10::make_intrusive<c10::ivalue::Future>(c10::PyObjectType::get());
  inner->addCallback([outer](c10::ivalue::Future& done) {
    if (done.hasError()) {
      outer->setError(as_python_error(done.exception_ptr()));
      return;
    }
    c10::IValue value;
    {
      py::gil_scoped_acquire gil;
      value = torch::jit::toIValue(py::cast(done.value().toTensor()), c10::PyObjectType::get());
    }
    outer->markCompleted(std::move(value));
  });
  return torch::jit::toPyObject(c10::IValue(outer));
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  if (!(seconds > 0)) throw ConfigError("timeout must be positive, got " + std::to_string(seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

size_t megabytes(double mb, const char* what) {
  if (!(mb > 0)) throw ConfigError(std::string(what) + " must be positive");
  return static_cast<size_t>(mb * 1024.0 * 1024.0);
}

// A Gloo group of gradwire's own for `rank` of `size` ranks, rendezvousing over `store`
// (the Python side gives every group a prefix of the job's store that the same group's ranks
// agree on). Its own: gradwire's timeout bounds its Gloo operations too, so a rank that
// raised gradwire.TimeoutError has nothing left running that keeps it from exiting; the
// program's groups see none of gradwire's traffic; its threads block SIGPIPE
// (comm/gloo_collectives.h). Destroyed without a barrier (Python collects it when it will).
std::unique_ptr<comm::Collectives> own_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                             int size, double timeout_s) {
  comm::GlooOptions options;
  options.timeout = seconds_to_ms(timeout_s);
  options.slow_after = std::min(options.slow_after, options.timeout / 4);
  options.leave_together = false;
  return comm::make_gloo_collectives(store, rank, size, options);
}

// The link a cost model predicts with, from the Python arguments of the hook and DiLoCo.
comm::LinkModel checked_link(double link_bits_per_s, double link_latency_s) {
  if (!(link_bits_per_s > 0) || !std::isfinite(link_bits_per_s)) {
    throw ConfigError("link_bits_per_s must be positive");
  }
  if (!(link_latency_s >= 0) || !std::isfinite(link_latency_s)) {
    throw ConfigError("link_latency_s must be zero or positive");
  }
  return comm::LinkModel::from_bandwidth(link_latency_s, link_bits_per_s);
}

CommHookOptions hook_options(const std::string& codec, const std::string& sparse_aggregation,
                             const std::string& quantized_path, double bucket_cap_mb,
                             double first_bucket_mb, bool overlap, double link_bits_per_s,
                             double link_latency_s) {
  CommHookOptions options;
  options.codec = codec;
  options.sparse_aggregation = sparse_aggregation;
  options.quantized_path = quantized_path;
  options.bucket_bytes = megabytes(bucket_cap_mb, "bucket_cap_mb");
  options.first_bucket_bytes = megabytes(first_bucket_mb, "first_bucket_mb");
  options.overlap = overlap;
  options.link = checked_link(link_bits_per_s, link_latency_s);
  return options;
}

py::dict traffic_dict(const strategy::TrafficStats& t) {
  py::dict d;
  d["steps"] = t.steps;
  d["bytes_contributed"] = t.bytes_contributed;
  d["bytes_on_wire"] = t.bytes_on_wire;
  d["bytes_dense"] = t.bytes_dense;
  d["bytes_dense_on_wire"] = t.bytes_dense_on_wire;
  return d;
}

// A span name from Python, kept for the process's lifetime (Timeline keeps the pointer).
const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> names;
  std::lock_guard lock(mutex);
  return names.insert(text).first->c_str();
}

// Python's time.monotonic_ns() as the timeline's clock: both read CLOCK_MONOTONIC
// (libstdc++'s steady_clock counts from its zero).
Timeline::Clock::time_point monotonic_ns(int64_t ns) {
  return Timeline::Clock::time_point(
      std::chrono::duration_cast<Timeline::Clock::duration>(std::chrono::nanoseconds(ns)));
}

py::bytes to_py_bytes(const Bytes& bytes) {
  return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Bytes from_py_bytes(const py::bytes& bytes) {
  const std::string text = bytes;
  return Bytes(text.begin(), text.end());
}

}  // namespace
}  // namespace gradwire::python

PYBIND11_MODULE(_C, m) {
  using namespace gradwire;
  using namespace gradwire::python;
  m.doc() = "gradwire's C++ half; use the gradwire package, not this module";
  m.attr("__version__") = kVersion;

  // Exceptions: gradwire.Error is a RuntimeError; the others refine it. Each C++ exception
  // of gradwire's hierarchy arrives as its Python namesake.
  auto make = [&](const char* name, PyObject* base, const char* doc) {
    PyObject* type =
        PyErr_NewExceptionWithDoc((std::string("gradwire.") + name).c_str(), doc, base, nullptr);
    if (type == nullptr) throw py::error_already_set();
    m.attr(name) = py::handle(type);
    return type;
  };
  errors.error = make("Error", PyExc_RuntimeError, "Any failure gradwire reports.");
  errors.config = make("ConfigError", errors.error,
                       "A bad option, an unknown codec, an unsupported model or setting.");
  errors.payload = make("PayloadError", errors.error,
                        "Bytes that are not what they should be: another codec's payload, a "
                        "truncated or foreign state.");
  errors.mismatch = make("MismatchError", errors.error,
                         "Ranks that disagree: options, codecs or shapes differ across ranks.");
  errors.timeout = make("TimeoutError", errors.error,
                        "A peer did not answer in time (it died, hangs or is out of step).");
  errors.system = make("SystemError", errors.error, "An operating-system call failed.");
  py::register_exception_translator([](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const Error&) {
      set_python_error(e);
    }
  });

  m.def("codec_names", &compress::codec_names, "The codecs gradwire knows, by name.");
  m.def(
      "canonical_codec", [](const std::string& codec) { return strategy::canonical_codec(codec); },
      "A codec spec, layer policy or adaptive codec with every option spelled out.");
  m.def("codec_for_per_coordinate_optimizer", &strategy::codec_for_per_coordinate_optimizer,
        "The codec for a job whose optimizer scales each coordinate (Adam): plain auto's "
        "PowerSGD plan at rank 16; any other codec as given.");

  // The process-wide timeline (core/timeline.h), for python/gradwire/timeline.py.
  m.def("timeline_enable", [](int rank) { Timeline::global().enable(rank); });
  m.def("timeline_enabled", [] { return Timeline::global().enabled(); });
  m.def("timeline_set_origin", [](int64_t ns) { Timeline::global().set_origin(monotonic_ns(ns)); });
  m.def("timeline_name_thread",
        [](const std::string& name) { Timeline::global().name_thread(name); });
  m.def("timeline_record",
        [](const std::string& name, const std::string& category, int64_t start_ns, int64_t end_ns) {
          Timeline::global().record(interned(name), interned(category), monotonic_ns(start_ns),
                                    monotonic_ns(end_ns));
        });
  m.def("timeline_events_json", [] { return Timeline::global().events_json(); });
  m.def("timeline_trace_json", &Timeline::trace_json);

  m.def(
      "check_hook_options",
      [](const std::string& codec, const std::string& sparse_aggregation,
         const std::string& quantized_path, double bucket_cap_mb, double first_bucket_mb,
         bool overlap, double link_bits_per_s, double link_latency_s) {
        DdpCommHook::check_options(hook_options(codec, sparse_aggregation, quantized_path,
                                                bucket_cap_mb, first_bucket_mb, overlap,
                                                link_bits_per_s, link_latency_s));
      },
      "ConfigError for a hook's bad codec or option, on this rank alone.");
  m.def(
      "hook_state_rank",
      [](const py::bytes& state) { return DdpCommHook::saved_rank(from_py_bytes(state)); },
      "(rank, world size) a DDP hook state was saved on; PayloadError for other bytes.");

  m.def(
      "failed_future",
      [](const py::object& exception) {
        // A hook's future that fails with `exception` as it is: a Python future's exception
        // would reach backward()'s caller as a RuntimeError about casting (DDP reads a failed
        // Python future's value).
        auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
        python_error error;
        error.persist();
        future->setError(std::make_exception_ptr(std::move(error)));
        return python_future(future);
      },
      "A hook's future failed with the given exception, which backward() then raises.");

  py::class_<DdpCommHook, std::shared_ptr<DdpCommHook>>(m, "DdpCommHook")
      .def(py::init([](const std::string& codec, const std::string& sparse_aggregation,
                       const std::string& quantized_path, double bucket_cap_mb,
                       double first_bucket_mb, bool overlap, double link_bits_per_s,
                       double link_latency_s, const c10::intrusive_ptr<c10d::Store>& store,
                       int rank, int size, double timeout_s) {
             return std::make_shared<DdpCommHook>(
                 own_group(store, rank, size, timeout_s),
                 hook_options(codec, sparse_aggregation, quantized_path, bucket_cap_mb,
                              first_bucket_mb, overlap, link_bits_per_s, link_latency_s));
           }),
           py::arg("codec"), py::arg("sparse_aggregation"), py::arg("quantized_path"),
           py::arg("bucket_cap_mb"), py::arg("first_bucket_mb"), py::arg("overlap"),
           py::arg("link_bits_per_s"), py::arg("link_latency_s"), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>())
      .def(
          "exchange",
          [](DdpCommHook& hook, const at::Tensor& buffer, const std::vector<int64_t>& keys,
             const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::string>& names,
             bool is_last) {
            c10::intrusive_ptr<c10::ivalue::Future> future;
            try {
              py::gil_scoped_release release;
              future = hook.exchange(buffer, keys, shapes, names, is_last);
            } catch (...) {
              // Raised here, DDP would turn it into a RuntimeError; in the future, it
              // reaches backward()'s caller as the gradwire error it is.
              future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
              future->setError(std::current_exception());
            }
            return python_future(future);
          },
          py::arg("buffer"), py::arg("keys"), py::arg("shapes"), py::arg("names"),
          py::arg("is_last"))
      .def("watch_gradients", &DdpCommHook::watch_gradients, py::arg("keys"), py::arg("params"))
      .def("zero_grad", &DdpCommHook::zero_grad, py::call_guard<py::gil_scoped_release>())
      .def("count_step", &DdpCommHook::count_step)
      .def("count_loop", &DdpCommHook::count_loop)
      .def("refuse_next_step", &DdpCommHook::refuse_next_step)
      .def_property_readonly("codec", &DdpCommHook::codec)
      .def_property_readonly("rank", &DdpCommHook::rank)
      .def_property_readonly("world_size", &DdpCommHook::world_size)
      .def("traffic", [](const DdpCommHook& hook) { return traffic_dict(hook.traffic()); })
      .def("take_decisions", &DdpCommHook::take_decisions)
      .def("set_learning_rate", &DdpCommHook::set_learning_rate)
      .def("bucket_layout", &DdpCommHook::bucket_layout)
      .def("save_state", [](const DdpCommHook& hook) { return to_py_bytes(hook.save_state()); })
      .def("load_state", [](DdpCommHook& hook, const py::bytes& state) {
        hook.load_state(from_py_bytes(state));
      });

  // gradwire.DiLoCo's defaults: `gradwire train`'s (diloco_options.h), one definition.
  {
    const gradwire::DiLoCoOptions d;
    py::dict defaults;
    defaults["inner_steps"] =
        d.inner_steps == 0 ? py::object(py::str("auto")) : py::object(py::int_(d.inner_steps));
    defaults["fragments"] = d.fragments;
    defaults["delay"] = d.delay;
    defaults["outer_lr"] = d.outer_lr;
    defaults["outer_momentum"] = d.outer_momentum;
    defaults["nesterov"] = d.nesterov;
    defaults["outer_warmup"] = d.outer_warmup;
    defaults["codec"] = strategy::codec_or_default("", "diloco");
    m.attr("DILOCO_DEFAULTS") = defaults;
  }

  py::class_<DiLoCoModel, std::shared_ptr<DiLoCoModel>>(m, "DiLoCoModel")
      .def(py::init([](const std::string& codec, uint64_t inner_steps, int fragments,
                       uint64_t delay, double outer_lr, double outer_momentum, bool nesterov,
                       uint64_t outer_warmup, double link_bits_per_s, double link_latency_s,
                       const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       double timeout_s, std::vector<std::string> names,
                       const std::vector<at::Tensor>& params,
                       const std::vector<at::Tensor>& buffers) {
             strategy::diloco::DiLoCoOptions o;
             o.codec = codec;
             o.inner_steps = inner_steps;
             o.fragments = fragments;
             o.delay = delay;
             o.outer_lr = outer_lr;
             o.outer_momentum = outer_momentum;
             o.nesterov = nesterov;
             o.outer_warmup = outer_warmup;
             o.link = checked_link(link_bits_per_s, link_latency_s);
             return std::make_shared<DiLoCoModel>(own_group(store, rank, size, timeout_s),
                                                  std::move(o), std::move(names), params, buffers);
           }),
           py::call_guard<py::gil_scoped_release>())
      .def("after_step", &DiLoCoModel::after_step, py::call_guard<py::gil_scoped_release>())
      .def("finish", &DiLoCoModel::finish, py::call_guard<py::gil_scoped_release>())
      .def("global_parameters", &DiLoCoModel::global_parameters,
           py::call_guard<py::gil_scoped_release>())
      .def("agreed_buffers", &DiLoCoModel::agreed_buffers)
      .def("set_agreed_buffers", &DiLoCoModel::set_agreed_buffers)
      .def("wait_for_exchange", &DiLoCoModel::wait_for_exchange,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("just_synchronized", &DiLoCoModel::just_synchronized)
      .def_property_readonly("rank", &DiLoCoModel::rank)
      .def_property_readonly("world_size", &DiLoCoModel::world_size)
      .def("take_decisions", &DiLoCoModel::take_decisions)
      .def("traffic", [](const DiLoCoModel& d) { return traffic_dict(d.traffic()); })
      .def("stats",
           [](const DiLoCoModel& d) {
             const auto s = d.stats();
             py::dict out;
             out["inner_steps"] = s.inner_steps;
             out["delay"] = s.delay;
             out["fragments"] = s.fragments;
             out["steps"] = s.steps;
             out["exchanges"] = s.exchanges;
             out["outer_steps"] = s.rounds;
             out["bytes_on_wire"] = s.bytes_on_wire;
             out["last_sync_step"] = s.last_sync_step;
             return out;
           })
      .def("save_state",
           [](const DiLoCoModel& d) {
             Bytes bytes;
             {
               py::gil_scoped_release release;
               bytes = d.save_state();
             }
             return to_py_bytes(bytes);
           })
      .def("load_state", [](DiLoCoModel& d, const py::bytes& state) {
        const Bytes bytes = from_py_bytes(state);
        py::gil_scoped_release release;  // it waits for the exchange in flight
        d.load_state(bytes);
      });
}
