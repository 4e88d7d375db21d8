package kiln

import (
	"bytes"
	"runtime"
	"strconv"
	"unsafe"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// Device is where a tensor or model lives: the CPU (index -1) or a CUDA GPU.
type Device struct {
	Kind  DeviceKind
	Index int
}

// CPU is the host processor.
var CPU = Device{KindCPU, -1}

// CUDA is GPU number index.
func CUDA(index int) Device { return Device{KindCUDA, index} }

// String gives "cpu" or "cuda:N", as ParseDevice reads them.
func (d Device) String() string {
	if d.Kind == KindCPU {
		return "cpu"
	}
	return "cuda:" + strconv.Itoa(d.Index)
}

func (d Device) c() capi.Device  { return capi.Device{Kind: int32(d.Kind), Index: int64(d.Index)} }
func fromC(d capi.Device) Device { return Device{DeviceKind(d.Kind), int(d.Index)} }

// ParseDevice reads "cpu", "cuda", "cuda:N" or "auto" and checks that the
// device is there: an absent GPU is an error that says why.
func (c *Context) ParseDevice(text string) (Device, error) {
	cText, err := textOf("text", text)
	if err != nil {
		return Device{}, err
	}
	defer runtime.KeepAlive(c)
	var d capi.Device
	err = capi.Device_parse(c.h, cText, &d)
	return fromC(d), err
}

// DefaultDevice is cuda:0 when CUDA is usable, else the CPU.
func (c *Context) DefaultDevice() (Device, error) {
	defer runtime.KeepAlive(c)
	var d capi.Device
	err := capi.Default_device(c.h, &d)
	return fromC(d), err
}

// CUDAAvailable reports whether the CUDA backend loaded and sees a GPU; if
// not, reason says why (the loader's or driver's message).
func (c *Context) CUDAAvailable() (ok bool, reason string, err error) {
	defer runtime.KeepAlive(c)
	var v int32
	if err = capi.Cuda_is_available(c.h, &v); err != nil {
		return false, "", err
	}
	err = capi.Cuda_unavailable_reason(c.h, &reason)
	return v != 0, reason, err
}

// DeviceCount is 1 for the CPU and the number of usable GPUs for CUDA.
func (c *Context) DeviceCount(kind DeviceKind) (int, error) {
	defer runtime.KeepAlive(c)
	var n int64
	err := capi.Device_count(c.h, int(kind), &n)
	return int(n), err
}

// DeviceInfo describes a device. For the CPU, Name is the processor model,
// MultiprocessorCount its logical cores and Threads those kiln uses.
type DeviceInfo struct {
	Device                     Device
	Name                       string
	TotalMemory, FreeMemory    int64
	ComputeMajor, ComputeMinor int
	MultiprocessorCount        int
	DriverVersion              int
	RuntimeVersion             int
	Threads                    int
}

// DeviceInfo queries one device.
func (c *Context) DeviceInfo(d Device) (DeviceInfo, error) {
	defer runtime.KeepAlive(c)
	var ci capi.DeviceInfo
	ci.StructSize = uint32(unsafe.Sizeof(ci))
	if err := capi.Device_get_info(c.h, d.c(), &ci); err != nil {
		return DeviceInfo{}, err
	}
	name := ci.Name[:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return DeviceInfo{
		Device: fromC(ci.Device), Name: string(name),
		TotalMemory: ci.TotalMemory, FreeMemory: ci.FreeMemory,
		ComputeMajor: int(ci.ComputeMajor), ComputeMinor: int(ci.ComputeMinor),
		MultiprocessorCount: int(ci.MultiprocessorCount),
		DriverVersion:       int(ci.DriverVersion), RuntimeVersion: int(ci.RuntimeVersion),
		Threads: int(ci.Threads),
	}, nil
}

// Devices lists every usable device: the CPU first, then each GPU.
func (c *Context) Devices() ([]DeviceInfo, error) {
	n, err := c.DeviceCount(KindCUDA)
	if err != nil {
		return nil, err
	}
	all := make([]DeviceInfo, 0, n+1)
	for _, d := range append([]Device{CPU}, cudaRange(n)...) {
		info, err := c.DeviceInfo(d)
		if err != nil {
			return nil, err
		}
		all = append(all, info)
	}
	return all, nil
}

func cudaRange(n int) []Device {
	ds := make([]Device, n)
	for i := range ds {
		ds[i] = CUDA(i)
	}
	return ds
}

// Synchronize waits until all work kiln queued on the device is done.
func (c *Context) Synchronize(d Device) error {
	defer runtime.KeepAlive(c)
	return capi.Device_synchronize(c.h, d.c())
}
