use std::fmt;
use std::os::raw::c_int;
use std::path::Path;
use std::ptr::NonNull;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Result};
use crate::tensor::{op_enum, DType, Tensor, View, ViewMut};
use crate::{create, cstring, get, owned_string, path_cstring};

op_enum! {
    /// A layer of a sequential model (kiln_layer_kind).
    LayerKind:
    /// Linear(in, out), added with `ModelSpec::add_linear`.
    Linear = sys::kiln_layer_kind_KILN_LAYER_LINEAR, "linear";
    /// ReLU.
    Relu = sys::kiln_layer_kind_KILN_LAYER_RELU, "relu";
    /// LeakyReLU; its argument is the negative slope.
    LeakyRelu = sys::kiln_layer_kind_KILN_LAYER_LEAKY_RELU, "leaky_relu";
    /// GELU (erf form).
    Gelu = sys::kiln_layer_kind_KILN_LAYER_GELU, "gelu";
    /// Tanh.
    Tanh = sys::kiln_layer_kind_KILN_LAYER_TANH, "tanh";
    /// Sigmoid.
    Sigmoid = sys::kiln_layer_kind_KILN_LAYER_SIGMOID, "sigmoid";
    /// Dropout; its argument is the drop probability.
    Dropout = sys::kiln_layer_kind_KILN_LAYER_DROPOUT, "dropout";
    /// ELU; its argument is alpha (PyTorch's default 1).
    Elu = sys::kiln_layer_kind_KILN_LAYER_ELU, "elu";
    /// SELU, with PyTorch's fixed constants.
    Selu = sys::kiln_layer_kind_KILN_LAYER_SELU, "selu";
    /// Softplus; its arguments are beta and threshold (`add_with`; PyTorch's
    /// defaults 1 and 20).
    Softplus = sys::kiln_layer_kind_KILN_LAYER_SOFTPLUS, "softplus";
    /// Softmax over each row, the output transform (last layer only):
    /// `forward` and `PredictKind::Logits` return its rows, training takes
    /// the logits under it.
    Softmax = sys::kiln_layer_kind_KILN_LAYER_SOFTMAX, "softmax";
    /// Log-softmax over each row, the output transform (last layer only).
    LogSoftmax = sys::kiln_layer_kind_KILN_LAYER_LOG_SOFTMAX, "log_softmax";
}

op_enum! {
    /// What `Model::predict` returns (kiln_predict_kind).
    PredictKind:
    /// Logits [batch, outputs].
    Logits = sys::kiln_predict_kind_KILN_PREDICT_LOGITS, "logits";
    /// Softmax of the logits.
    Probabilities = sys::kiln_predict_kind_KILN_PREDICT_PROBABILITIES, "probabilities";
    /// Argmax, I64 `[batch]`.
    Classes = sys::kiln_predict_kind_KILN_PREDICT_CLASSES, "classes";
}

/// The layers of a model, built up and given to `Model::new`. Displays the
/// calls that built it, e.g. `784-32-10 + dropout(0.2)`.
pub struct ModelSpec {
    raw: NonNull<sys::kiln_model_spec>,
    // kiln has no text form of a spec before a model is made, so the spec
    // remembers what was appended, for Display.
    parts: Vec<String>,
}

// SAFETY: a spec is plain data owned by this value, changed only through
// &mut self; release works anywhere.
unsafe impl Send for ModelSpec {}
unsafe impl Sync for ModelSpec {}

impl Drop for ModelSpec {
    fn drop(&mut self) {
        unsafe { sys::kiln_model_spec_release(self.raw.as_ptr()) }
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.parts.is_empty() {
            return f.write_str("(empty spec)");
        }
        f.write_str(&self.parts.join(" + "))
    }
}

impl fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ModelSpec").field(&self.parts).finish()
    }
}

impl ModelSpec {
    /// An empty spec.
    pub fn new() -> Result<ModelSpec> {
        create(|p| unsafe { sys::kiln_model_spec_create(p) }).map(|raw| ModelSpec { raw, parts: Vec::new() })
    }

    /// A spec from compact text: "784-32-10" (ReLU between layers),
    /// "784-256-10:gelu:dropout=0.2".
    pub fn parse(text: &str) -> Result<ModelSpec> {
        let mut spec = ModelSpec::new()?;
        spec.append(text)?;
        Ok(spec)
    }

    /// Appends the layers a compact text describes.
    pub fn append(&mut self, text: &str) -> Result<()> {
        let c = cstring(text)?;
        check(unsafe { sys::kiln_model_spec_parse(self.raw.as_ptr(), c.as_ptr()) })?;
        self.parts.push(text.to_owned());
        Ok(())
    }

    /// Appends Linear(in_features, out_features).
    pub fn add_linear(&mut self, in_features: i64, out_features: i64, bias: bool) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add_linear(self.raw.as_ptr(), in_features, out_features, bias as c_int) })?;
        self.parts.push(format!("linear({in_features}, {out_features}{})", if bias { "" } else { ", no bias" }));
        Ok(())
    }

    /// A parameterless layer; `arg` is LeakyReLU's slope, ELU's alpha,
    /// Softplus's beta (threshold 20) or Dropout's probability.
    /// `Softmax` and `LogSoftmax` must be the last layer.
    pub fn add(&mut self, kind: LayerKind, arg: f64) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add(self.raw.as_ptr(), kind.raw(), arg) })?;
        self.parts.push(match kind {
            LayerKind::LeakyRelu | LayerKind::Dropout | LayerKind::Elu => format!("{kind}({arg})"),
            LayerKind::Softplus => format!("{kind}({arg}, 20)"),
            _ => kind.to_string(),
        });
        Ok(())
    }

    /// `add` with the layer's second parameter `arg2`, Softplus's threshold
    /// (ignored by the others).
    pub fn add_with(&mut self, kind: LayerKind, arg: f64, arg2: f64) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add_v2(self.raw.as_ptr(), kind.raw(), arg, arg2) })?;
        self.parts.push(match kind {
            LayerKind::Softplus => format!("{kind}({arg}, {arg2})"),
            LayerKind::LeakyRelu | LayerKind::Dropout | LayerKind::Elu => format!("{kind}({arg})"),
            _ => kind.to_string(),
        });
        Ok(())
    }

    /// Linear layers of `sizes` with `activation` between them.
    pub fn add_mlp(&mut self, sizes: &[i64], activation: LayerKind) -> Result<()> {
        check(unsafe {
            sys::kiln_model_spec_add_mlp(self.raw.as_ptr(), sizes.as_ptr(), sizes.len() as i64, activation.raw())
        })?;
        let sizes: Vec<String> = sizes.iter().map(i64::to_string).collect();
        self.parts.push(format!("{}:{activation}", sizes.join("-")));
        Ok(())
    }
}

/// A sequential MLP. `Send + Sync`: `forward` and `predict` may run on
/// several threads at once; changes take `&mut self`. Displays as
/// `model 784-32-10 (25450 parameters, f32, cpu)`.
pub struct Model(pub(crate) NonNull<sys::kiln_model>);

// SAFETY: kiln.h: a model used for inference may be shared by threads; the
// calls that change it take &mut self; release works from any thread.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::kiln_model_release(self.0.as_ptr()) }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Ok(spec), Ok(0), Ok(device)) = (self.describe(), self.num_parameters(), self.device()) {
            // A model without a Linear: no parameter to tell its dtype.
            return write!(f, "model {spec} (0 parameters, {device})");
        }
        let dtype = self.parameter(0).and_then(|(p, _)| p.dtype());
        match (self.describe(), self.num_parameters(), dtype, self.device()) {
            (Ok(spec), Ok(n), Ok(dtype), Ok(device)) => write!(f, "model {spec} ({n} parameters, {dtype}, {device})"),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => write!(f, "model (<{e}>)"),
        }
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("spec", &self.describe().ok())
            .field("parameters", &self.num_parameters().ok())
            .field("device", &self.device().ok())
            .field("training", &self.is_training().ok())
            .finish()
    }
}

impl Model {
    /// An f32 model initialised from the context's generator as nn.Linear.
    pub fn new(ctx: &Context, spec: &ModelSpec, device: Device) -> Result<Model> {
        create(|p| unsafe { sys::kiln_model_create(ctx.ptr(), spec.raw.as_ptr(), device.raw(), p) }).map(Model)
    }

    /// A model with parameters of `dtype` (F32, or F64 on the CPU).
    pub fn with_dtype(ctx: &Context, spec: &ModelSpec, device: Device, dtype: DType) -> Result<Model> {
        create(|p| unsafe { sys::kiln_model_create_dtype(ctx.ptr(), spec.raw.as_ptr(), device.raw(), dtype.raw(), p) })
            .map(Model)
    }

    /// `Model::new(ctx, &ModelSpec::parse(text)?, device)`.
    pub fn from_text(ctx: &Context, text: &str, device: Device) -> Result<Model> {
        Model::new(ctx, &ModelSpec::parse(text)?, device)
    }

    /// A model from a file `save` wrote.
    pub fn load(ctx: &Context, path: impl AsRef<Path>, device: Device) -> Result<Model> {
        let path = path_cstring(path.as_ref())?;
        create(|p| unsafe { sys::kiln_model_load(ctx.ptr(), path.as_ptr(), device.raw(), p) }).map(Model)
    }

    /// A model of `spec` from a safetensors file holding its parameters under
    /// PyTorch's nn.Sequential names ("0.weight", "0.bias", ...), such as
    /// `safetensors.torch.save_file(model.state_dict(), path)` writes.
    pub fn load_with_spec(ctx: &Context, path: impl AsRef<Path>, spec: &ModelSpec, device: Device) -> Result<Model> {
        let path = path_cstring(path.as_ref())?;
        create(|p| unsafe { sys::kiln_model_load_with_spec(ctx.ptr(), path.as_ptr(), spec.raw.as_ptr(), device.raw(), p) })
            .map(Model)
    }

    /// A CPU model from an ONNX file holding an MLP (Gemm or MatMul+Add,
    /// Relu, LeakyRelu, Elu, Selu, Softplus, Gelu, Tanh, Sigmoid, Identity,
    /// Dropout, Flatten or Reshape at the input, Softmax or LogSoftmax at
    /// the end, opsets 7 to 28, weights inline or in files beside it:
    /// `kiln_model_import_onnx` in kiln.h has the rules). Any other op or a hostile file is `NotSupported` or `Format`
    /// naming the node; `NotSupported` too when kiln was built without ONNX.
    pub fn import_onnx(ctx: &Context, path: impl AsRef<Path>) -> Result<Model> {
        let path = path_cstring(path.as_ref())?;
        create(|p| unsafe { sys::kiln_model_import_onnx(ctx.ptr(), path.as_ptr(), p) }).map(Model)
    }

    pub(crate) fn ptr(&self) -> *mut sys::kiln_model {
        self.0.as_ptr()
    }

    /// Writes the weights as safetensors, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_model_save(self.ptr(), path.as_ptr()) })
    }

    /// Writes the model as an ONNX file (opset 13; input "input", output
    /// "logits", or "probabilities"/"log_probabilities" after an output
    /// transform, a symbolic batch dimension; Dropout left out) that ONNX
    /// Runtime runs, atomically like `save`.
    pub fn export_onnx(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_model_export_onnx(self.ptr(), path.as_ptr()) })
    }

    /// `export_onnx`, with the weights in `path` + ".data" beside the model
    /// (ONNX's external data) when `external_data` is set.
    pub fn export_onnx_with(&self, path: impl AsRef<Path>, external_data: bool) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        let flags = if external_data {
            sys::kiln_onnx_export_flags_KILN_ONNX_EXPORT_EXTERNAL_DATA
        } else {
            sys::kiln_onnx_export_flags_KILN_ONNX_EXPORT_DEFAULT
        };
        check(unsafe { sys::kiln_model_export_onnx_v2(self.ptr(), path.as_ptr(), flags as u32) })
    }

    /// Reads weights of the same architecture; unchanged on failure.
    pub fn load_weights(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_model_load_weights(self.ptr(), path.as_ptr()) })
    }

    /// Moves the parameters to `device`.
    pub fn to(&mut self, device: Device) -> Result<()> {
        check(unsafe { sys::kiln_model_to(self.ptr(), device.raw()) })
    }

    /// Where the parameters live.
    pub fn device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_model_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// Dropout active (true) or evaluation mode.
    pub fn set_training(&mut self, training: bool) -> Result<()> {
        check(unsafe { sys::kiln_model_set_training(self.ptr(), training as c_int) })
    }

    /// Whether the model is in training mode (new models are).
    pub fn is_training(&self) -> Result<bool> {
        get(|p: *mut c_int| unsafe { sys::kiln_model_is_training(self.ptr(), p) }).map(|v| v != 0)
    }

    /// Scalar parameters (weights and biases).
    pub fn num_parameters(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_num_parameters(self.ptr(), p) })
    }

    /// Features per input sample.
    pub fn input_size(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_input_size(self.ptr(), p) })
    }

    /// Outputs per sample.
    pub fn output_size(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_output_size(self.ptr(), p) })
    }

    /// The spec as `ModelSpec::parse` reads it.
    pub fn describe(&self) -> Result<String> {
        let mut s = std::ptr::null();
        check(unsafe { sys::kiln_model_describe(self.ptr(), &mut s) })?;
        // SAFETY: owned by the model, which &self keeps alive.
        Ok(unsafe { owned_string(s) })
    }

    /// Parameter tensors (2 per Linear with bias).
    pub fn num_parameter_tensors(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_num_parameter_tensors(self.ptr(), p) })
    }

    fn parameter_name(&self, index: i64) -> Result<String> {
        let mut s = std::ptr::null();
        check(unsafe { sys::kiln_model_parameter_name(self.ptr(), index, &mut s) })?;
        Ok(unsafe { owned_string(s) })
    }

    /// Parameter `index` as a read-only view of the model's storage, with
    /// its state_dict name ("0.weight", ...). `view.to(device)` copies.
    pub fn parameter(&self, index: i64) -> Result<(View<'_>, String)> {
        let name = self.parameter_name(index)?;
        let t = create(|p| unsafe { sys::kiln_model_parameter(self.ptr(), index, p) })?;
        Ok((View::new(Tensor(t)), name))
    }

    /// Parameter `index` as a writable view: writes change the model, which
    /// it borrows mutably, so no inference runs meanwhile.
    pub fn parameter_mut(&mut self, index: i64) -> Result<(ViewMut<'_>, String)> {
        let name = self.parameter_name(index)?;
        let t = create(|p| unsafe { sys::kiln_model_parameter(self.ptr(), index, p) })?;
        Ok((ViewMut::new(Tensor(t)), name))
    }

    /// Logits [batch, outputs] for x [batch, inputs] on the model's device.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        create(|p| unsafe { sys::kiln_model_forward(self.ptr(), x.ptr(), p) }).map(Tensor)
    }

    /// Evaluation-mode forward pass on x from any device.
    pub fn predict(&self, x: &Tensor, kind: PredictKind) -> Result<Tensor> {
        create(|p| unsafe { sys::kiln_model_predict(self.ptr(), x.ptr(), kind.raw(), p) }).map(Tensor)
    }
}
