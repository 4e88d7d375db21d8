package kiln

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/kiln-ml/kiln/bindings/go/internal/capi"
)

// Dataset is samples x [N, features...] with labels or targets y [N, ...].
type Dataset struct {
	handle
	ctx *Context
}

func (c *Context) dataset(h *uintptr, err error) (*Dataset, error) {
	if err != nil {
		return nil, err
	}
	d := &Dataset{handle{h: *h}, c}
	runtime.SetFinalizer(d, (*Dataset).Close)
	return d, nil
}

// loadedDataset is dataset for one that read its samples from files into
// memory of its own, which it counts as a tensor's buffer is (see
// noteAlloc): a byte per feature, what IDX's u8 images take and the least
// any takes, since kiln does not tell the dtype. The others share tensors or
// another dataset's data, counted there.
func (c *Context) loadedDataset(h *uintptr, err error) (*Dataset, error) {
	d, err := c.dataset(h, err)
	if err != nil {
		return nil, err
	}
	n, err1 := d.Size()
	features, err2 := d.NumFeatures()
	if err1 == nil && err2 == nil {
		d.owns(n * features)
	}
	return d, nil
}

// NewDataset references x (float or U8) and y (integer class labels [N] or
// float targets [N, k]); they are not copied.
func (c *Context) NewDataset(x, y *Tensor) (*Dataset, error) {
	defer runtime.KeepAlive(c)
	defer runtime.KeepAlive(x)
	defer runtime.KeepAlive(y)
	var h uintptr
	return c.dataset(&h, capi.Dataset_from_tensors(c.h, x.ptr(), y.ptr(), &h))
}

// LoadIDX reads an IDX image file and label file (raw or .gz). A file that
// does not exist gives an error matching fs.ErrNotExist.
func (c *Context) LoadIDX(imagesPath, labelsPath string) (*Dataset, error) {
	cImagesPath, err := textOf("imagesPath", imagesPath)
	if err != nil {
		return nil, err
	}
	cLabelsPath, err := textOf("labelsPath", labelsPath)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	var h uintptr
	err = capi.Dataset_load_idx(c.h, cImagesPath, cLabelsPath, &h)
	return c.loadedDataset(&h, withPath(err, "open", imagesPath, labelsPath))
}

// LoadMNIST reads the "train" or "test" split of an MNIST-layout directory
// (MNIST, Fashion-MNIST). A directory that does not exist gives an error
// matching fs.ErrNotExist.
func (c *Context) LoadMNIST(dir, split string) (*Dataset, error) {
	cDir, err := textOf("dir", dir)
	if err != nil {
		return nil, err
	}
	cSplit, err := textOf("split", split)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	var h uintptr
	err = capi.Dataset_load_mnist(c.h, cDir, cSplit, &h)
	return c.loadedDataset(&h, withPath(err, "open", filepath.Clean(dir)))
}

// String is "Dataset(60000 samples, 784 features, 10 classes)", or
// "Dataset(closed)".
func (d *Dataset) String() string {
	n, err1 := d.Size()
	features, err2 := d.NumFeatures()
	classes, err3 := d.NumClasses()
	return closedOr("Dataset", fmt.Sprintf("%d samples, %d features, %d classes", n, features, classes), err1, err2, err3)
}

// Close releases the dataset (its tensors live on while others use them).
// It may be called more than once, from any goroutine.
func (d *Dataset) Close() { d.release(d, capi.Dataset_release) }

func (d *Dataset) count(f func(uintptr, *int64) error) (int64, error) {
	defer runtime.KeepAlive(d)
	var n int64
	return n, f(d.h, &n)
}

// Size is the number of samples.
func (d *Dataset) Size() (int64, error) { return d.count(capi.Dataset_size) }

// NumFeatures is the number of features per sample.
func (d *Dataset) NumFeatures() (int64, error) { return d.count(capi.Dataset_num_features) }

// NumClasses is 1 + the largest label (the target width for float targets).
func (d *Dataset) NumClasses() (int64, error) { return d.count(capi.Dataset_num_classes) }

// SetNormalization makes batched features (x * scale - mean) / std.
func (d *Dataset) SetNormalization(scale, mean, std float64) error {
	defer runtime.KeepAlive(d)
	return capi.Dataset_set_normalization(d.h, scale, mean, std)
}

// Split divides the samples at random (seeded) into a training part and a
// validation part of round(size * fraction) samples; both share the data.
func (d *Dataset) Split(fraction float64, seed uint64) (train, validation *Dataset, err error) {
	defer runtime.KeepAlive(d)
	var ht, hv uintptr
	if err = capi.Dataset_split(d.h, fraction, seed, &ht, &hv); err != nil {
		return nil, nil, err
	}
	train, _ = d.ctx.dataset(&ht, nil)
	validation, _ = d.ctx.dataset(&hv, nil)
	return train, validation, nil
}

// Batch is samples [start, start+count) as normalised features and labels
// (or targets) on dev.
func (d *Dataset) Batch(start, count int64, dev Device) (x, y *Tensor, err error) {
	defer runtime.KeepAlive(d)
	var hx, hy uintptr
	if err = capi.Dataset_batch(d.h, start, count, dev.c(), &hx, &hy); err != nil {
		return nil, nil, err
	}
	x, _ = d.ctx.tensor(&hx, nil)
	y, _ = d.ctx.tensor(&hy, nil)
	return x, y, nil
}

// Batches iterates over the dataset in order, size samples at a time (the
// last batch partial), as tensors on dev: the pull form for a training loop
// of one's own, in the style of bufio.Scanner.
//
//	it := ds.Batches(64, dev)
//	defer it.Close()
//	for it.Next() {
//		loss, err := trainer.Step(it.X(), it.Y())
//		...
//	}
//	if err := it.Err(); err != nil { ... }
//
// Each batch's tensors are closed when Next moves on (and by Close), so the
// loop holds one batch of native memory; Clone a batch to keep it.
func (d *Dataset) Batches(size int64, dev Device) *BatchIterator {
	it := &BatchIterator{ds: d, size: size, dev: dev}
	it.total, it.err = d.Size()
	if it.err == nil && size < 1 {
		it.err = &Error{Status: ErrInvalidArgument, Message: "batch size must be at least 1"}
	}
	return it
}

// BatchIterator is the iteration Dataset.Batches starts.
type BatchIterator struct {
	ds         *Dataset
	dev        Device
	size, next int64
	total      int64
	x, y       *Tensor
	err        error
}

// Next moves to the next batch, closing the previous one; it is false at
// the end or on an error (see Err).
func (it *BatchIterator) Next() bool {
	it.closeBatch()
	if it.err != nil || it.next >= it.total {
		return false
	}
	n := it.size
	if rest := it.total - it.next; rest < n {
		n = rest
	}
	it.x, it.y, it.err = it.ds.Batch(it.next, n, it.dev)
	if it.err != nil {
		return false
	}
	it.next += n
	return true
}

// X is the current batch's features [n, features].
func (it *BatchIterator) X() *Tensor { return it.x }

// Y is the current batch's labels [n] or targets [n, k].
func (it *BatchIterator) Y() *Tensor { return it.y }

// Err is the error that ended the iteration, or nil at its normal end.
func (it *BatchIterator) Err() error { return it.err }

// Close releases the current batch; Next is false afterwards.
func (it *BatchIterator) Close() {
	it.closeBatch()
	it.next = it.total
}

func (it *BatchIterator) closeBatch() {
	if it.x != nil {
		it.x.Close()
		it.y.Close()
		it.x, it.y = nil, nil
	}
}
