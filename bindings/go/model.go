package kiln

import (
	"fmt"
	"runtime"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// ModelSpec lists the layers of a model, built up and then given to
// NewModel, which copies it.
type ModelSpec struct{ handle }

// NewModelSpec starts an empty spec; ParseModelSpec starts from text.
func NewModelSpec() (*ModelSpec, error) {
	var h uintptr
	if err := capi.Model_spec_create(&h); err != nil {
		return nil, err
	}
	s := &ModelSpec{handle{h: h}}
	runtime.SetFinalizer(s, (*ModelSpec).Close)
	return s, nil
}

// ParseModelSpec reads a compact spec such as "784-32-10" (ReLU between
// layers) or "784-256-10:gelu:dropout=0.2".
func ParseModelSpec(text string) (*ModelSpec, error) {
	s, err := NewModelSpec()
	if err != nil {
		return nil, err
	}
	if err := s.Parse(text); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the spec. It may be called more than once, from any
// goroutine.
func (s *ModelSpec) Close() { s.release(s, capi.Model_spec_release) }

// Parse appends the layers a compact spec describes.
func (s *ModelSpec) Parse(text string) error {
	cText, err := textOf("text", text)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	return capi.Model_spec_parse(s.h, cText)
}

// AddLinear appends Linear(in, out); in must equal the previous out.
func (s *ModelSpec) AddLinear(in, out int64, bias bool) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add_linear(s.h, in, out, boolInt(bias))
}

// Add appends a parameterless layer; arg is LeakyReLU's slope, ELU's
// alpha, Softplus's beta (threshold 20) or Dropout's probability and ignored
// by the others. LayerSoftmax and LayerLogSoftmax must be the last layer.
func (s *ModelSpec) Add(kind LayerKind, arg float64) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add(s.h, int(kind), arg)
}

// AddWith is Add with the layer's second parameter arg2, Softplus's
// threshold (ignored by the others).
func (s *ModelSpec) AddWith(kind LayerKind, arg, arg2 float64) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add_v2(s.h, int(kind), arg, arg2)
}

// AddMLP appends Linear layers of the given sizes with activation between.
func (s *ModelSpec) AddMLP(activation LayerKind, sizes ...int64) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add_mlp(s.h, sizes, int(activation))
}

// Model is a sequential MLP with f32 (or f64) parameters on a device.
// Forward and Predict may run from several goroutines at once.
type Model struct {
	handle
	ctx *Context
}

func (c *Context) model(h *uintptr, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	m := &Model{handle{h: *h}, c}
	// Its parameters, counted as a tensor's buffer is (see noteAlloc).
	if n, err := m.NumParameters(); err == nil && n > 0 {
		if dt, err := m.dtype(); err == nil {
			m.owns(n * int64(dt.Size()))
		}
	}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// NewModel creates a model from a spec, initialised from the context's
// generator as PyTorch's nn.Linear.
func (c *Context) NewModel(spec *ModelSpec, dev Device) (*Model, error) {
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(spec)
	var h uintptr
	return c.model(&h, capi.Model_create(c.h, spec.ptr(), dev.c(), &h))
}

// NewModelOf is NewModel with parameters of dtype dt: F32, or F64 (CPU only).
func (c *Context) NewModelOf(spec *ModelSpec, dev Device, dt DType) (*Model, error) {
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(spec)
	var h uintptr
	return c.model(&h, capi.Model_create_dtype(c.h, spec.ptr(), dev.c(), int(dt), &h))
}

// NewModelFromText is NewModel(ParseModelSpec(text)).
func (c *Context) NewModelFromText(text string, dev Device) (*Model, error) {
	spec, err := ParseModelSpec(text)
	if err != nil {
		return nil, err
	}
	defer spec.Close()
	return c.NewModel(spec, dev)
}

// LoadModel creates a model from a file Model.Save wrote.
func (c *Context) LoadModel(path string, dev Device) (*Model, error) {
	cPath, err := textOf("path", path)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.model(&h, withPath(capi.Model_load(c.h, cPath, dev.c(), &h), "open", path))
}

// LoadModelWithSpec creates a model of spec on dev from a safetensors file
// holding its parameters under the names PyTorch's nn.Sequential gives them
// ("0.weight" [out, in], "0.bias", ...), such as
// safetensors.torch.save_file(model.state_dict(), path) writes. The spec
// alone decides the layers; the file's dtype (F32, or F64 on the CPU) is the
// model's. Each error message names the offending tensor.
func (c *Context) LoadModelWithSpec(path string, spec *ModelSpec, dev Device) (*Model, error) {
	cPath, err := textOf("path", path)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(spec)
	var h uintptr
	return c.model(&h, withPath(capi.Model_load_with_spec(c.h, cPath, spec.ptr(), dev.c(), &h), "open", path))
}

// ImportONNX creates a CPU model from an ONNX file holding an MLP (Gemm or
// MatMul+Add, Relu, LeakyRelu, Elu, Selu, Softplus, Gelu, Tanh, Sigmoid,
// Identity, Dropout, Flatten/Reshape at the input, Softmax/LogSoftmax at the
// end, opsets 7 to 28, weights inline or in files beside it;
// kiln_model_import_onnx in kiln.h has the rules). Any other op, or a
// hostile file, is ErrNotSupported or ErrFormat naming the node; a missing
// file matches fs.ErrNotExist; ErrNotSupported too when kiln was built
// without libonnx-dev.
func (c *Context) ImportONNX(path string) (*Model, error) {
	cPath, err := textOf("path", path)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.model(&h, withPath(capi.Model_import_onnx(c.h, cPath, &h), "open", path))
}

// ExportONNX writes the model as an ONNX file (opset 13; input "input",
// output "logits", or "probabilities"/"log_probabilities" after an output
// transform, a symbolic batch dimension; Dropout left out) that ONNX
// Runtime runs, atomically like Save.
func (m *Model) ExportONNX(path string) error {
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(m)
	return withWritePath(capi.Model_export_onnx(m.h, cPath), path)
}

// ExportONNXWith is ExportONNX with flags: ONNXExportExternalData writes the
// weights to path+".data" beside the model.
func (m *Model) ExportONNXWith(path string, flags ONNXExportFlags) error {
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(m)
	return withWritePath(capi.Model_export_onnx_v2(m.h, cPath, uint(flags)), path)
}

// String is "Model(784-32-10, 25450 parameters, f32, cpu)", or
// "Model(closed)".
func (m *Model) String() string {
	spec, err1 := m.Describe()
	n, err2 := m.NumParameters()
	dev, err3 := m.Device()
	if err2 == nil && n == 0 { // a model without a Linear: no parameter to tell its dtype
		return closedOr("Model", fmt.Sprintf("%s, 0 parameters, %v", spec, dev), err1, err3)
	}
	dt, err4 := m.dtype()
	return closedOr("Model", fmt.Sprintf("%s, %d parameters, %v, %v", spec, n, dt, dev), err1, err2, err3, err4)
}

// dtype is the parameters' dtype, read from the first of them: kiln has no
// query of its own for it, and a model without a Linear has none.
func (m *Model) dtype() (DType, error) {
	defer runtime.KeepAlive(m)
	var h uintptr
	if err := capi.Model_parameter(m.h, 0, &h); err != nil {
		return -1, err
	}
	defer capi.Tensor_release(h)
	var dt int32
	err := capi.Tensor_dtype(h, &dt)
	return DType(dt), err
}

// Close releases the caller's reference (a trainer keeps its model alive).
// It may be called more than once, from any goroutine.
func (m *Model) Close() { m.release(m, capi.Model_release) }

// To moves the parameters to dev; trainers made before must be recreated.
func (m *Model) To(dev Device) error {
	defer runtime.KeepAlive(m)
	return capi.Model_to(m.h, dev.c())
}

// Device is where the parameters live.
func (m *Model) Device() (Device, error) {
	defer runtime.KeepAlive(m)
	var d capi.Device
	err := capi.Model_device(m.h, &d)
	return fromC(d), err
}

// SetTraining switches Dropout on (true) or off; not while others run it.
func (m *Model) SetTraining(training bool) error {
	defer runtime.KeepAlive(m)
	return capi.Model_set_training(m.h, boolInt(training))
}

// IsTraining reports whether Dropout is active (SetTraining).
func (m *Model) IsTraining() (bool, error) {
	defer runtime.KeepAlive(m)
	var v int32
	err := capi.Model_is_training(m.h, &v)
	return v != 0, err
}

// NumParameters is the number of scalar weights and biases.
func (m *Model) NumParameters() (int64, error) {
	defer runtime.KeepAlive(m)
	var n int64
	return n, capi.Model_num_parameters(m.h, &n)
}

// InputSize is the number of input features.
func (m *Model) InputSize() (int64, error) {
	defer runtime.KeepAlive(m)
	var n int64
	return n, capi.Model_input_size(m.h, &n)
}

// OutputSize is the number of outputs.
func (m *Model) OutputSize() (int64, error) {
	defer runtime.KeepAlive(m)
	var n int64
	return n, capi.Model_output_size(m.h, &n)
}

// Describe gives the spec as ParseModelSpec reads it.
func (m *Model) Describe() (string, error) {
	defer runtime.KeepAlive(m)
	var s string
	return s, capi.Model_describe(m.h, &s)
}

// Parameter is parameter tensor i, sharing the model's storage, and its
// name as PyTorch's state_dict has it ("0.weight", ...).
func (m *Model) Parameter(i int) (*Tensor, string, error) {
	defer runtime.KeepAlive(m)
	var name string
	if err := capi.Model_parameter_name(m.h, int64(i), &name); err != nil {
		return nil, "", err
	}
	var h uintptr
	t, err := m.ctx.view(&h, capi.Model_parameter(m.h, int64(i), &h))
	return t, name, err
}

// NumParameterTensors is the number of parameter tensors.
func (m *Model) NumParameterTensors() (int, error) {
	defer runtime.KeepAlive(m)
	var n int64
	err := capi.Model_num_parameter_tensors(m.h, &n)
	return int(n), err
}

// Forward gives logits [batch, outputs] for x [batch, inputs] on the
// model's device, without gradients.
func (m *Model) Forward(x *Tensor) (*Tensor, error) {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(x)
	var h uintptr
	return m.ctx.tensor(&h, capi.Model_forward(m.h, x.ptr(), &h))
}

// Predict runs the model in evaluation mode on x from any device; the
// result is on the model's device.
func (m *Model) Predict(x *Tensor, kind PredictKind) (*Tensor, error) {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(x)
	var h uintptr
	return m.ctx.tensor(&h, capi.Model_predict(m.h, x.ptr(), int(kind), &h))
}

// Save writes the weights as safetensors, atomically.
func (m *Model) Save(path string) error {
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(m)
	return withWritePath(capi.Model_save(m.h, cPath), path)
}

// LoadWeights reads weights of the same architecture from a file.
func (m *Model) LoadWeights(path string) error {
	cPath, err := textOf("path", path)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(m)
	return withPath(capi.Model_load_weights(m.h, cPath), "open", path)
}
