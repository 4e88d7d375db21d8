using System;
using System.Collections.Generic;

namespace Kiln
{
    /// <summary>A batch of samples: features X and labels or targets Y. Disposing
    /// it disposes both.</summary>
    public readonly struct Batch : IDisposable
    {
        /// <summary>A batch of x and y.</summary>
        public Batch(Tensor x, Tensor y)
        {
            X = Arg.NotNull(x, nameof(x));
            Y = Arg.NotNull(y, nameof(y));
        }
        /// <summary>Features [count, features].</summary>
        public Tensor X { get; }
        /// <summary>Labels [count] or targets [count, k].</summary>
        public Tensor Y { get; }
        /// <summary>Disposes X and Y.</summary>
        public void Dispose()
        {
            X?.Dispose();
            Y?.Dispose();
        }
    }

    /// <summary>Samples x [N, features...] and labels or targets y.</summary>
    public sealed class Dataset : IDisposable
    {
        readonly DatasetHandle handle;

        Dataset(DatasetHandle handle) { this.handle = handle; }

        /// <summary>References x (float or byte) and y (integer labels [N] or float
        /// targets [N, k]) of ctx without copying them.</summary>
        public Dataset(Context ctx, Tensor x, Tensor y)
        {
            Native.Check(NativeMethods.kiln_dataset_from_tensors(Arg.Of(ctx, nameof(ctx)), Arg.Of(x, nameof(x)), Arg.Of(y, nameof(y)), out handle));
        }

        /// <summary>A dataset that read its samples from files into memory of its
        /// own, which the garbage collector is told of as a tensor's storage is: a
        /// byte per feature, what IDX images take, since kiln does not tell the
        /// dtype. The others share tensors or another dataset's samples, counted there.</summary>
        static Dataset Loaded(DatasetHandle h)
        {
            var d = new Dataset(h);
            h.Track(d.Count * d.NumFeatures);
            return d;
        }

        /// <summary>The "train" or "test" split of an MNIST-layout directory.</summary>
        public static Dataset LoadMnist(Context ctx, string dir, string split)
        {
            Native.Check(NativeMethods.kiln_dataset_load_mnist(Arg.Of(ctx, nameof(ctx)), Arg.Text(dir, nameof(dir)), Arg.Text(split, nameof(split)),
                                                               out DatasetHandle h), dir);
            return Loaded(h);
        }

        /// <summary>An IDX image file and label file, raw or gzip (told apart by their first bytes).</summary>
        public static Dataset LoadIdx(Context ctx, string images, string labels)
        {
            Status s = NativeMethods.kiln_dataset_load_idx(Arg.Of(ctx, nameof(ctx)), Arg.Text(images, nameof(images)),
                                                           Arg.Text(labels, nameof(labels)), out DatasetHandle h);
            Native.Check(s, Native.Exists(images) ? labels : images);
            return Loaded(h);
        }

        internal DatasetHandle Handle => Arg.Live(handle, this);

        /// <summary>Releases this reference (splits and trainers keep theirs).</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>"Dataset(60000 samples, 784 features, 10 classes)", or
        /// "Dataset(disposed)".</summary>
        public override string ToString() =>
            handle.IsClosed ? "Dataset(disposed)" : $"Dataset({Count} samples, {NumFeatures} features, {NumClasses} classes)";

        /// <summary>The number of samples.</summary>
        public long Count { get { Native.Check(NativeMethods.kiln_dataset_size(Handle, out long n)); return n; } }
        /// <summary>Features per sample.</summary>
        public long NumFeatures { get { Native.Check(NativeMethods.kiln_dataset_num_features(Handle, out long n)); return n; } }
        /// <summary>1 + the largest label, or the target width.</summary>
        public long NumClasses { get { Native.Check(NativeMethods.kiln_dataset_num_classes(Handle, out long n)); return n; } }

        /// <summary>Batched features become (x * scale - mean) / std.</summary>
        public void SetNormalization(double scale, double mean, double std) =>
            Native.Check(NativeMethods.kiln_dataset_set_normalization(Handle, scale, mean, std));

        /// <summary>A seeded random split; both parts share the data.</summary>
        public (Dataset Train, Dataset Validation) Split(double validationFraction, ulong seed)
        {
            Native.Check(NativeMethods.kiln_dataset_split(Handle, validationFraction, seed, out DatasetHandle t,
                                                          out DatasetHandle v));
            return (new Dataset(t), new Dataset(v));
        }

        /// <summary>Samples [start, start+count) as normalised f32 x and labels y on device.</summary>
        public Batch Batch(long start, long count, Device device)
        {
            Native.Check(NativeMethods.kiln_dataset_batch(Handle, start, count, device, out TensorHandle x, out TensorHandle y));
            var tx = new Tensor(x);
            return new Batch(tx, new Tensor(y));
        }

        /// <summary>The batches of batchSize samples in order (the last one partial),
        /// made as the enumeration reaches them; the caller disposes each.</summary>
        public IEnumerable<Batch> Batches(long batchSize, Device device)
        {
            if (batchSize < 1) throw new ArgumentOutOfRangeException(nameof(batchSize), batchSize, "must be at least 1");
            return BatchesFrom(Count, batchSize, device);
        }

        IEnumerable<Batch> BatchesFrom(long count, long batchSize, Device device)
        {
            for (long start = 0; start < count;)
            {
                // What is left, not batchSize: start + batchSize can overflow.
                long size = Math.Min(batchSize, count - start);
                yield return Batch(start, size, device);
                start += size;
            }
        }
    }
}
