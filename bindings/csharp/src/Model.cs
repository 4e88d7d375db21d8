using System;

namespace Kiln
{
    /// <summary>The layers of a model, built up and given to Model's constructor
    /// (which copies it).</summary>
    public sealed class ModelSpec : IDisposable
    {
        readonly ModelSpecHandle handle;

        /// <summary>An empty spec.</summary>
        public ModelSpec() { Native.Check(NativeMethods.kiln_model_spec_create(out handle)); }

        /// <summary>A spec from compact text: "784-32-10" (ReLU between layers),
        /// "784-256-10:gelu:dropout=0.2".</summary>
        public ModelSpec(string text) : this(Arg.Text(text, nameof(text))) { }

        ModelSpec(byte[] text) : this()
        {
            try { Native.Check(NativeMethods.kiln_model_spec_parse(handle, text)); }
            catch { handle.Dispose(); throw; }
        }

        /// <summary>A spec of compact text its caller checked with Arg.Text, under
        /// the caller's own parameter name.</summary>
        internal static ModelSpec FromText(byte[] text) => new ModelSpec(text);

        internal ModelSpecHandle Handle => Arg.Live(handle, this);

        /// <summary>Releases the spec.</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>Appends the layers of text after the last one (its first size must
        /// equal the last Linear's output: ArgumentException otherwise).</summary>
        public ModelSpec Parse(string text)
        {
            Native.Check(NativeMethods.kiln_model_spec_parse(Handle, Arg.Text(text, nameof(text))));
            return this;
        }

        /// <summary>Appends Linear(inFeatures, outFeatures).</summary>
        public ModelSpec AddLinear(long inFeatures, long outFeatures, bool bias = true)
        {
            Native.Check(NativeMethods.kiln_model_spec_add_linear(Handle, inFeatures, outFeatures, bias ? 1 : 0));
            return this;
        }

        /// <summary>Appends a parameterless layer; arg is LeakyRelu's slope, Elu's alpha,
        /// Softplus's beta (threshold 20) or Dropout's probability. Softmax and LogSoftmax
        /// must be the last layer.</summary>
        public ModelSpec Add(LayerKind kind, double arg = 0)
        {
            Native.Check(NativeMethods.kiln_model_spec_add(Handle, kind, arg));
            return this;
        }

        /// <summary>Add with the layer's second parameter arg2, Softplus's threshold
        /// (ignored by the others).</summary>
        public ModelSpec Add(LayerKind kind, double arg, double arg2)
        {
            Native.Check(NativeMethods.kiln_model_spec_add_v2(Handle, kind, arg, arg2));
            return this;
        }

        /// <summary>Appends Linear(sizes[0], sizes[1]), activation, ..., Linear(sizes[n-2], sizes[n-1]).</summary>
        public ModelSpec AddMlp(LayerKind activation, params long[] sizes)
        {
            Native.Check(NativeMethods.kiln_model_spec_add_mlp(Handle, Arg.NotNull(sizes, nameof(sizes)), sizes.Length, activation));
            return this;
        }
    }

    /// <summary>A sequential MLP. Forward and Predict may run on several threads at once.</summary>
    public sealed class Model : IDisposable
    {
        readonly ModelHandle handle;

        /// <summary>Wraps a new handle, whose parameters the garbage collector is
        /// told of as a tensor's storage is.</summary>
        Model(ModelHandle handle)
        {
            this.handle = handle;
            // kiln has no query for a model's dtype: its first parameter's is (a
            // model without a Linear has no parameter).
            Native.Check(NativeMethods.kiln_model_num_parameters(handle, out long parameters));
            if (parameters > 0)
            {
                Native.Check(NativeMethods.kiln_model_parameter(handle, 0, out TensorHandle first));
                using (first)
                {
                    Native.Check(NativeMethods.kiln_tensor_dtype(first, out DType dtype));
                    ParameterBytes = parameters * Library.DTypeSize(dtype);
                }
            }
            handle.Track(ParameterBytes);
        }

        /// <summary>A model of spec on device, initialised from the context's generator
        /// as PyTorch's nn.Linear, with parameters of dtype (null: kiln's default, f32;
        /// F64 on the CPU only).</summary>
        public Model(Context ctx, ModelSpec spec, Device device, DType? dtype = null)
            : this(Create(Arg.Of(ctx, nameof(ctx)), Arg.Of(spec, nameof(spec)), device, dtype)) { }

        /// <summary>A model of a compact spec ("784-32-10").</summary>
        public Model(Context ctx, string spec, Device device, DType? dtype = null)
            : this(Create(Arg.Of(ctx, nameof(ctx)), Arg.Text(spec, nameof(spec)), device, dtype)) { }

        static ModelHandle Create(ContextHandle ctx, ModelSpecHandle spec, Device device, DType? dtype)
        {
            ModelHandle h;
            Native.Check(dtype.HasValue ? NativeMethods.kiln_model_create_dtype(ctx, spec, device, dtype.Value, out h)
                                        : NativeMethods.kiln_model_create(ctx, spec, device, out h));
            return h;
        }

        static ModelHandle Create(ContextHandle ctx, byte[] spec, Device device, DType? dtype)
        {
            using (var s = ModelSpec.FromText(spec))
                return Create(ctx, s.Handle, device, dtype);
        }

        internal ModelHandle Handle => Arg.Live(handle, this);

        /// <summary>The bytes of the parameters, counted for the garbage collector.</summary>
        internal long ParameterBytes { get; }

        /// <summary>A model from a file Save wrote. FileNotFoundException when there
        /// is no such file, FormatException for a malformed one.</summary>
        public static Model Load(Context ctx, string path, Device device)
        {
            Native.Check(NativeMethods.kiln_model_load(Arg.Of(ctx, nameof(ctx)), Arg.Text(path, nameof(path)), device, out ModelHandle h), path);
            return new Model(h);
        }

        /// <summary>A model of spec from a safetensors file holding its parameters under
        /// PyTorch's nn.Sequential names ("0.weight", ...), e.g. one written by
        /// safetensors.torch.save_file(model.state_dict(), path). The dtype is the
        /// file's.</summary>
        public static Model LoadWithSpec(Context ctx, string path, ModelSpec spec, Device device)
        {
            Native.Check(NativeMethods.kiln_model_load_with_spec(Arg.Of(ctx, nameof(ctx)), Arg.Text(path, nameof(path)), Arg.Of(spec, nameof(spec)),
                                                                 device, out ModelHandle h), path);
            return new Model(h);
        }

        /// <summary>A CPU model from an ONNX file holding an MLP (Gemm or MatMul+Add, Relu,
        /// LeakyRelu, Elu, Selu, Softplus, Gelu, Tanh, Sigmoid, Identity, Dropout, Flatten or
        /// Reshape at the input, Softmax or LogSoftmax at the end, opsets 7 to 28, weights inline
        /// or in files beside it; kiln_model_import_onnx in kiln.h has the rules). Another op is NotSupportedException,
        /// a malformed file FormatException, each naming the node; NotSupportedException too when
        /// kiln was built without ONNX.</summary>
        public static Model ImportOnnx(Context ctx, string path)
        {
            Native.Check(NativeMethods.kiln_model_import_onnx(Arg.Of(ctx, nameof(ctx)), Arg.Text(path, nameof(path)), out ModelHandle h), path);
            return new Model(h);
        }

        /// <summary>Writes the model as an ONNX file (opset 13; input "input", output "logits",
        /// or "probabilities"/"log_probabilities" after an output transform, a symbolic batch
        /// dimension; Dropout left out) that ONNX Runtime runs, atomically like Save.</summary>
        public void ExportOnnx(string path) =>
            Native.Check(NativeMethods.kiln_model_export_onnx(Handle, Arg.Text(path, nameof(path))), written: path);

        /// <summary>ExportOnnx with flags: OnnxExportFlags.ExternalData writes the weights to
        /// path + ".data" beside the model.</summary>
        public void ExportOnnx(string path, OnnxExportFlags flags) =>
            Native.Check(NativeMethods.kiln_model_export_onnx_v2(Handle, Arg.Text(path, nameof(path)), (uint)flags), written: path);

        /// <summary>Releases this reference (a trainer keeps its model alive).</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>Writes the weights as safetensors, atomically.</summary>
        public void Save(string path) => Native.Check(NativeMethods.kiln_model_save(Handle, Arg.Text(path, nameof(path))), written: path);

        /// <summary>Loads weights Save wrote into this model (ArgumentException for
        /// another architecture; the weights are then unchanged).</summary>
        public void LoadWeights(string path) => Native.Check(NativeMethods.kiln_model_load_weights(Handle, Arg.Text(path, nameof(path))), path);

        /// <summary>Moves the parameters to device; trainers made before must be recreated.</summary>
        public void To(Device device) => Native.Check(NativeMethods.kiln_model_to(Handle, device));

        /// <summary>Where the parameters live.</summary>
        public Device Device { get { Native.Check(NativeMethods.kiln_model_device(Handle, out Device d)); return d; } }

        /// <summary>Dropout active (true) or evaluation mode; not while other threads run the model.</summary>
        public bool Training
        {
            get { Native.Check(NativeMethods.kiln_model_is_training(Handle, out int v)); return v != 0; }
            set { Native.Check(NativeMethods.kiln_model_set_training(Handle, value ? 1 : 0)); }
        }

        /// <summary>Scalar parameters (weights and biases).</summary>
        public long NumParameters { get { Native.Check(NativeMethods.kiln_model_num_parameters(Handle, out long n)); return n; } }
        /// <summary>Features per sample the model takes.</summary>
        public long InputSize { get { Native.Check(NativeMethods.kiln_model_input_size(Handle, out long n)); return n; } }
        /// <summary>Outputs per sample.</summary>
        public long OutputSize { get { Native.Check(NativeMethods.kiln_model_output_size(Handle, out long n)); return n; } }
        /// <summary>Parameter tensors (2 per Linear with bias).</summary>
        public long NumParameterTensors { get { Native.Check(NativeMethods.kiln_model_num_parameter_tensors(Handle, out long n)); return n; } }

        /// <summary>The spec as ModelSpec reads it back.</summary>
        public string Describe() =>
            Native.Borrowed(Handle, (out IntPtr s) => NativeMethods.kiln_model_describe(Handle, out s));

        /// <summary>Parameter index as a tensor sharing the model's storage (writes change the model).</summary>
        public Tensor Parameter(long index)
        {
            Native.Check(NativeMethods.kiln_model_parameter(Handle, index, out TensorHandle h));
            return new Tensor(h, storage: false);
        }

        /// <summary>The state_dict name of parameter index ("0.weight", ...).</summary>
        public string ParameterName(long index) =>
            Native.Borrowed(Handle, (out IntPtr s) => NativeMethods.kiln_model_parameter_name(Handle, index, out s));

        /// <summary>Logits [batch, outputs] for x [batch, inputs] on the model's device, without gradients.</summary>
        public Tensor Forward(Tensor x)
        {
            Native.Check(NativeMethods.kiln_model_forward(Handle, Arg.Of(x, nameof(x)), out TensorHandle h));
            return new Tensor(h);
        }

        /// <summary>Evaluation-mode forward pass on x from any device; the result is on the model's.</summary>
        public Tensor Predict(Tensor x, PredictKind kind = PredictKind.Logits)
        {
            Native.Check(NativeMethods.kiln_model_predict(Handle, Arg.Of(x, nameof(x)), kind, out TensorHandle h));
            return new Tensor(h);
        }

        /// <summary>"Model(784-32-10, cpu)".</summary>
        public override string ToString() => handle.IsClosed ? "Model(disposed)" : "Model(" + Describe() + ", " + Device + ")";
    }
}
