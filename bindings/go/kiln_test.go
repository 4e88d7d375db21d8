package kiln_test

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	kiln "github.com/kiln-ml/kiln/bindings/go"
)

func newContext(t *testing.T) *kiln.Context {
	t.Helper()
	ctx, err := kiln.NewContext(kiln.WithSeed(42))
	if err != nil {
		t.Fatalf("NewContext: %v", err)
	}
	t.Cleanup(ctx.Close)
	return ctx
}

// must unwraps a result in the test's own goroutine; an error fails the
// test with its stack.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func defaultDevice(t *testing.T, ctx *kiln.Context) kiln.Device {
	return must(ctx.DefaultDevice())
}

func TestVersion(t *testing.T) {
	if got := kiln.LoadedABIVersion(); got != kiln.ABIVersion {
		t.Fatalf("ABI %d, want %d", got, kiln.ABIVersion)
	}
	if kiln.Version() == "" {
		t.Fatal("empty version")
	}
}

// The init-time check: the package starts only when the header cgo read and
// the loaded library have the ABI its raw layer was generated for (this
// process got past init, so the real versions agree).
func TestABICheck(t *testing.T) {
	if kiln.LoadedABIVersion() != kiln.ABIVersion {
		t.Fatalf("init let ABI %d through for %d", kiln.LoadedABIVersion(), kiln.ABIVersion)
	}
	if err := kiln.CheckABI(1, 1, 1); err != nil {
		t.Fatalf("matching versions refused: %v", err)
	}
	if err := kiln.CheckABI(1, 2, 1); err == nil || !strings.Contains(err.Error(), "kiln.h of ABI 2") {
		t.Fatalf("another header: %v", err)
	}
	if err := kiln.CheckABI(1, 1, 3); err == nil || !strings.Contains(err.Error(), "loaded at run time (version "+kiln.Version()+") has ABI 3") {
		t.Fatalf("another library: %v", err)
	}
}

func TestDevices(t *testing.T) {
	ctx := newContext(t)
	devs := must(ctx.Devices())
	if len(devs) == 0 || devs[0].Device != kiln.CPU {
		t.Fatalf("devices %+v: want the CPU first", devs)
	}
	if devs[0].Name == "" || devs[0].MultiprocessorCount < 1 {
		t.Fatalf("CPU info %+v", devs[0])
	}
	n := must(ctx.DeviceCount(kiln.KindCUDA))
	if len(devs) != n+1 {
		t.Fatalf("%d devices for %d GPUs", len(devs), n)
	}
	ok, reason, err := ctx.CUDAAvailable()
	if err != nil || ok != (n > 0) || (!ok && reason == "") {
		t.Fatalf("CUDAAvailable = %v, %q, %v with %d GPUs", ok, reason, err, n)
	}
	def := defaultDevice(t, ctx)
	if ok && def != kiln.CUDA(0) || !ok && def != kiln.CPU {
		t.Fatalf("default device %v", def)
	}
	if d := must(ctx.ParseDevice("cpu")); d != kiln.CPU || d.String() != "cpu" {
		t.Fatalf("parse cpu = %v", d)
	}
}

func TestTensorRoundTrip(t *testing.T) {
	ctx := newContext(t)
	dev := defaultDevice(t, ctx)
	data := []float32{1, 2, 3, 4, 5, 6}
	host := must(kiln.FromSlice(ctx, data, []int64{2, 3}, kiln.CPU))
	defer host.Close()
	moved := must(host.To(dev))
	defer moved.Close()
	if d := must(moved.Device()); d != dev {
		t.Fatalf("moved to %v, want %v", d, dev)
	}
	shape := must(moved.Shape())
	if len(shape) != 2 || shape[0] != 2 || shape[1] != 3 || moved.DType() != kiln.F32 {
		t.Fatalf("shape %v dtype %v", shape, moved.DType())
	}
	sum := must(moved.Add(moved))
	defer sum.Close()
	back := must(sum.To(kiln.CPU))
	defer back.Close()
	got := must(kiln.ToSlice[float32](back))
	for i, v := range got {
		if v != 2*data[i] {
			t.Fatalf("element %d = %v, want %v", i, v, 2*data[i])
		}
	}
	// [2,3] x [3,1] of ones: row sums 6 and 15.
	ones := must(ctx.Ones([]int64{3, 1}, kiln.F32, dev))
	defer ones.Close()
	prod := must(moved.Matmul(ones))
	defer prod.Close()
	pc := must(prod.To(kiln.CPU))
	defer pc.Close()
	if rs := must(kiln.ToSlice[float32](pc)); len(rs) != 2 || rs[0] != 6 || rs[1] != 15 {
		t.Fatalf("matmul = %v", rs)
	}
	// A view shares storage with its source.
	row := must(host.Rows(1, 2))
	defer row.Close()
	if rv := must(kiln.ToSlice[float32](row)); len(rv) != 3 || rv[0] != 4 {
		t.Fatalf("row view = %v", rv)
	}
	if _, err := kiln.ToSlice[int64](host); err == nil {
		t.Fatal("ToSlice[int64] of an f32 tensor succeeded")
	}
}

// CopyFrom, like ToSlice, takes only a slice of the tensor's own dtype:
// another one of the same byte count would otherwise be copied in as it is
// and read back as other numbers.
func TestCopyFromChecksDType(t *testing.T) {
	ctx := newContext(t)
	x := must(ctx.Zeros([]int64{4}, kiln.F32, kiln.CPU))
	defer x.Close()
	for name, err := range map[string]error{
		"[]float64{1, 2}":     kiln.CopyFrom(x, []float64{1, 2}),
		"[]int32{1, 2, 3, 4}": kiln.CopyFrom(x, []int32{1, 2, 3, 4}),
	} {
		var ke *kiln.Error
		if !errors.Is(err, kiln.ErrDTypeMismatch) || !errors.As(err, &ke) || !strings.Contains(ke.Message, "f32") {
			t.Errorf("CopyFrom(%s) into an f32 tensor: %v, want ErrDTypeMismatch naming f32", name, err)
		}
	}
	if got := must(kiln.ToSlice[float32](x)); got[0] != 0 || got[1] != 0 || got[2] != 0 || got[3] != 0 {
		t.Fatalf("refused copies changed the tensor to %v", got)
	}
	if err := kiln.CopyFrom(x, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
}

func statusOf(err error) kiln.Status {
	var ke *kiln.Error
	if errors.As(err, &ke) {
		return ke.Status
	}
	return -1
}

func TestErrors(t *testing.T) {
	ctx := newContext(t)
	_, err := kiln.FromSlice(ctx, []float32{1, 2, 3, 4, 5}, []int64{2, 3}, kiln.CPU)
	if statusOf(err) != kiln.ErrInvalidArgument || err.(*kiln.Error).Message == "" {
		t.Fatalf("5 floats as [2,3]: %v", err)
	}
	a := must(ctx.Zeros([]int64{2, 3}, kiln.F32, kiln.CPU))
	defer a.Close()
	_, err = a.Matmul(a)
	if statusOf(err) != kiln.ErrShapeMismatch || err.(*kiln.Error).Message == "" {
		t.Fatalf("[2,3] x [2,3]: %v", err)
	}
	_, err = ctx.ParseDevice("gpu:0")
	if statusOf(err) != kiln.ErrInvalidArgument || err.(*kiln.Error).Message == "" {
		t.Fatalf(`ParseDevice("gpu:0"): %v`, err)
	}
	if n, _ := ctx.DeviceCount(kiln.KindCUDA); n == 0 {
		_, err = ctx.ParseDevice("cuda:0")
		if statusOf(err) != kiln.ErrDeviceUnavailable {
			t.Fatalf(`ParseDevice("cuda:0") without GPU: %v`, err)
		}
	}
	// A closed tensor is refused, not a crash; the context still works.
	b := must(ctx.Ones([]int64{4}, kiln.F32, kiln.CPU))
	b.Close()
	if _, err := b.NumEl(); err == nil {
		t.Fatal("closed tensor accepted")
	}
	c := must(ctx.Ones([]int64{4}, kiln.F32, kiln.CPU))
	defer c.Close()
	if n := must(c.NumEl()); n != 4 {
		t.Fatalf("numel %d", n)
	}
}

// blobs makes n samples of classes Gaussian clusters in features dimensions.
func blobs(n, features, classes int, seed int64) ([]float32, []int64) {
	r := rand.New(rand.NewSource(seed))
	centers := make([]float32, classes*features)
	for i := range centers {
		centers[i] = float32(r.NormFloat64() * 3)
	}
	x := make([]float32, n*features)
	y := make([]int64, n)
	for i := 0; i < n; i++ {
		c := r.Intn(classes)
		y[i] = int64(c)
		for j := 0; j < features; j++ {
			x[i*features+j] = centers[c*features+j] + float32(r.NormFloat64())
		}
	}
	return x, y
}

func dataset(t *testing.T, ctx *kiln.Context, n int, seed int64) (*kiln.Dataset, *kiln.Tensor) {
	xs, ys := blobs(n, 16, 4, seed)
	x := must(kiln.FromSlice(ctx, xs, []int64{int64(n), 16}, kiln.CPU))
	y := must(kiln.FromSlice(ctx, ys, []int64{int64(n)}, kiln.CPU))
	defer y.Close()
	ds := must(ctx.NewDataset(x, y))
	t.Cleanup(ds.Close)
	t.Cleanup(x.Close)
	return ds, x
}

func trainedModel(t *testing.T, ctx *kiln.Context) (*kiln.Model, *kiln.Dataset, *kiln.Tensor) {
	dev := defaultDevice(t, ctx)
	train, _ := dataset(t, ctx, 1024, 1)
	test, testX := dataset(t, ctx, 256, 1) // same centers, other samples below
	model := must(ctx.NewModelFromText("16-32-4", dev))
	t.Cleanup(model.Close)
	tr := must(kiln.NewTrainer(model, kiln.WithOptimizer(kiln.Adam), kiln.WithLR(0.01), kiln.WithBatchSize(32)))
	defer tr.Close()
	var last kiln.EpochStats
	for e := 0; e < 5; e++ {
		last = must(tr.Epoch(train))
	}
	if last.Epoch != 5 || last.TrainAccuracy < 0.9 || last.TrainLoss > 0.5 {
		t.Fatalf("after 5 epochs: %+v", last)
	}
	_, acc, err := tr.Evaluate(test)
	if err != nil || acc < 0.9 {
		t.Fatalf("evaluate: accuracy %v, %v (chance is 0.25)", acc, err)
	}
	t.Logf("after 5 epochs: train %+v, test accuracy %.3f", last, acc)
	return model, test, testX
}

func TestTrainSaveLoad(t *testing.T) {
	ctx := newContext(t)
	model, _, x := trainedModel(t, ctx)
	if n := must(model.NumParameters()); n != 16*32+32+32*4+4 {
		t.Fatalf("%d parameters", n)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := model.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded := must(ctx.LoadModel(path, defaultDevice(t, ctx)))
	defer loaded.Close()
	if a, b := must(model.Describe()), must(loaded.Describe()); a != b || a == "" {
		t.Fatalf("describe %q vs %q", a, b)
	}
	want := logits(t, model, x)
	got := logits(t, loaded, x)
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("logit %d: %v after load, %v before", i, got[i], want[i])
		}
	}
	if _, err := ctx.LoadModel(filepath.Join(t.TempDir(), "missing"), kiln.CPU); statusOf(err) != kiln.ErrIO {
		t.Fatalf("missing file: %v", err)
	}
}

func TestONNXRoundTrip(t *testing.T) {
	ctx := newContext(t)
	model := must(ctx.NewModelFromText("16-32-4", kiln.CPU))
	defer model.Close()
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := model.ExportONNX(path); errors.Is(err, kiln.ErrNotSupported) {
		t.Skipf("kiln was built without ONNX: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	imported := must(ctx.ImportONNX(path))
	defer imported.Close()
	x := must(ctx.Randn([]int64{3, 16}, kiln.F32, kiln.CPU))
	defer x.Close()
	want, got := logits(t, model, x), logits(t, imported, x)
	for i := range want {
		if math.Abs(float64(want[i]-got[i])) > 1e-6 {
			t.Fatalf("logit %d: %v after the round trip, %v before", i, got[i], want[i])
		}
	}
	if _, err := ctx.ImportONNX(filepath.Join(t.TempDir(), "missing.onnx")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage.onnx")
	if err := os.WriteFile(garbage, []byte("not a protobuf at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.ImportONNX(garbage); !errors.Is(err, kiln.ErrFormat) {
		t.Fatalf("a garbage file: %v", err)
	}
}

// ELU, SELU and Softplus through Add and AddWith, a Softmax output
// transform, and the weights exported to a data file beside the model.
func TestNewLayersAndExternalData(t *testing.T) {
	ctx := newContext(t)
	spec := must(kiln.NewModelSpec())
	defer spec.Close()
	for _, err := range []error{
		spec.AddLinear(16, 8, true), spec.Add(kiln.LayerELU, 0.5), spec.AddLinear(8, 8, true), spec.Add(kiln.LayerSELU, 0),
		spec.AddLinear(8, 6, true), spec.AddWith(kiln.LayerSoftplus, 2, 5), spec.AddLinear(6, 4, true),
		spec.Add(kiln.LayerSoftmax, 0),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := spec.Add(kiln.LayerReLU, 0); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Fatalf("a layer after the output transform: %v", err)
	}
	model := must(ctx.NewModel(spec, kiln.CPU))
	defer model.Close()
	if got := must(model.Describe()); got != "linear(16,8);elu(0.5);linear(8,8);selu;linear(8,6);softplus(2,5);linear(6,4);softmax" {
		t.Fatalf("described as %q", got)
	}
	x := must(ctx.Randn([]int64{3, 16}, kiln.F32, kiln.CPU))
	defer x.Close()
	probs := logits(t, model, x) // the output transform: each row sums to 1
	for r := 0; r < 3; r++ {
		var sum float32
		for _, p := range probs[4*r : 4*r+4] {
			sum += p
		}
		if math.Abs(float64(sum-1)) > 1e-5 {
			t.Fatalf("row %d of the softmax sums to %v", r, sum)
		}
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := model.ExportONNXWith(path, kiln.ONNXExportExternalData); errors.Is(err, kiln.ErrNotSupported) {
		t.Skipf("kiln was built without ONNX: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".data"); err != nil {
		t.Fatalf("no data file beside the model: %v", err)
	}
	imported := must(ctx.ImportONNX(path))
	defer imported.Close()
	got := logits(t, imported, x)
	for i := range probs {
		if math.Abs(float64(probs[i]-got[i])) > 1e-6 {
			t.Fatalf("output %d: %v after the round trip, %v before", i, got[i], probs[i])
		}
	}
	if err := model.ExportONNXWith(path, 2); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Fatalf("unknown flags: %v", err)
	}
}

func logits(t *testing.T, m *kiln.Model, x *kiln.Tensor) []float32 {
	out, err := m.Predict(x, kiln.PredictLogits)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer out.Close()
	host, err := out.To(kiln.CPU)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer host.Close()
	v, err := kiln.ToSlice[float32](host)
	if err != nil {
		t.Error(err)
	}
	return v
}

func TestConcurrentInference(t *testing.T) {
	ctx := newContext(t)
	model, _, x := trainedModel(t, ctx)
	want := logits(t, model, x)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				got := logits(t, model, x)
				for j := range want {
					if math.Abs(float64(got[j]-want[j])) > 1e-6 {
						t.Errorf("concurrent logit %d = %v, want %v", j, got[j], want[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestReleaseFromOtherGoroutines(t *testing.T) {
	ctx := newContext(t)
	// Explicit Close on other goroutines, which Go runs on other OS threads.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		x := must(ctx.Randn([]int64{64, 64}, kiln.F32, kiln.CPU))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			x.Close()
		}()
	}
	wg.Wait()
	// Unreferenced objects are released by finalizers on the GC's goroutine.
	for i := 0; i < 100; i++ {
		_ = must(ctx.Zeros([]int64{128}, kiln.F32, kiln.CPU))
	}
	m := must(ctx.NewModelFromText("8-4-2", kiln.CPU))
	_ = must(kiln.NewTrainer(m)) // the trainer keeps the model alive
	m = nil
	runtime.GC()
	runtime.GC()
	if n := must(must(ctx.Ones([]int64{3}, kiln.F32, kiln.CPU)).NumEl()); n != 3 {
		t.Fatalf("numel %d after finalizers", n)
	}
}

// fitBlobs trains a fresh 16-32-4 model on dev for 5 epochs with opts (after
// SGD, lr 0.003, batch 32, a fixed shuffle seed) from the same seed each
// time, and returns the last epoch's training loss and the validation
// accuracy. The slow lr leaves the loss well above zero (about 0.25), so
// losses of two precisions compare meaningfully.
func fitBlobs(t *testing.T, ctx *kiln.Context, dev kiln.Device, opts ...kiln.TrainerOption) (loss, acc float64) {
	t.Helper()
	if err := ctx.SetSeed(42); err != nil {
		t.Fatal(err)
	}
	data, _ := dataset(t, ctx, 1024, 1)
	train, val := must2(data.Split(0.25, 1))
	defer train.Close()
	defer val.Close()
	model := must(ctx.NewModelFromText("16-32-4", dev))
	defer model.Close()
	base := []kiln.TrainerOption{kiln.WithLR(0.003), kiln.WithBatchSize(32),
		kiln.WithShuffleSeed(3)}
	tr := must(kiln.NewTrainer(model, append(base, opts...)...))
	defer tr.Close()
	hist := must(tr.Fit(context.Background(), train, val, 5))
	last := hist[len(hist)-1]
	return last.TrainLoss, last.ValAccuracy
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func TestPrecisionBF16(t *testing.T) {
	ctx := newContext(t)
	dev := defaultDevice(t, ctx)
	fp32Loss, fp32Acc := fitBlobs(t, ctx, dev, kiln.WithPrecision(kiln.PrecisionFP32))
	bf16Loss, bf16Acc := fitBlobs(t, ctx, dev, kiln.WithPrecision(kiln.PrecisionBF16))
	t.Logf("fp32: loss %.6f accuracy %.3f; bf16: loss %.6f accuracy %.3f", fp32Loss, fp32Acc, bf16Loss, bf16Acc)
	if bf16Acc < 0.9 {
		t.Fatalf("bf16 validation accuracy %.3f (chance is 0.25)", bf16Acc)
	}
	if fp32Loss < 0.05 || math.Abs(bf16Loss-fp32Loss) > 0.05*fp32Loss {
		t.Fatalf("final loss bf16 %.4f, fp32 %.4f: want fp32 above 0.05 and bf16 within 5%% of it", bf16Loss, fp32Loss)
	}
}

func TestDataParallelDeviceList(t *testing.T) {
	ctx := newContext(t)
	model := must(ctx.NewModelFromText("8-4-2", kiln.CPU))
	defer model.Close()
	_, err := kiln.NewTrainer(model, kiln.WithDevices(kiln.CUDA(0), kiln.CUDA(1)))
	var ke *kiln.Error
	if !errors.Is(err, kiln.ErrInvalidArgument) || !errors.As(err, &ke) || !strings.Contains(ke.Message, "first listed device") {
		t.Fatalf("DataParallel with the model on the CPU: %v", err)
	}
	if _, err := kiln.NewTrainer(model, kiln.WithDevices(kiln.CPU, kiln.CUDA(0))); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Fatalf("the CPU with a GPU: %v", err)
	}
	tr, err := kiln.NewTrainer(model, kiln.WithDevices(kiln.CPU), kiln.WithBucketBytes(1<<20))
	if err != nil {
		t.Fatalf("one device listed: %v", err)
	}
	tr.Close()
}

func TestPrecisionTF32NotOnCPU(t *testing.T) {
	ctx := newContext(t)
	model := must(ctx.NewModelFromText("8-4-2", kiln.CPU))
	defer model.Close()
	_, err := kiln.NewTrainer(model, kiln.WithPrecision(kiln.PrecisionTF32))
	var ke *kiln.Error
	if !errors.As(err, &ke) || ke.Status != kiln.ErrNotSupported || !strings.Contains(ke.Message, "tf32") {
		t.Fatalf("tf32 trainer on the CPU: %v", err)
	}
	if !errors.Is(err, kiln.ErrNotSupported) || errors.Is(err, kiln.ErrInvalidArgument) {
		t.Fatalf("errors.Is on %v", err)
	}
}

func TestFastPath(t *testing.T) {
	ctx := newContext(t)
	model := must(ctx.NewModelFromText("8-4-2", kiln.CPU))
	defer model.Close()
	// Any subset is accepted (the CPU has no fast path to switch off).
	for _, fp := range []kiln.FastPath{kiln.FastPathNone, kiln.FastPathAll, kiln.FastPathAll &^ kiln.FastPathGraphs} {
		must(kiln.NewTrainer(model, kiln.WithFastPath(fp))).Close()
	}
	for _, fp := range []kiln.FastPath{kiln.FastPathAll + 1, 1 << 31} {
		if _, err := kiln.NewTrainer(model, kiln.WithFastPath(fp)); !errors.Is(err, kiln.ErrInvalidArgument) {
			t.Fatalf("fast path %#x: %v", uint32(fp), err)
		}
	}
}

func TestStatuses(t *testing.T) {
	for s, name := range map[kiln.Status]string{
		kiln.ErrNotSupported: "KILN_ERROR_NOT_SUPPORTED",
		kiln.ErrBusy:         "KILN_ERROR_BUSY",
		kiln.ErrNumeric:      "KILN_ERROR_NUMERIC",
		kiln.Status(99):      "KILN_ERROR_UNKNOWN", // newer than this package
	} {
		if s.String() != name {
			t.Errorf("Status(%d) prints %q, want %q", int(s), s.String(), name)
		}
	}
	var err error = &kiln.Error{Status: 99, Message: "from the future"}
	if err.Error() != "KILN_ERROR_UNKNOWN: from the future" || !errors.Is(err, kiln.Status(99)) ||
		errors.Is(err, kiln.ErrInternal) || statusOf(err) != 99 {
		t.Fatalf("unknown status: %v", err)
	}
}

func TestDivergenceIsNumeric(t *testing.T) {
	ctx := newContext(t)
	ds, _ := dataset(t, ctx, 256, 1)
	model := must(ctx.NewModelFromText("16-32-4", kiln.CPU))
	defer model.Close()
	tr := must(kiln.NewTrainer(model, kiln.WithLR(1e30)))
	defer tr.Close()
	_, err := tr.Epoch(ds)
	for i := 0; err == nil && i < 4; i++ {
		_, err = tr.Epoch(ds)
	}
	if !errors.Is(err, kiln.ErrNumeric) || !strings.Contains(err.Error(), "KILN_ERROR_NUMERIC") {
		t.Fatalf("lr 1e30: %v", err)
	}
}
