using System;

namespace Kiln
{
    /// <summary>The layers of a model, built up and given to Model's constructor.</summary>
    public sealed class ModelSpec : IDisposable
    {
        internal readonly ModelSpecHandle Handle;

        public ModelSpec() { NativeMethods.model_spec_create(out Handle); }

        /// <summary>A spec from compact text: "784-32-10" (ReLU between layers),
        /// "784-256-10:gelu:dropout=0.2".</summary>
        public ModelSpec(string text) : this() { Parse(text); }

        public void Dispose() => Handle.Dispose();

        public ModelSpec Parse(string text) { NativeMethods.model_spec_parse(Handle, text); return this; }
        public ModelSpec AddLinear(long inFeatures, long outFeatures, bool bias = true)
        {
            NativeMethods.model_spec_add_linear(Handle, inFeatures, outFeatures, bias ? 1 : 0);
            return this;
        }
        /// <summary>A parameterless layer; arg is LeakyReLU's slope or Dropout's probability.</summary>
        public ModelSpec Add(LayerKind kind, double arg = 0) { NativeMethods.model_spec_add(Handle, kind, arg); return this; }
        public ModelSpec AddMlp(LayerKind activation, params long[] sizes)
        {
            NativeMethods.model_spec_add_mlp(Handle, sizes, sizes.Length, activation);
            return this;
        }
    }

    /// <summary>A sequential MLP. Forward and Predict may run on several threads at once.</summary>
    public sealed class Model : IDisposable
    {
        internal readonly ModelHandle Handle;

        Model(ModelHandle handle) { Handle = handle; }

        /// <summary>A model initialised from the context's generator as PyTorch's nn.Linear.</summary>
        public Model(Context ctx, ModelSpec spec, Device device)
        {
            NativeMethods.model_create(ctx.Handle, spec.Handle, device, out Handle);
        }

        public Model(Context ctx, string spec, Device device)
        {
            using (var s = new ModelSpec(spec)) NativeMethods.model_create(ctx.Handle, s.Handle, device, out Handle);
        }

        /// <summary>A model from a file Save wrote.</summary>
        public static Model Load(Context ctx, string path, Device device)
        {
            NativeMethods.model_load(ctx.Handle, path, device, out ModelHandle h);
            return new Model(h);
        }

        /// <summary>Releases this reference (a trainer keeps its model alive).</summary>
        public void Dispose() => Handle.Dispose();

        /// <summary>Writes the weights as safetensors, atomically.</summary>
        public void Save(string path) => NativeMethods.model_save(Handle, path);
        public void LoadWeights(string path) => NativeMethods.model_load_weights(Handle, path);
        public void To(Device device) => NativeMethods.model_to(Handle, device);
        public Device Device { get { NativeMethods.model_device(Handle, out Device d); return d; } }

        /// <summary>Dropout active (true) or evaluation mode; not while other threads run the model.</summary>
        public bool Training
        {
            get { NativeMethods.model_is_training(Handle, out int v); return v != 0; }
            set { NativeMethods.model_set_training(Handle, value ? 1 : 0); }
        }

        public long NumParameters { get { NativeMethods.model_num_parameters(Handle, out long n); return n; } }
        public long InputSize { get { NativeMethods.model_input_size(Handle, out long n); return n; } }
        public long OutputSize { get { NativeMethods.model_output_size(Handle, out long n); return n; } }
        public long NumParameterTensors { get { NativeMethods.model_num_parameter_tensors(Handle, out long n); return n; } }

        /// <summary>The spec as ModelSpec reads it.</summary>
        public string Describe()
        {
            NativeMethods.model_describe(Handle, out string s);
            GC.KeepAlive(this); // the string is owned by the model
            return s;
        }

        /// <summary>Parameter i as a tensor sharing the model's storage.</summary>
        public Tensor Parameter(long index)
        {
            NativeMethods.model_parameter(Handle, index, out TensorHandle h);
            return new Tensor(h);
        }

        /// <summary>The state_dict name of parameter i ("0.weight", ...).</summary>
        public string ParameterName(long index)
        {
            NativeMethods.model_parameter_name(Handle, index, out string s);
            GC.KeepAlive(this);
            return s;
        }

        /// <summary>Logits [batch, outputs] for x [batch, inputs] on the model's device.</summary>
        public Tensor Forward(Tensor x) { NativeMethods.model_forward(Handle, x.Handle, out TensorHandle h); return new Tensor(h); }

        /// <summary>Evaluation-mode forward pass on x from any device.</summary>
        public Tensor Predict(Tensor x, PredictKind kind = PredictKind.Logits)
        {
            NativeMethods.model_predict(Handle, x.Handle, kind, out TensorHandle h);
            return new Tensor(h);
        }
    }
}
