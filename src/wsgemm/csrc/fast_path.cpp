// wsgemm's host fast path: the per-call steps of a cached wsgemm.gemm call that
// cost microseconds in Python and a fraction of one here (built and loaded by
// wsgemm/fast_path.py; without a compiler wsgemm runs the same steps in Python).
//
// 1. Finding a call's plan. The Python key (shapes, strides, dtypes, devices and
//    base-address alignment of both operands, as a tuple) costs ~0.9 us to build
//    and hash on the development CPU; the same key as 15 integers costs ~0.15 us.
//    Only calls without out=, out_dtype= or config= use it (call()): every other
//    call goes down the Python path, which validates and plans. read_before_wait=
//    is the key's last word: the promise changes the kernel (which operand loads
//    before the dependent launch's wait), so a promised call has its own plan.
// 2. Launching it. A direct plan's result is allocated with at::empty and its
//    TVM-FFI kernel called by vectorcall: no Python frame, no argument parsing. A
//    swapped plan's (decode shapes) likewise, with transposed views made here. A
//    split-K or stream-K plan's workspace comes from one Python call to the plan's
//    workspace source (wsgemm.workspace keys it by stream and capture).
// 3. Recording the product for autograd. torch.autograd.Function's apply builds a
//    Python context object and a PyNode around the forward (~4 us on the
//    development CPU); a C++ Node that saves the two operands costs ~0.8 us, and
//    calls Python only in backward, where the gradients are wsgemm products.
// 4. The operator's kernel. torch.ops.wsgemm.gemm (what torch.compile's graphs
//    call) reaches its backend kernel through the dispatcher; a Python kernel there
//    costs a boxed call into Python (~2 us on the development CPU) before the plan
//    lookup, and a Python autograd kernel another (~5 us), also under no_grad.
//    Registered here instead, a cached direct or swapped plan runs as in 1-2 (its
//    workspace asked for as the operator's; another cached plan runs its Python run,
//    as the operator's: see wsgemm.workspace), the autograd
//    kernel records a node as in 3, and a call the cache does not serve goes to
//    wsgemm.ops' Python kernel, which plans it.

#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
namespace ag = torch::autograd;

namespace {

// Tensors inside vmap/grad transforms are functorch wrappers: their sizes and
// strides are not the storage's. They take the Python path, as they always did.
const c10::DispatchKeySet kFunctorchKeys{c10::DispatchKey::FuncTorchBatched,
                                         c10::DispatchKey::FuncTorchGradWrapper};

// The plan cache's key: per operand, one word of (dims, dtype, device, alignment)
// and up to three sizes and three strides (wsgemm multiplies 2-D and 3-D operands);
// then the operand that read_before_wait names.
constexpr int kWordsPerOperand = 7;
constexpr int kKeyWords = 2 * kWordsPerOperand + 1;
using PlanKey = std::array<int64_t, kKeyWords>;

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const noexcept {
    uint64_t h = 14695981039346656037ull;  // FNV-1a over the words
    for (int64_t word : key) {
      h = (h ^ static_cast<uint64_t>(word)) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// What a call signature resolves to. Every plan has its Python run(a, b, out). A
// "direct" plan (the commonest) or a "swapped" one is also launched from here: the
// result allocated with at::empty, then kernel(a, b, out, clusters), or with a
// workspace kernel(a, b, out, flags, partials, clusters), which saves the Python
// frame of run() and new_empty's argument parsing.
struct RememberedPlan {
  py::object run;
  py::object kernel;    // None unless launched from here
  py::object clusters;  // the kernel's last argument (a Python int)
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  // Swapped operands (decode shapes): the kernel computes D^T = B^T A^T, called with
  // transposed views of b, a and the result (three Python .t() calls cost ~2.6 us on
  // the H200's host, docs/tuning-log/host-overhead.md).
  bool swapped = false;
  // Split-K and stream-K plans: workspace(through_operator) -> (flags, partials), for
  // the current stream (wsgemm.workspace.split_k_workspace); None otherwise.
  py::object workspace;
};

// Never destroyed: its values hold Python objects, which must not be released after
// the interpreter has finalized (a static map's destructor would run then).
auto* g_plans = new std::unordered_map<PlanKey, RememberedPlan, PlanKeyHash>();

// A Python call's result; a Python exception (NULL) propagates as itself.
PyObject* check_call(PyObject* result) {
  if (result == nullptr) {
    throw py::error_already_set();
  }
  return result;
}

// torch.nn.Parameter, set at import: parameters are plain tensors to wsgemm. Other
// subclasses may override __torch_function__, so they take the Python path.
PyTypeObject* g_parameter_type = nullptr;

// A torch.Tensor or torch.nn.Parameter, not a subclass, not a functorch wrapper.
bool plain_tensor(PyObject* object) {
  if (!THPVariable_CheckExact(object) && Py_TYPE(object) != g_parameter_type) {
    return false;
  }
  return !THPVariable_Unpack(object).key_set().has_any(kFunctorchKeys);
}

// A plain, strided, 2-D or 3-D tensor as its key words. False: not cacheable; the
// Python path decides what to do with it.
bool describe(PyObject* object, int64_t* words) {
  if (!plain_tensor(object)) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(object);
  if (!t.defined() || t.layout() != c10::kStrided) {
    return false;
  }
  const int64_t dims = t.dim();
  if (dims < 2 || dims > 3) {
    return false;
  }
  // TMA needs 16-byte aligned base addresses, so the plan depends on the low bits.
  const int64_t alignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15);
  words[0] = dims | static_cast<int64_t>(t.scalar_type()) << 8 |
             static_cast<int64_t>(t.device().type()) << 16 |
             static_cast<int64_t>(t.device().index() + 1) << 32 | alignment << 48;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int64_t i = 0; i < 3; ++i) {
    words[1 + i] = i < dims ? sizes[i] : -1;
    words[4 + i] = i < dims ? strides[i] : -1;
  }
  return true;
}

// read_before_wait as a key word: 0 for "", 1 for "a", 2 for "b"; -1 for anything
// else, which is not cacheable (the Python path raises its error).
int64_t early_operand_word(py::handle read_before_wait) {
  PyObject* text = read_before_wait.ptr();
  if (!PyUnicode_Check(text) || PyUnicode_GET_LENGTH(text) > 1) {
    return -1;
  }
  if (PyUnicode_GET_LENGTH(text) == 0) {
    return 0;
  }
  const Py_UCS4 operand = PyUnicode_READ_CHAR(text, 0);
  return operand == 'a' ? 1 : operand == 'b' ? 2 : -1;
}

bool plan_key(py::handle a, py::handle b, py::handle read_before_wait, PlanKey& key) {
  key[kKeyWords - 1] = early_operand_word(read_before_wait);
  return key[kKeyWords - 1] >= 0 && describe(a.ptr(), key.data()) &&
         describe(b.ptr(), key.data() + kWordsPerOperand);
}

const RememberedPlan* remembered(py::handle a, py::handle b, py::handle read_before_wait) {
  PlanKey key;
  if (!plan_key(a, b, read_before_wait, key)) {
    return nullptr;
  }
  const auto found = g_plans->find(key);
  return found == g_plans->end() ? nullptr : &found->second;
}

py::object find(py::handle a, py::handle b, py::handle read_before_wait) {
  const RememberedPlan* plan = remembered(a, b, read_before_wait);
  return plan == nullptr ? py::none() : plan->run;
}

// run: the plan's run(a, b, out). For a plan launched from here also kernel,
// clusters, and the result's shape and dtype (its device is a's: the key holds a's
// device); swapped: the kernel takes (b^T, a^T, result^T); workspace: the plan's
// workspace source, or None.
bool remember(py::handle a, py::handle b, py::object run, py::object kernel, py::object clusters,
              std::vector<int64_t> shape, py::handle dtype, py::handle read_before_wait, bool swapped,
              py::object workspace) {
  PlanKey key;
  if (!plan_key(a, b, read_before_wait, key)) {
    return false;
  }
  RememberedPlan plan{std::move(run), std::move(kernel), std::move(clusters), std::move(shape)};
  plan.swapped = swapped;
  plan.workspace = std::move(workspace);
  if (!plan.kernel.is_none()) {
    TORCH_CHECK(THPDtype_Check(dtype.ptr()), "wsgemm fast path: a plan launched here needs the result's dtype");
    plan.dtype = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  }
  (*g_plans)[key] = std::move(plan);
  return true;
}

// The plan's result for (a, b): launched here if it has a kernel, else by its Python run.
// The callables are held by reference for the call: another thread may forget() the
// plan while this one is inside Python (the map entry is then gone, not its objects).
// through_operator: a call of the operator, whose workspace must be its own where
// the call is captured (wsgemm.workspace).
py::object run_plan(const RememberedPlan& plan, py::handle a, py::handle b, bool through_operator) {
  if (plan.kernel.is_none()) {
    const py::object run = plan.run;
    PyObject* args[] = {a.ptr(), b.ptr(), Py_None};
    return py::reinterpret_steal<py::object>(check_call(PyObject_Vectorcall(run.ptr(), args, 3, nullptr)));
  }
  const py::object kernel = plan.kernel;
  const py::object clusters = plan.clusters;
  const py::object workspace_source = plan.workspace;
  const at::Tensor& tensor_a = THPVariable_Unpack(a.ptr());
  const at::Tensor result = at::empty(plan.shape, tensor_a.options().dtype(plan.dtype));
  auto out = py::reinterpret_steal<py::object>(THPVariable_Wrap(result));
  // The kernel's operands: (a, b, out) as they are, or (b^T, a^T, out^T) for a swap.
  py::object x = py::reinterpret_borrow<py::object>(a);
  py::object y = py::reinterpret_borrow<py::object>(b);
  py::object d = out;
  if (plan.swapped) {
    x = py::reinterpret_steal<py::object>(THPVariable_Wrap(THPVariable_Unpack(b.ptr()).t()));
    y = py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor_a.t()));
    d = py::reinterpret_steal<py::object>(THPVariable_Wrap(result.t()));
  }
  if (workspace_source.is_none()) {
    PyObject* args[] = {x.ptr(), y.ptr(), d.ptr(), clusters.ptr()};
    py::reinterpret_steal<py::object>(check_call(PyObject_Vectorcall(kernel.ptr(), args, 4, nullptr)));
    return out;
  }
  PyObject* request[] = {through_operator ? Py_True : Py_False};
  const auto workspace = py::reinterpret_steal<py::object>(
      check_call(PyObject_Vectorcall(workspace_source.ptr(), request, 1, nullptr)));
  TORCH_CHECK(PyTuple_Check(workspace.ptr()) && PyTuple_GET_SIZE(workspace.ptr()) == 2,
              "wsgemm fast path: a workspace source returns (flags, partials)");
  PyObject* args[] = {x.ptr(), y.ptr(), d.ptr(), PyTuple_GET_ITEM(workspace.ptr(), 0),
                      PyTuple_GET_ITEM(workspace.ptr(), 1), clusters.ptr()};
  py::reinterpret_steal<py::object>(check_call(PyObject_Vectorcall(kernel.ptr(), args, 6, nullptr)));
  return out;
}

void forget() { g_plans->clear(); }

size_t plans_remembered() { return g_plans->size(); }

// ---------------------------------------------------------------------------------
// Autograd
// ---------------------------------------------------------------------------------

// wsgemm.ops' backward(grad, a, b, needs_a, needs_b) -> (dA | None, dB | None): of
// eager calls (g_backward, products through wsgemm.gemm) and of the operator
// (g_operator_backward, products through the operator, so that torch.compile traces
// them). Set once at load and never released, so no node holds a Python reference:
// nodes are freed by autograd's threads, which do not hold the GIL.
PyObject* g_backward = nullptr;
PyObject* g_operator_backward = nullptr;

struct WsgemmGemmBackward : public ag::Node {
  ag::SavedVariable a, b;
  PyObject* backward = nullptr;  // g_backward or g_operator_backward

  ag::variable_list apply(ag::variable_list&& grads) override {
    // unpack() raises autograd's own errors: the graph was already freed, or an
    // operand was modified in place after the product.
    const at::Tensor saved_a = a.unpack();
    const at::Tensor saved_b = b.unpack();
    const bool needs_a = task_should_compute_output(0);
    const bool needs_b = task_should_compute_output(1);
    if (!grads[0].defined() || !(needs_a || needs_b)) {
      return {at::Tensor(), at::Tensor()};
    }
    py::gil_scoped_acquire gil;
    const auto formula = py::reinterpret_borrow<py::object>(backward);
    const auto result = formula(grads[0], saved_a, saved_b, needs_a, needs_b)
                            .cast<std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>>>();
    return {std::get<0>(result).value_or(at::Tensor()), std::get<1>(result).value_or(at::Tensor())};
  }

  void release_variables() override {
    a.reset_data();
    b.reset_data();
  }

  std::string name() const override { return "WsgemmGemmBackward"; }
};

// Nodes are std::shared_ptr in older PyTorch releases and c10::intrusive_ptr in newer.
template <typename NodeType>
auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, ag::Node>) {
    return c10::make_intrusive<NodeType>();
  } else {
    return std::make_shared<NodeType>();
  }
}

void set_backward(py::object backward) {
  Py_XDECREF(g_backward);
  g_backward = backward.release().ptr();
}

// As torch._C._are_functorch_transforms_active(): inside vmap, grad and the like,
// products go through torch.autograd.Function, which functorch knows how to handle.
bool functorch_transforms_active() {
  const c10::DispatchKeySet included = c10::impl::tls_local_dispatch_key_set().included_;
  return included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
         included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
}

bool autograd_records(py::handle a, py::handle b) {
  return (THPVariable_Unpack(a.ptr()).requires_grad() || THPVariable_Unpack(b.ptr()).requires_grad()) &&
         at::GradMode::is_enabled();
}

// out = a @ b, computed without autograd, recorded as one node whose inputs are a
// and b and whose gradients come from backward.
void record_node(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, PyObject* backward) {
  TORCH_CHECK(backward != nullptr, "wsgemm fast path: the backward formula was not set");
  TORCH_CHECK(!out.requires_grad(), "wsgemm fast path: the product is already in a graph");
  auto node = make_node<WsgemmGemmBackward>();
  node->set_next_edges(ag::collect_next_edges(a, b));
  node->a = ag::SavedVariable(a, /*is_output=*/false);
  node->b = ag::SavedVariable(b, /*is_output=*/false);
  node->backward = backward;
  ag::set_history(out, node);
}

// product() with autograd off (it allocates and launches; nothing in it is
// differentiated), its result then recorded with the eager backward.
template <typename Product>
py::object record(Product&& product, py::handle a, py::handle b) {
  py::object result;
  {
    at::AutoGradMode no_grad(false);
    result = product();
  }
  TORCH_CHECK(THPVariable_Check(result.ptr()), "wsgemm fast path: the product is not a tensor");
  record_node(THPVariable_Unpack(result.ptr()), THPVariable_Unpack(a.ptr()), THPVariable_Unpack(b.ptr()),
              g_backward);
  return result;
}

// A cached call of wsgemm.gemm(a, b, read_before_wait=...): the remembered plan
// runs, and is recorded for autograd if an operand requires grad. None where the
// Python path must decide: no plan remembered (or not cacheable), functorch
// transforms are active, or a promise of unwritten weights where autograd records
// (the Python path refuses it: an optimizer step writes them).
py::object call(py::handle a, py::handle b, py::handle read_before_wait) {
  const RememberedPlan* plan = remembered(a, b, read_before_wait);
  if (plan == nullptr) {
    return py::none();
  }
  if (!autograd_records(a, b)) {
    return run_plan(*plan, a, b, false);
  }
  if (functorch_transforms_active() || early_operand_word(read_before_wait) != 0) {
    return py::none();
  }
  return record([&] { return run_plan(*plan, a, b, false); }, a, b);
}

// A cached call of wsgemm.gemm(a, weight.t(), ...), as wsgemm.nn.Linear makes it
// with its (out_features, in_features) weight. The transposed view made here costs
// a fraction of Python's weight.t() (~1.5 us on the development CPU;
// docs/tuning-log/host-overhead.md); it is an ordinary view, recorded by autograd like Python's. None as for
// call(), and for a weight that is not a plain tensor (a subclass may define t()).
py::object call_transposed(py::handle a, py::handle weight, py::handle read_before_wait) {
  if (!plain_tensor(weight.ptr()) || THPVariable_Unpack(weight.ptr()).dim() != 2) {
    return py::none();
  }
  const auto b = py::reinterpret_steal<py::object>(THPVariable_Wrap(THPVariable_Unpack(weight.ptr()).t()));
  return call(a, b, read_before_wait);
}

// forward(a, b, out_dtype) recorded for autograd (a call without a remembered plan,
// or with out_dtype). None where an operand is not a plain tensor (a functorch
// wrapper, a subclass) or functorch transforms are active: the caller uses
// torch.autograd.Function, as before.
py::object record_product(py::handle forward, py::handle a, py::handle b, py::handle out_dtype) {
  if (!plain_tensor(a.ptr()) || !plain_tensor(b.ptr()) || functorch_transforms_active()) {
    return py::none();
  }
  return record([&] { return py::reinterpret_borrow<py::object>(forward)(a, b, out_dtype); }, a, b);
}

// ---------------------------------------------------------------------------------
// The operator's kernel
// ---------------------------------------------------------------------------------

// wsgemm.ops' Python kernel(a, b, out_dtype, read_before_wait), which plans and runs
// a call the cache does not serve, and its run_plan(run, a, b), which runs a cached
// plan that is neither direct nor swapped as the operator's (a split-K workspace of
// its own where it is captured). Never released, like g_backward.
PyObject* g_operator_fallback = nullptr;
PyObject* g_operator_run = nullptr;

using OperatorSignature = at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<at::ScalarType>,
                                     c10::string_view);

// The operator the kernels below serve (set by register_operator; never destroyed).
c10::TypedOperatorHandle<OperatorSignature>* g_operator = nullptr;

// The autograd kernel: the product below autograd, then, where an operand requires
// grad and grad mode is on, one WsgemmGemmBackward node whose gradients are products
// through the operator (torch.compile's AOTAutograd traces them). A Python autograd
// kernel (torch.library.register_autograd) enters Python on every call, also under
// torch.no_grad(); this one only in backward.
at::Tensor operator_autograd(const at::Tensor& a, const at::Tensor& b, std::optional<at::ScalarType> out_dtype,
                             c10::string_view read_before_wait) {
  const bool records = at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = g_operator->call(a, b, out_dtype, read_before_wait);
  }
  if (records) {
    record_node(out, a, b, g_operator_backward);
  }
  return out;
}

at::Tensor operator_kernel(const at::Tensor& a, const at::Tensor& b, std::optional<at::ScalarType> out_dtype,
                           c10::string_view read_before_wait) {
  // The dispatcher runs kernels without the GIL; the plans and kernels are Python objects.
  py::gil_scoped_acquire gil;
  const auto object_a = py::reinterpret_steal<py::object>(THPVariable_Wrap(a));
  const auto object_b = py::reinterpret_steal<py::object>(THPVariable_Wrap(b));
  const py::str promise(read_before_wait.data(), read_before_wait.size());
  py::object result;
  const RememberedPlan* plan = out_dtype.has_value() ? nullptr : remembered(object_a, object_b, promise);
  if (plan != nullptr && !plan->kernel.is_none()) {
    result = run_plan(*plan, object_a, object_b, true);
  } else if (plan != nullptr) {
    // Other plans (operands copied or reshaped) may split K too: run as the operator's.
    const py::object run = plan->run;
    result = py::reinterpret_borrow<py::object>(g_operator_run)(run, object_a, object_b);
  } else {
    const py::object dtype = out_dtype.has_value()
                                 ? py::reinterpret_borrow<py::object>(
                                       reinterpret_cast<PyObject*>(torch::getTHPDtype(*out_dtype)))
                                 : py::none();
    result = py::reinterpret_borrow<py::object>(g_operator_fallback)(object_a, object_b, dtype, promise);
  }
  TORCH_CHECK(THPVariable_Check(result.ptr()), "wsgemm fast path: the operator's product is not a tensor");
  return THPVariable_Unpack(result.ptr());
}

// Register namespace::gemm's kernels (its schema defined by wsgemm.ops):
// operator_kernel for every backend, with fallback(a, b, out_dtype, read_before_wait)
// for the calls the cache does not serve and run_plan(run, a, b) for cached plans that
// are neither direct nor swapped, and operator_autograd, whose node computes gradients with
// backward(grad, a, b, needs_a, needs_b). Once per process: the package's namespace
// is fixed, and the dispatcher refuses a second kernel for a key.
void register_operator(const std::string& op_namespace, py::object fallback, py::object run_plan,
                       py::object backward) {
  TORCH_CHECK(g_operator == nullptr, "wsgemm fast path: the operator's kernels are registered already");
  g_operator = new c10::TypedOperatorHandle<OperatorSignature>(
      c10::Dispatcher::singleton().findSchemaOrThrow((op_namespace + "::gemm").c_str(), "")
          .typed<OperatorSignature>());
  g_operator_fallback = fallback.release().ptr();
  g_operator_run = run_plan.release().ptr();
  g_operator_backward = backward.release().ptr();
  // The registrations are never destroyed: dropping one would unregister its kernel
  // while compiled graphs may still call the operator.
  (new torch::Library(torch::Library::IMPL, op_namespace, c10::DispatchKey::CompositeExplicitAutograd, __FILE__,
                      __LINE__))
      ->impl("gemm", TORCH_FN(operator_kernel));
  (new torch::Library(torch::Library::IMPL, op_namespace, c10::DispatchKey::Autograd, __FILE__, __LINE__))
      ->impl("gemm", TORCH_FN(operator_autograd));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "wsgemm's host fast path (see wsgemm/fast_path.py)";
  py::object parameter = py::module_::import("torch.nn").attr("Parameter");
  g_parameter_type = reinterpret_cast<PyTypeObject*>(parameter.release().ptr());  // kept for good
  m.def("call", &call, "A cached call: the remembered plan's result (recorded for autograd), or None",
        py::arg("a"), py::arg("b"), py::arg("read_before_wait") = py::str(""));
  m.def("call_transposed", &call_transposed, "call(a, weight.t(), read_before_wait), the view made here",
        py::arg("a"), py::arg("weight"), py::arg("read_before_wait") = py::str(""));
  m.def("find", &find, "The run function remembered for this call signature, or None", py::arg("a"),
        py::arg("b"), py::arg("read_before_wait") = py::str(""));
  m.def("remember", &remember, "Remember a plan for this call signature; False if it cannot be cached",
        py::arg("a"), py::arg("b"), py::arg("run"), py::arg("kernel") = py::none(), py::arg("clusters") = py::none(),
        py::arg("shape") = std::vector<int64_t>(), py::arg("dtype") = py::none(),
        py::arg("read_before_wait") = py::str(""), py::arg("swapped") = false, py::arg("workspace") = py::none());
  m.def("forget", &forget, "Forget every remembered plan");
  m.def("plans_remembered", &plans_remembered);
  m.def("set_backward", &set_backward);
  m.def("register_operator", &register_operator,
        "Register the operator's kernels: cached plans run here, others through fallback; gradients by backward",
        py::arg("op_namespace"), py::arg("fallback"), py::arg("run_plan"), py::arg("backward"));
  m.def("record_product", &record_product,
        "forward(a, b, out_dtype) without autograd, recorded as one WsgemmGemmBackward node");
}
