package kiln

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// String gives "f32", "i64", ...
func (t DType) String() string { return capi.Dtype_name(int(t)) }

// Size is the number of bytes per element.
func (t DType) Size() int { return int(capi.Dtype_size(int(t))) }

// Element is a Go type that has a kiln dtype of the same layout.
type Element interface {
	float32 | float64 | int32 | int64 | uint8
}

// DTypeOf gives the dtype matching T.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return F32
	case float64:
		return F64
	case int32:
		return I32
	case int64:
		return I64
	default:
		return U8
	}
}

// asBytes views a slice's backing array as bytes, without copying. kiln
// copies from or into it during the call and keeps no pointer to it.
func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}

// Tensor is an n-dimensional array on a device. Views (Reshape, Rows,
// Model.Parameter) share storage with their source and keep it alive, so
// either may be closed first. It prints as its shape, dtype and device.
type Tensor struct {
	handle
	ctx *Context // keeps the context's logger alive; see Context.log
}

// tensor wraps the handle a call produced, or returns its error; the
// tensor owns new storage, which is counted (see noteAlloc). It takes a
// pointer so that the call that fills h runs before h is read.
func (c *Context) tensor(h *uintptr, err error) (*Tensor, error) {
	if err != nil {
		return nil, err
	}
	t := &Tensor{handle: handle{h: *h}, ctx: c}
	var n int64
	var dt int32
	if capi.Tensor_numel(t.h, &n) == nil && capi.Tensor_dtype(t.h, &dt) == nil {
		t.owns(n * int64(DType(dt).Size()))
	}
	runtime.SetFinalizer(t, (*Tensor).Close)
	return t, nil
}

// view wraps a handle that shares another tensor's storage: nothing new to
// count.
func (c *Context) view(h *uintptr, err error) (*Tensor, error) {
	if err != nil {
		return nil, err
	}
	t := &Tensor{handle: handle{h: *h}, ctx: c}
	runtime.SetFinalizer(t, (*Tensor).Close)
	return t, nil
}

// Close releases the tensor's memory (or its reference to shared storage).
// It may be called more than once, from any goroutine.
func (t *Tensor) Close() { t.release(t, capi.Tensor_release) }

// String is "Tensor(shape=[2 3], dtype=f32, device=cpu)", or
// "Tensor(closed)".
func (t *Tensor) String() string {
	shape, err1 := t.Shape()
	dt, err2 := t.dtype()
	dev, err3 := t.Device()
	return closedOr("Tensor", fmt.Sprintf("shape=%v, dtype=%v, device=%v", shape, dt, dev), err1, err2, err3)
}

// FromSlice copies data into a new tensor of the given shape on dev; its
// dtype follows T (float32 -> F32, int64 -> I64, ...).
func FromSlice[T Element](c *Context, data []T, shape []int64, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_from_host(c.ptr(), asBytes(data), shape, int(DTypeOf[T]()), dev.c(), &h))
}

// elementsOf is the number of t's elements, once its dtype is T's: kiln
// copies bytes, and would take those of another type of the same size as
// they are.
func elementsOf[T Element](t *Tensor) (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	if err := capi.Tensor_numel(t.ptr(), &n); err != nil {
		return 0, err
	}
	// The dtype's own error, not a mismatch with -1, when a Close on
	// another goroutine came between the two reads.
	var dt int32
	if err := capi.Tensor_dtype(t.ptr(), &dt); err != nil {
		return 0, err
	}
	if want := DTypeOf[T](); DType(dt) != want {
		return 0, &Error{Status: ErrDTypeMismatch, Message: fmt.Sprintf("tensor is %v, not %v", DType(dt), want)}
	}
	return n, nil
}

// ToSlice copies the tensor's elements to a new slice; T must match its dtype.
func ToSlice[T Element](t *Tensor) ([]T, error) {
	n, err := elementsOf[T](t)
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	defer runtime.KeepAlive(t)
	return out, capi.Tensor_copy_to_host(t.h, asBytes(out))
}

// CopyFrom overwrites the tensor's elements with data (same dtype and count).
func CopyFrom[T Element](t *Tensor, data []T) error {
	if _, err := elementsOf[T](t); err != nil {
		return err
	}
	defer runtime.KeepAlive(t)
	return capi.Tensor_copy_from_host(t.h, asBytes(data))
}

// Empty is an uninitialised tensor of a shape on dev.
func (c *Context) Empty(shape []int64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_empty(c.h, shape, int(dt), dev.c(), &h))
}

// Zeros is a tensor of zeros.
func (c *Context) Zeros(shape []int64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_zeros(c.h, shape, int(dt), dev.c(), &h))
}

// Ones is a tensor of ones.
func (c *Context) Ones(shape []int64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_ones(c.h, shape, int(dt), dev.c(), &h))
}

// Full is a tensor filled with value (which must fit an integer dtype).
func (c *Context) Full(shape []int64, dt DType, dev Device, value float64) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_full(c.h, shape, int(dt), dev.c(), value, &h))
}

// Rand is uniform in [0, 1), from the context's generator.
func (c *Context) Rand(shape []int64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_rand(c.h, shape, int(dt), dev.c(), &h))
}

// Randn is standard normal, from the context's generator.
func (c *Context) Randn(shape []int64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_randn(c.h, shape, int(dt), dev.c(), &h))
}

// Arange is start, start+step, ... up to (not including) end.
func (c *Context) Arange(start, end, step float64, dt DType, dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_arange(c.h, start, end, step, int(dt), dev.c(), &h))
}

// EmptyPinned is a CPU tensor in page-locked memory, for fast asynchronous
// copies to a GPU.
func (c *Context) EmptyPinned(shape []int64, dt DType) (*Tensor, error) {
	defer runtime.KeepAlive(c)
	var h uintptr
	return c.tensor(&h, capi.Tensor_empty_pinned(c.h, shape, int(dt), &h))
}

// Shape is the tensor's dimensions.
func (t *Tensor) Shape() ([]int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	if err := capi.Tensor_ndim(t.h, &n); err != nil {
		return nil, err
	}
	shape := make([]int64, n)
	return shape, capi.Tensor_shape(t.h, shape)
}

// NumEl is the number of elements.
func (t *Tensor) NumEl() (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	return n, capi.Tensor_numel(t.h, &n)
}

// DType is the element type; -1 for a closed tensor.
func (t *Tensor) DType() DType {
	dt, err := t.dtype()
	if err != nil {
		return -1
	}
	return dt
}

func (t *Tensor) dtype() (DType, error) {
	defer runtime.KeepAlive(t)
	var dt int32
	err := capi.Tensor_dtype(t.h, &dt)
	return DType(dt), err
}

// Dim is the size of dimension dim; a negative dim counts from the end.
func (t *Tensor) Dim(dim int) (int64, error) {
	defer runtime.KeepAlive(t)
	var n int64
	return n, capi.Tensor_dim(t.h, int64(dim), &n)
}

// DeviceIndex is PyTorch's get_device(): the CUDA index, or -1 on the CPU.
func (t *Tensor) DeviceIndex() (int, error) {
	defer runtime.KeepAlive(t)
	var i int64
	err := capi.Tensor_get_device(t.h, &i)
	return int(i), err
}

// IsPinned reports whether the tensor was made by EmptyPinned (views share
// their source's answer).
func (t *Tensor) IsPinned() (bool, error) {
	defer runtime.KeepAlive(t)
	var v int32
	err := capi.Tensor_is_pinned(t.h, &v)
	return v != 0, err
}

// Device is where the tensor lives.
func (t *Tensor) Device() (Device, error) {
	defer runtime.KeepAlive(t)
	var d capi.Device
	err := capi.Tensor_device(t.h, &d)
	return fromC(d), err
}

// Item is the value of a one-element tensor.
func (t *Tensor) Item() (float64, error) {
	defer runtime.KeepAlive(t)
	var v float64
	return v, capi.Tensor_item(t.h, &v)
}

// To copies the tensor to dev (a new handle to the same tensor when it is
// already there).
func (t *Tensor) To(dev Device) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	if err := capi.Tensor_to(t.h, dev.c(), &h); err != nil {
		return nil, err
	}
	if from, err := t.Device(); err == nil && from == dev {
		return t.ctx.view(&h, nil)
	}
	return t.ctx.tensor(&h, nil)
}

// Cast is a copy converted to dt; float to int truncates toward zero.
func (t *Tensor) Cast(dt DType) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_cast(t.h, int(dt), &h))
}

// Clone is a contiguous copy on the same device.
func (t *Tensor) Clone() (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_clone(t.h, &h))
}

// Reshape is a view with another shape of the same size; one entry may be -1.
func (t *Tensor) Reshape(shape ...int64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.view(&h, capi.Tensor_reshape(t.h, shape, &h))
}

// Rows is a view of rows [start, end) of the first dimension.
func (t *Tensor) Rows(start, end int64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.view(&h, capi.Tensor_rows(t.h, start, end, &h))
}

// Binary is t op other elementwise, with NumPy broadcasting.
func (t *Tensor) Binary(op BinaryOp, other *Tensor) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(other)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_binary(int(op), t.h, other.ptr(), &h))
}

// Add is t + o elementwise, with broadcasting.
func (t *Tensor) Add(o *Tensor) (*Tensor, error) { return t.Binary(OpAdd, o) }

// Sub is t - o elementwise, with broadcasting.
func (t *Tensor) Sub(o *Tensor) (*Tensor, error) { return t.Binary(OpSub, o) }

// Mul is t * o elementwise, with broadcasting.
func (t *Tensor) Mul(o *Tensor) (*Tensor, error) { return t.Binary(OpMul, o) }

// Div is t / o elementwise, with broadcasting (integer division truncates,
// and by zero gives 0).
func (t *Tensor) Div(o *Tensor) (*Tensor, error) { return t.Binary(OpDiv, o) }

// Scalar is t op s elementwise (s converted to t's dtype).
func (t *Tensor) Scalar(op BinaryOp, s float64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_scalar(int(op), t.h, s, &h))
}

// Compare is t op other elementwise as a U8 tensor of 0 and 1.
func (t *Tensor) Compare(op CompareOp, other *Tensor) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(other)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_compare(int(op), t.h, other.ptr(), &h))
}

// Unary is op(t) elementwise; alpha is LeakyReLU's slope, ignored otherwise.
func (t *Tensor) Unary(op UnaryOp, alpha float64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_unary(int(op), t.h, alpha, &h))
}

// Softmax along dim (negative counts from the end).
func (t *Tensor) Softmax(dim int64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_softmax(t.h, dim, &h))
}

// LogSoftmax along dim (negative counts from the end).
func (t *Tensor) LogSoftmax(dim int64) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_log_softmax(t.h, dim, &h))
}

// Reduce applies op along dim; keepDim keeps it with size 1.
func (t *Tensor) Reduce(op ReduceOp, dim int64, keepDim bool) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_reduce(int(op), t.h, dim, boolInt(keepDim), &h))
}

// Matmul is the matrix product t x other.
func (t *Tensor) Matmul(other *Tensor) (*Tensor, error) {
	defer runtime.KeepAlive(t)
	defer runtime.KeepAlive(other)
	var h uintptr
	return t.ctx.tensor(&h, capi.Tensor_matmul(t.h, other.ptr(), &h))
}
