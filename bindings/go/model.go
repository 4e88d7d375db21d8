package kiln

import (
	"runtime"

	"kiln/internal/capi"
)

// LayerKind is a layer of a sequential model.
type LayerKind int

const (
	LayerLinear LayerKind = iota
	LayerReLU
	LayerLeakyReLU
	LayerGELU
	LayerTanh
	LayerSigmoid
	LayerDropout
)

// ModelSpec lists the layers of a model, built up and then given to
// NewModel, which copies it.
type ModelSpec struct{ h uintptr }

// NewModelSpec starts an empty spec; ParseModelSpec starts from text.
func NewModelSpec() (*ModelSpec, error) {
	var h uintptr
	if err := capi.Model_spec_create(&h); err != nil {
		return nil, err
	}
	s := &ModelSpec{h}
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

// Close releases the spec.
func (s *ModelSpec) Close() {
	if s.h != 0 {
		capi.Model_spec_release(s.h)
		s.h = 0
		runtime.SetFinalizer(s, nil)
	}
}

// Parse appends the layers a compact spec describes.
func (s *ModelSpec) Parse(text string) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_parse(s.h, text)
}

// AddLinear appends Linear(in, out); in must equal the previous out.
func (s *ModelSpec) AddLinear(in, out int64, bias bool) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add_linear(s.h, in, out, boolInt(bias))
}

// Add appends a parameterless layer; arg is LeakyReLU's slope or Dropout's
// probability and ignored by the others.
func (s *ModelSpec) Add(kind LayerKind, arg float64) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add(s.h, int(kind), arg)
}

// AddMLP appends Linear layers of the given sizes with activation between.
func (s *ModelSpec) AddMLP(activation LayerKind, sizes ...int64) error {
	defer runtime.KeepAlive(s)
	return capi.Model_spec_add_mlp(s.h, sizes, int(activation))
}

// Model is a sequential MLP with f32 (or f64) parameters on a device.
// Forward and Predict may run from several goroutines at once.
type Model struct{ h uintptr }

func modelResult(h *uintptr, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	m := &Model{*h}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// NewModel creates a model from a spec, initialised from the context's
// generator as PyTorch's nn.Linear.
func (c *Context) NewModel(spec *ModelSpec, dev Device) (*Model, error) {
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(spec)
	var h uintptr
	return modelResult(&h, capi.Model_create(c.h, spec.h, dev.c(), &h))
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
	defer runtime.KeepAlive(c)
	var h uintptr
	return modelResult(&h, capi.Model_load(c.h, path, dev.c(), &h))
}

// Close releases the caller's reference (a trainer keeps its model alive).
func (m *Model) Close() {
	if m.h != 0 {
		capi.Model_release(m.h)
		m.h = 0
		runtime.SetFinalizer(m, nil)
	}
}

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

// NumParameters is the number of scalar weights and biases.
func (m *Model) NumParameters() (int64, error) {
	defer runtime.KeepAlive(m)
	var n int64
	return n, capi.Model_num_parameters(m.h, &n)
}

// InputSize and OutputSize are the features in and the outputs out.
func (m *Model) InputSize() (int64, error) {
	defer runtime.KeepAlive(m)
	var n int64
	return n, capi.Model_input_size(m.h, &n)
}

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
	t, err := tensorResult(&h, capi.Model_parameter(m.h, int64(i), &h))
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
	return tensorResult(&h, capi.Model_forward(m.h, x.h, &h))
}

// PredictKind selects what Predict returns.
type PredictKind int

const (
	PredictLogits        PredictKind = iota
	PredictProbabilities             // softmax of the logits
	PredictClasses                   // argmax, I64 [batch]
)

// Predict runs the model in evaluation mode on x from any device; the
// result is on the model's device.
func (m *Model) Predict(x *Tensor, kind PredictKind) (*Tensor, error) {
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(x)
	var h uintptr
	return tensorResult(&h, capi.Model_predict(m.h, x.h, int(kind), &h))
}

// Save writes the weights as safetensors, atomically.
func (m *Model) Save(path string) error {
	defer runtime.KeepAlive(m)
	return capi.Model_save(m.h, path)
}

// LoadWeights reads weights of the same architecture from a file.
func (m *Model) LoadWeights(path string) error {
	defer runtime.KeepAlive(m)
	return capi.Model_load_weights(m.h, path)
}
