package kiln_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	kiln "github.com/kiln-ml/kiln/bindings/go"
)

// Close from many goroutines at once, racing with the finalizer's Close and
// with calls on the object: run under go test -race, which bindings/test.sh
// does.
func TestCloseRace(t *testing.T) {
	ctx := newContext(t)
	for round := 0; round < 20; round++ {
		x := must(ctx.Ones([]int64{16}, kiln.F32, kiln.CPU))
		m := must(ctx.NewModelFromText("4-3-2", kiln.CPU))
		tr := must(kiln.NewTrainer(m))
		spec := must(kiln.ParseModelSpec("4-2"))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				<-start
				if g%2 == 0 {
					_, _ = x.NumEl() // a call racing with Close: done or ErrClosed
				}
				x.Close()
				tr.Close()
				m.Close()
				spec.Close()
			}(g)
		}
		close(start)
		wg.Wait()
		if _, err := x.NumEl(); !errors.Is(err, kiln.ErrClosed) {
			t.Fatalf("NumEl after Close: %v, want ErrClosed", err)
		}
		if _, err := m.NumParameters(); !errors.Is(err, kiln.ErrClosed) {
			t.Fatalf("model after Close: %v", err)
		}
		if _, err := tr.StepsDone(); !errors.Is(err, kiln.ErrClosed) {
			t.Fatalf("trainer after Close: %v", err)
		}
		if err := spec.Parse("2-1"); !errors.Is(err, kiln.ErrClosed) {
			t.Fatalf("spec after Close: %v", err)
		}
	}
	c2 := must(kiln.NewContext())
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() { defer wg.Done(); c2.Close() }()
	}
	wg.Wait()
	if _, err := c2.Zeros([]int64{1}, kiln.F32, kiln.CPU); !errors.Is(err, kiln.ErrClosed) || errors.Is(err, kiln.ErrInvalidArgument) {
		t.Fatalf("closed context: %v", err)
	}
}

// Reads racing a Close on another goroutine either succeed or fail with
// ErrClosed: never with another status made up from a half-read tensor (a
// read that saw the element count before the Close and the dtype after it
// answered DTYPE_MISMATCH "tensor is , not f32", 3-5 times in 20,000).
func TestReadsRacingCloseAreErrClosed(t *testing.T) {
	ctx := newContext(t)
	rounds := 20000
	if raceEnabled {
		rounds = 2000
	}
	var closedSeen int
	for i := 0; i < rounds; i++ {
		x := must(ctx.Zeros([]int64{4}, kiln.F32, kiln.CPU))
		done := make(chan struct{})
		go func() { x.Close(); close(done) }()
		reads := map[string]error{
			"ToSlice": second(kiln.ToSlice[float32](x)),
			"Shape":   second(x.Shape()),
		}
		if s := x.String(); s != "Tensor(closed)" && s != "Tensor(shape=[4], dtype=f32, device=cpu)" {
			t.Fatalf("round %d: a tensor racing Close prints %q", i, s)
		}
		<-done
		for name, err := range reads {
			if err == nil {
				continue
			}
			if !errors.Is(err, kiln.ErrClosed) {
				t.Fatalf("round %d: %s racing Close: %v, want ErrClosed", i, name, err)
			}
			closedSeen++
		}
	}
	t.Logf("%d rounds, %d reads answered ErrClosed", rounds, closedSeen)
}

func TestClosedIsSpecific(t *testing.T) {
	ctx := newContext(t)
	x := must(ctx.Ones([]int64{2, 2}, kiln.F32, kiln.CPU))
	x.Close()
	for name, err := range map[string]error{
		"ToSlice":  second(kiln.ToSlice[float32](x)),
		"Add":      second(x.Add(x)),
		"Dim":      second(x.Dim(0)),
		"CopyFrom": kiln.CopyFrom(x, []float32{1, 2, 3, 4}),
	} {
		var ke *kiln.Error
		if !errors.Is(err, kiln.ErrClosed) || !errors.As(err, &ke) || ke.Message == "" {
			t.Errorf("%s on a closed tensor: %v", name, err)
		}
	}
	if s := x.String(); s != "Tensor(closed)" {
		t.Errorf("closed tensor prints %q", s)
	}
}

func second[T any](_ T, err error) error { return err }

func TestTensorString(t *testing.T) {
	ctx := newContext(t)
	x := must(ctx.Zeros([]int64{2, 3}, kiln.I64, kiln.CPU))
	defer x.Close()
	if got, want := x.String(), "Tensor(shape=[2 3], dtype=i64, device=cpu)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	s := must(ctx.Full(nil, kiln.F64, kiln.CPU, 2.5))
	defer s.Close()
	if got := s.String(); got != "Tensor(shape=[], dtype=f64, device=cpu)" {
		t.Fatalf("scalar prints %q", got)
	}
	if v := must(s.Item()); v != 2.5 {
		t.Fatalf("item %v", v)
	}
}

// Every object prints what it is, as the Tensor does, instead of its raw
// struct fields; and "closed" once closed.
func TestObjectStrings(t *testing.T) {
	ctx := must(kiln.NewContext(kiln.WithSeed(1), kiln.WithCUDA(false)))
	defer ctx.Close()
	m := must(ctx.NewModelFromText("4-3-3", kiln.CPU))
	x := must(kiln.FromSlice(ctx, make([]float32, 40), []int64{10, 4}, kiln.CPU))
	y := must(kiln.FromSlice(ctx, []int64{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, []int64{10}, kiln.CPU))
	ds := must(ctx.NewDataset(x, y))
	tr := must(kiln.NewTrainer(m, kiln.WithLR(0.5), kiln.WithBatchSize(4)))
	must(tr.Epoch(ds))
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{ctx, "Context(default device cpu)"},
		{m, "Model(4-3-3, 27 parameters, f32, cpu)"}, // 4*3+3 + 3*3+3
		{ds, "Dataset(10 samples, 4 features, 3 classes)"},
		{tr, "Trainer(1 epochs, 3 steps done, lr 0.5)"}, // 10 samples in batches of 4
	} {
		if s := fmt.Sprint(c.got); s != c.want {
			t.Errorf("prints %q, want %q", s, c.want)
		}
	}
	tr.Close()
	ds.Close()
	m.Close()
	x.Close()
	y.Close()
	ctx.Close()
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{{ctx, "Context(closed)"}, {m, "Model(closed)"}, {ds, "Dataset(closed)"}, {tr, "Trainer(closed)"}} {
		if s := c.got.String(); s != c.want {
			t.Errorf("closed prints %q, want %q", s, c.want)
		}
	}
}

func TestNotExist(t *testing.T) {
	ctx := newContext(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.safetensors")
	m := must(ctx.NewModelFromText("4-2", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m))
	defer tr.Close()
	spec := must(kiln.ParseModelSpec("4-2"))
	defer spec.Close()
	for name, err := range map[string]error{
		"LoadModel":         second(ctx.LoadModel(missing, kiln.CPU)),
		"LoadModelWithSpec": second(ctx.LoadModelWithSpec(missing, spec, kiln.CPU)),
		"LoadWeights":       m.LoadWeights(missing),
		"LoadCheckpoint":    tr.LoadCheckpoint(missing),
		"LoadIDX":           second(ctx.LoadIDX(missing, missing)),
		"LoadMNIST":         second(ctx.LoadMNIST(filepath.Join(dir, "nodir"), "train")),
		"Save":              m.Save(filepath.Join(dir, "nodir", "m.safetensors")),
		"SaveCheckpoint":    tr.SaveCheckpoint(filepath.Join(dir, "nodir", "c.safetensors")),
	} {
		var pe *fs.PathError
		if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, kiln.ErrIO) || !errors.As(err, &pe) {
			t.Errorf("%s: %v: want ErrIO matching fs.ErrNotExist", name, err)
		}
	}
	// A file that is there but malformed is ErrFormat, not "not exist".
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, []byte("\xff\xff\xff\xff\xff\xff\xff\x7fnot safetensors"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ctx.LoadModel(bad, kiln.CPU)
	if !errors.Is(err, kiln.ErrFormat) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("hostile file: %v", err)
	}
	// A directory is there but is not a regular file: ErrIO, not "not exist".
	_, err = ctx.LoadModel(dir, kiln.CPU)
	if !errors.Is(err, kiln.ErrIO) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("directory: %v", err)
	}
}

func TestSentinels(t *testing.T) {
	ctx := newContext(t)
	a := must(ctx.Zeros([]int64{2, 3}, kiln.F32, kiln.CPU))
	defer a.Close()
	_, err := a.Matmul(a)
	if !errors.Is(err, kiln.ErrShapeMismatch) || errors.Is(err, kiln.ErrClosed) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("[2,3]x[2,3]: %v", err)
	}
	b := must(ctx.Zeros([]int64{2, 3}, kiln.I64, kiln.CPU))
	defer b.Close()
	if _, err := a.Add(b); !errors.Is(err, kiln.ErrDTypeMismatch) {
		t.Fatalf("f32 + i64: %v", err)
	}
	if kiln.ErrCommunication.String() != "KILN_ERROR_COMMUNICATION" || kiln.ErrClosed.String() != "KILN_ERROR_INVALID_HANDLE" {
		t.Fatalf("names %v %v", kiln.ErrCommunication, kiln.ErrClosed)
	}
	if kiln.F64.String() != "f64" || kiln.BF16.Size() != 2 || kiln.I64.Size() != 8 {
		t.Fatalf("dtypes %v %d %d", kiln.F64, kiln.BF16.Size(), kiln.I64.Size())
	}
}

// The functions the C API gained for issue 13's list: dim, get_device,
// is_pinned, empty, empty_pinned, is_training and f64 models.
func TestNewQueries(t *testing.T) {
	ctx := newContext(t)
	x := must(ctx.Empty([]int64{3, 5, 2}, kiln.F32, kiln.CPU))
	defer x.Close()
	for dim, want := range map[int]int64{0: 3, 1: 5, 2: 2, -1: 2, -3: 3} {
		if got := must(x.Dim(dim)); got != want {
			t.Errorf("Dim(%d) = %d, want %d", dim, got, want)
		}
	}
	if _, err := x.Dim(3); !errors.Is(err, kiln.ErrInvalidArgument) {
		t.Errorf("Dim(3) of a 3-d tensor: %v", err)
	}
	if i := must(x.DeviceIndex()); i != -1 {
		t.Errorf("DeviceIndex on the CPU = %d", i)
	}
	if must(x.IsPinned()) {
		t.Error("Empty is pinned")
	}
	p := must(ctx.EmptyPinned([]int64{4}, kiln.F32))
	defer p.Close()
	v := must(p.Reshape(2, 2))
	defer v.Close()
	if !must(p.IsPinned()) || !must(v.IsPinned()) {
		t.Error("EmptyPinned (or its view) is not pinned")
	}

	spec := must(kiln.ParseModelSpec("3-4-2"))
	defer spec.Close()
	m := must(ctx.NewModelOf(spec, kiln.CPU, kiln.F64))
	defer m.Close()
	w, name := must2(m.Parameter(0))
	defer w.Close()
	if w.DType() != kiln.F64 || name != "0.weight" || must(w.Dim(0)) != 4 || must(w.Dim(1)) != 3 {
		t.Fatalf("f64 model parameter %v %q", w, name)
	}
	if _, err := ctx.NewModelOf(spec, kiln.CPU, kiln.I32); !errors.Is(err, kiln.ErrInvalidArgument) && !errors.Is(err, kiln.ErrNotSupported) && !errors.Is(err, kiln.ErrDTypeMismatch) {
		t.Fatalf("i32 model: %v", err)
	}
	if !must(m.IsTraining()) {
		t.Fatal("a new model is not in training mode")
	}
	if err := m.SetTraining(false); err != nil || must(m.IsTraining()) {
		t.Fatalf("SetTraining(false): %v", err)
	}
	// f64 logits against a float64 forward pass written here.
	xs := []float64{0.5, -1, 2, 1.5, 0.25, -0.75}
	in := must(kiln.FromSlice(ctx, xs, []int64{2, 3}, kiln.CPU))
	defer in.Close()
	out := must(m.Forward(in))
	defer out.Close()
	got := must(kiln.ToSlice[float64](out))
	want := referenceForward(t, m, xs, 2)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("logit %d = %v, reference %v", i, got[i], want[i])
		}
	}
	// LoadModelWithSpec reads the file Save wrote, by parameter name.
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded := must(ctx.LoadModelWithSpec(path, spec, kiln.CPU))
	defer loaded.Close()
	out2 := must(loaded.Forward(in))
	defer out2.Close()
	if got2 := must(kiln.ToSlice[float64](out2)); got2[0] != got[0] || got2[3] != got[3] {
		t.Fatalf("reloaded logits %v, want %v", got2, got)
	}
	wrong := must(kiln.ParseModelSpec("3-5-2"))
	defer wrong.Close()
	if _, err := ctx.LoadModelWithSpec(path, wrong, kiln.CPU); !errors.Is(err, kiln.ErrShapeMismatch) {
		t.Fatalf("spec 3-5-2 on a 3-4-2 file: %v", err)
	}
}

// referenceForward computes Linear-ReLU-Linear in float64 from the model's
// parameters.
func referenceForward(t *testing.T, m *kiln.Model, x []float64, batch int) []float64 {
	params := make([][]float64, 4)
	shapes := make([][]int64, 4)
	for i := range params {
		p, _ := must2(m.Parameter(i))
		params[i] = must(kiln.ToSlice[float64](p))
		shapes[i] = must(p.Shape())
		p.Close()
	}
	layer := func(in []float64, w, b []float64, shape []int64, relu bool) []float64 {
		outN, inN := int(shape[0]), int(shape[1])
		out := make([]float64, batch*outN)
		for r := 0; r < batch; r++ {
			for o := 0; o < outN; o++ {
				s := b[o]
				for k := 0; k < inN; k++ {
					s += in[r*inN+k] * w[o*inN+k]
				}
				if relu && s < 0 {
					s = 0
				}
				out[r*outN+o] = s
			}
		}
		return out
	}
	h := layer(x, params[0], params[1], shapes[0], true)
	return layer(h, params[2], params[3], shapes[2], false)
}

func TestBatchIterator(t *testing.T) {
	ctx := newContext(t)
	const n = 10
	xs, ys := blobs(n, 16, 4, 7)
	x := must(kiln.FromSlice(ctx, xs, []int64{n, 16}, kiln.CPU))
	defer x.Close()
	y := must(kiln.FromSlice(ctx, ys, []int64{n}, kiln.CPU))
	defer y.Close()
	ds := must(ctx.NewDataset(x, y))
	defer ds.Close()
	it := ds.Batches(4, kiln.CPU)
	defer it.Close()
	var sizes []int64
	var labels []int64
	var firstFeature []float32
	for it.Next() {
		sizes = append(sizes, must(it.X().Dim(0)))
		labels = append(labels, must(kiln.ToSlice[int64](it.Y()))...)
		firstFeature = append(firstFeature, must(kiln.ToSlice[float32](it.X()))[0])
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 || sizes[0] != 4 || sizes[1] != 4 || sizes[2] != 2 {
		t.Fatalf("batch sizes %v, want [4 4 2]", sizes)
	}
	for i := range ys {
		if labels[i] != ys[i] {
			t.Fatalf("labels %v, want %v", labels, ys)
		}
	}
	for b, v := range firstFeature {
		if v != xs[b*4*16] {
			t.Fatalf("batch %d starts with %v, want %v", b, v, xs[b*4*16])
		}
	}
	if it.Next() {
		t.Fatal("Next after the end")
	}
	// A training loop of one's own: Step over the batches lowers the loss.
	m := must(ctx.NewModelFromText("16-8-4", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m, kiln.WithOptimizer(kiln.Adam), kiln.WithLR(0.05)))
	defer tr.Close()
	var first, last float64
	for epoch := 0; epoch < 30; epoch++ {
		it := ds.Batches(5, kiln.CPU)
		sum := 0.0
		for it.Next() {
			sum += must(tr.Step(it.X(), it.Y()))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		if epoch == 0 {
			first = sum
		}
		last = sum
	}
	if last > first/4 || must(tr.StepsDone()) != 60 {
		t.Fatalf("loss %v -> %v over %d steps", first, last, must(tr.StepsDone()))
	}
	bad := ds.Batches(0, kiln.CPU)
	if bad.Next() || !errors.Is(bad.Err(), kiln.ErrInvalidArgument) {
		t.Fatalf("batch size 0: %v", bad.Err())
	}
	ds.Close()
	closed := ds.Batches(4, kiln.CPU)
	if closed.Next() || !errors.Is(closed.Err(), kiln.ErrClosed) {
		t.Fatalf("closed dataset: %v", closed.Err())
	}
}

func progressSetup(t *testing.T, opts ...kiln.TrainerOption) (*kiln.Trainer, *kiln.Dataset, *kiln.Dataset) {
	ctx := newContext(t)
	data, _ := dataset(t, ctx, 256, 1)
	train, val := must2(data.Split(0.25, 1))
	t.Cleanup(train.Close)
	t.Cleanup(val.Close)
	m := must(ctx.NewModelFromText("16-8-4", kiln.CPU))
	t.Cleanup(m.Close)
	tr := must(kiln.NewTrainer(m, append([]kiln.TrainerOption{kiln.WithBatchSize(32), kiln.WithShuffleSeed(1)}, opts...)...))
	t.Cleanup(tr.Close)
	return tr, train, val
}

func TestFitProgress(t *testing.T) {
	tr, train, val := progressSetup(t, kiln.WithProgressInterval(2))
	var reports []kiln.Progress
	hist, err := tr.Fit(context.Background(), train, val, 3, kiln.OnProgress(func(p kiln.Progress) error {
		reports = append(reports, p)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	// 192 training samples in batches of 32: 6 batches, reports after 2 and 4
	// within each epoch, and at its end the epoch's report.
	if len(hist) != 3 || len(reports) != 3*3 {
		t.Fatalf("%d epochs, %d reports", len(hist), len(reports))
	}
	for i, p := range reports {
		epoch := i/3 + 1
		if p.Epoch != epoch || p.Epochs != 3 || p.Batches != 6 {
			t.Fatalf("report %d: %+v", i, p)
		}
		if i%3 < 2 {
			if p.Phase != kiln.PhaseBatch || p.Batch != int64(2*(i%3+1)) || p.Stats != nil || p.Loss <= 0 {
				t.Fatalf("batch report %d: %+v", i, p)
			}
		} else if p.Phase != kiln.PhaseEpoch || p.Stats == nil || *p.Stats != hist[epoch-1] {
			t.Fatalf("epoch report %d: %+v, history %+v", i, p, hist[epoch-1])
		}
	}
}

func TestFitCancel(t *testing.T) {
	tr, train, val := progressSetup(t)
	// Cancelled from the callback at the end of epoch 2: Fit stops there.
	cctx, cancel := context.WithCancel(context.Background())
	_, err := tr.Fit(cctx, train, val, 10, kiln.OnProgress(func(p kiln.Progress) error {
		if p.Epoch == 2 {
			cancel()
		}
		return nil
	}))
	if !errors.Is(err, context.Canceled) || must(tr.EpochsDone()) != 2 {
		t.Fatalf("cancel at epoch 2: %v after %d epochs", err, must(tr.EpochsDone()))
	}
	// Already cancelled: nothing runs.
	if _, err := tr.Fit(cctx, train, val, 1); !errors.Is(err, context.Canceled) || must(tr.EpochsDone()) != 2 {
		t.Fatalf("cancelled context: %v", err)
	}
	// A deadline, from another goroutine, within batches.
	tr2, train2, _ := progressSetup(t, kiln.WithProgressInterval(1))
	dctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	startedAt := time.Now()
	_, err = tr2.Fit(dctx, train2, nil, 1_000_000, kiln.OnProgress(func(kiln.Progress) error { return nil }))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(startedAt) > 10*time.Second {
		t.Fatalf("deadline: %v after %v", err, time.Since(startedAt))
	}
	// The callback's own error stops training and is what Fit returns.
	stop := errors.New("enough")
	tr3, train3, _ := progressSetup(t)
	_, err = tr3.Fit(context.Background(), train3, nil, 5, kiln.OnProgress(func(p kiln.Progress) error {
		if p.Epoch == 1 {
			return stop
		}
		return nil
	}))
	if err != stop || must(tr3.EpochsDone()) != 1 {
		t.Fatalf("callback error: %v", err)
	}
	// The trainer is usable afterwards.
	if h := must(tr3.Fit(context.Background(), train3, nil, 1)); len(h) != 1 || h[0].Epoch != 2 {
		t.Fatalf("fit after a stop: %+v", h)
	}
}

func TestFitCallbackReentryAndPanic(t *testing.T) {
	tr, train, _ := progressSetup(t)
	x, y := must2(train.Batch(0, 4, kiln.CPU))
	defer x.Close()
	defer y.Close()
	var stepErr error
	var lr float64
	_, err := tr.Fit(context.Background(), train, nil, 1, kiln.OnProgress(func(kiln.Progress) error {
		_, stepErr = tr.Step(x, y)
		lr = must(tr.CurrentLR())
		return nil
	}))
	if err != nil || !errors.Is(stepErr, kiln.ErrBusy) || lr != 0.01 {
		t.Fatalf("Step inside the callback: %v (fit: %v, lr %v)", stepErr, err, lr)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("recovered %v, want the callback's panic", v)
			}
		}()
		_, _ = tr.Fit(context.Background(), train, nil, 3, kiln.OnProgress(func(kiln.Progress) error { panic("boom") }))
		t.Fatal("Fit returned after its callback panicked")
	}()
	// kiln unwound normally: the trainer is not left busy.
	if _, err := tr.Step(x, y); err != nil {
		t.Fatalf("step after a panicking callback: %v", err)
	}
}

func TestLogger(t *testing.T) {
	var mu sync.Mutex
	var records []string
	levels := map[kiln.LogLevel]int{}
	ctx, err := kiln.NewContext(kiln.WithLogLevel(kiln.LogDebug), kiln.WithLogger(func(level kiln.LogLevel, msg string) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, msg)
		levels[level]++
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	m := must(ctx.NewModelFromText("16-3-4", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m))
	defer tr.Close()
	ds, _ := dataset(t, ctx, 8, 1)
	must(tr.Epoch(ds)) // compiles the step, which kiln logs at debug level
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(records, "\n")
	if !strings.Contains(joined, "CUDA") || !strings.Contains(joined, "compiled") || levels[kiln.LogDebug] == 0 {
		t.Fatalf("records at debug level: %q", records)
	}
	for _, r := range records {
		if r == "" || strings.HasSuffix(r, "\n") {
			t.Fatalf("record %q", r)
		}
	}
}

// A logger that panics loses the record, not the program.
func TestLoggerPanic(t *testing.T) {
	ctx, err := kiln.NewContext(kiln.WithLogLevel(kiln.LogDebug), kiln.WithLogger(func(kiln.LogLevel, string) { panic("no") }))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	m := must(ctx.NewModelFromText("4-3-2", kiln.CPU))
	defer m.Close()
	must(kiln.NewTrainer(m)).Close()
}

// A string with a NUL byte would reach C cut at the NUL, naming another
// file, device or spec than the caller's: every string argument refuses it,
// naming the argument, and nothing is read or written.
func TestNULInStrings(t *testing.T) {
	ctx := newContext(t)
	dir := t.TempDir()
	images, labels := writeMNIST(t, dir, 8)
	m := must(ctx.NewModelFromText("4-2", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m))
	defer tr.Close()
	spec := must(kiln.ParseModelSpec("4-2"))
	defer spec.Close()
	saved, checkpoint := filepath.Join(dir, "m.safetensors"), filepath.Join(dir, "c.safetensors")
	if err := m.Save(saved); err != nil {
		t.Fatal(err)
	}
	if err := tr.SaveCheckpoint(checkpoint); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut") // what the paths written below would be cut to
	for name, c := range map[string]struct {
		err error
		arg string
	}{
		"ParseDevice":       {second(ctx.ParseDevice("cpu\x00garbage")), "text"},
		"ParseModelSpec":    {second(kiln.ParseModelSpec("4-2\x00-3")), "text"},
		"NewModelFromText":  {second(ctx.NewModelFromText("4-2\x00-3", kiln.CPU)), "text"},
		"LoadModel":         {second(ctx.LoadModel(saved+"\x00.bak", kiln.CPU)), "path"},
		"LoadModelWithSpec": {second(ctx.LoadModelWithSpec(saved+"\x00.bak", spec, kiln.CPU)), "path"},
		"LoadWeights":       {m.LoadWeights(saved + "\x00.bak"), "path"},
		"LoadCheckpoint":    {tr.LoadCheckpoint(checkpoint + "\x00.bak"), "path"},
		"ImportONNX":        {second(ctx.ImportONNX(cut + ".onnx\x00.bak")), "path"},
		"Save":              {m.Save(cut + ".safetensors\x00.bak"), "path"},
		"SaveCheckpoint":    {tr.SaveCheckpoint(cut + ".ckpt\x00.bak"), "path"},
		"ExportONNX":        {m.ExportONNX(cut + ".onnx\x00.bak"), "path"},
		"ExportONNXWith":    {m.ExportONNXWith(cut+".onnx\x00.bak", kiln.ONNXExportExternalData), "path"},
		"LoadIDX images":    {second(ctx.LoadIDX(images+"\x00.bak", labels)), "imagesPath"},
		"LoadIDX labels":    {second(ctx.LoadIDX(images, labels+"\x00.bak")), "labelsPath"},
		"LoadMNIST dir":     {second(ctx.LoadMNIST(dir+"\x00.bak", "train")), "dir"},
		"LoadMNIST split":   {second(ctx.LoadMNIST(dir, "train\x00.bak")), "split"},
	} {
		var ke *kiln.Error
		if !errors.Is(c.err, kiln.ErrInvalidArgument) || !errors.As(c.err, &ke) ||
			!strings.HasPrefix(ke.Message, c.arg+" ") || !strings.HasSuffix(ke.Message, "contains a NUL byte") {
			t.Errorf("%s: %v, want ErrInvalidArgument saying %s contains a NUL byte", name, c.err, c.arg)
		}
	}
	if written, _ := filepath.Glob(cut + "*"); len(written) != 0 {
		t.Errorf("paths cut at the NUL were written: %v", written)
	}
}

// A nil object passed as an argument is kiln's ErrInvalidArgument with a
// message, not a panic; so are bad option values.
func TestNilAndBadArguments(t *testing.T) {
	ctx := newContext(t)
	x := must(ctx.Ones([]int64{2, 16}, kiln.F32, kiln.CPU))
	defer x.Close()
	m := must(ctx.NewModelFromText("16-4", kiln.CPU))
	defer m.Close()
	tr := must(kiln.NewTrainer(m))
	defer tr.Close()
	ds, _ := dataset(t, ctx, 8, 1)
	for name, err := range map[string]error{
		"Add(nil)":                 second(x.Add(nil)),
		"Matmul(nil)":              second(x.Matmul(nil)),
		"Compare(nil)":             second(x.Compare(kiln.OpEq, nil)),
		"NewDataset(nil, nil)":     second(ctx.NewDataset(nil, nil)),
		"NewModel(nil)":            second(ctx.NewModel(nil, kiln.CPU)),
		"NewModelOf(nil)":          second(ctx.NewModelOf(nil, kiln.CPU, kiln.F64)),
		"LoadModelWithSpec(nil)":   second(ctx.LoadModelWithSpec("x", nil, kiln.CPU)),
		"Forward(nil)":             second(m.Forward(nil)),
		"Predict(nil)":             second(m.Predict(nil, kiln.PredictClasses)),
		"Loss(nil, nil)":           second(kiln.Loss(kiln.MSE, nil, nil)),
		"Step(nil, nil)":           second(tr.Step(nil, nil)),
		"Epoch(nil)":               second(tr.Epoch(nil)),
		"Fit(nil)":                 second(tr.Fit(context.Background(), nil, nil, 1)),
		"Fit(0 epochs)":            second(tr.Fit(context.Background(), ds, nil, 0)),
		"Evaluate(nil)":            third(tr.Evaluate(nil)),
		"AttachCommunicator(nil)":  tr.AttachCommunicator(nil),
		"WithProgressInterval(-1)": second(kiln.NewTrainer(m, kiln.WithProgressInterval(-1))),
		"WithBucketBytes(-1)":      second(kiln.NewTrainer(m, kiln.WithBucketBytes(-1))),
		"WithLogLevel(99)":         second(kiln.NewContext(kiln.WithLogLevel(99))),
	} {
		var ke *kiln.Error
		if !errors.Is(err, kiln.ErrInvalidArgument) || !errors.As(err, &ke) || ke.Message == "" {
			t.Errorf("%s: %v, want ErrInvalidArgument with a message", name, err)
		}
	}
	// The package-level functions take their object as an argument too: kiln's
	// message names it, as it names the C parameter.
	for name, c := range map[string]struct {
		call func() error
		want string
	}{
		"FromSlice(nil)":  {func() error { return second(kiln.FromSlice(nil, []float32{1}, []int64{1}, kiln.CPU)) }, "ctx is NULL"},
		"ToSlice(nil)":    {func() error { return second(kiln.ToSlice[float32](nil)) }, "tensor is NULL"},
		"CopyFrom(nil)":   {func() error { return kiln.CopyFrom[float32](nil, []float32{1}) }, "tensor is NULL"},
		"NewTrainer(nil)": {func() error { return second(kiln.NewTrainer(nil, kiln.WithLR(0.1))) }, "model is NULL"},
	} {
		var ke *kiln.Error
		if err := recovered(c.call); !errors.Is(err, kiln.ErrInvalidArgument) || !errors.As(err, &ke) ||
			!strings.Contains(ke.Message, c.want) {
			t.Errorf("%s: %v, want ErrInvalidArgument saying %q", name, err, c.want)
		}
	}
	// The objects are still usable.
	if _, err := tr.Step(x, must(ctx.Zeros([]int64{2}, kiln.I64, kiln.CPU))); err != nil {
		t.Fatal(err)
	}
}

func third[A, B any](_ A, _ B, err error) error { return err }

// recovered is call's error, or its panic as an error, so that one case
// that panics does not hide the others.
func recovered(call func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return call()
}
