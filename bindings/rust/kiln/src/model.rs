use std::ffi::CStr;
use std::path::Path;
use std::ptr::NonNull;

use kiln_sys as sys;

use crate::context::{Context, Device};
use crate::error::{check, Error, Result, Status};
use crate::tensor::{Tensor, View};
use crate::{create, cstring, get};

/// A layer of a sequential model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Linear = 0,
    Relu = 1,
    LeakyRelu = 2,
    Gelu = 3,
    Tanh = 4,
    Sigmoid = 5,
    Dropout = 6,
}

/// What `Model::predict` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictKind {
    Logits = 0,
    /// Softmax of the logits.
    Probabilities = 1,
    /// Argmax, I64 [batch].
    Classes = 2,
}

/// The layers of a model, built up and given to `Model::new`.
pub struct ModelSpec(NonNull<sys::kiln_model_spec>);

// SAFETY: a spec is plain data owned by this value; release works anywhere.
unsafe impl Send for ModelSpec {}

impl Drop for ModelSpec {
    fn drop(&mut self) {
        unsafe { sys::kiln_model_spec_release(self.0.as_ptr()) }
    }
}

impl ModelSpec {
    pub fn new() -> Result<ModelSpec> {
        create(|p| unsafe { sys::kiln_model_spec_create(p) }).map(ModelSpec)
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
        let text = cstring(text)?;
        check(unsafe { sys::kiln_model_spec_parse(self.0.as_ptr(), text.as_ptr()) })
    }

    pub fn add_linear(&mut self, in_features: i64, out_features: i64, bias: bool) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add_linear(self.0.as_ptr(), in_features, out_features, bias as i32) })
    }

    /// A parameterless layer; `arg` is LeakyReLU's slope or Dropout's
    /// probability.
    pub fn add(&mut self, kind: LayerKind, arg: f64) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add(self.0.as_ptr(), kind as u32, arg) })
    }

    /// Linear layers of `sizes` with `activation` between them.
    pub fn add_mlp(&mut self, sizes: &[i64], activation: LayerKind) -> Result<()> {
        check(unsafe { sys::kiln_model_spec_add_mlp(self.0.as_ptr(), sizes.as_ptr(), sizes.len() as i64, activation as u32) })
    }
}

/// A sequential MLP. `Send + Sync`: `forward` and `predict` may run on
/// several threads at once; changes take `&mut self`.
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

fn path_cstring(path: &Path) -> Result<std::ffi::CString> {
    let s = path.to_str().ok_or_else(|| Error::new(Status::InvalidArgument, format!("path {path:?} is not UTF-8")))?;
    cstring(s)
}

impl Model {
    /// A model initialised from the context's generator as nn.Linear.
    pub fn new(ctx: &Context, spec: &ModelSpec, device: Device) -> Result<Model> {
        create(|p| unsafe { sys::kiln_model_create(ctx.ptr(), spec.0.as_ptr(), device.raw(), p) }).map(Model)
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

    pub(crate) fn ptr(&self) -> *mut sys::kiln_model {
        self.0.as_ptr()
    }

    /// Writes the weights as safetensors, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_model_save(self.ptr(), path.as_ptr()) })
    }

    /// Reads weights of the same architecture.
    pub fn load_weights(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_cstring(path.as_ref())?;
        check(unsafe { sys::kiln_model_load_weights(self.ptr(), path.as_ptr()) })
    }

    /// Moves the parameters to `device`.
    pub fn to(&mut self, device: Device) -> Result<()> {
        check(unsafe { sys::kiln_model_to(self.ptr(), device.raw()) })
    }

    pub fn device(&self) -> Result<Device> {
        let mut d = sys::kiln_device { kind: 0, index: 0 };
        check(unsafe { sys::kiln_model_device(self.ptr(), &mut d) })?;
        Ok(Device::from_raw(d))
    }

    /// Dropout active (true) or evaluation mode.
    pub fn set_training(&mut self, training: bool) -> Result<()> {
        check(unsafe { sys::kiln_model_set_training(self.ptr(), training as i32) })
    }

    pub fn num_parameters(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_num_parameters(self.ptr(), p) })
    }

    pub fn input_size(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_input_size(self.ptr(), p) })
    }

    pub fn output_size(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_output_size(self.ptr(), p) })
    }

    /// The spec as `ModelSpec::parse` reads it.
    pub fn describe(&self) -> Result<String> {
        let mut s = std::ptr::null();
        check(unsafe { sys::kiln_model_describe(self.ptr(), &mut s) })?;
        // SAFETY: owned by the model, which &self keeps alive.
        Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }

    pub fn num_parameter_tensors(&self) -> Result<i64> {
        get(|p| unsafe { sys::kiln_model_num_parameter_tensors(self.ptr(), p) })
    }

    /// Parameter `index` as a view of the model's storage, with its
    /// state_dict name ("0.weight", ...).
    pub fn parameter(&self, index: i64) -> Result<(View<'_>, String)> {
        let mut s = std::ptr::null();
        check(unsafe { sys::kiln_model_parameter_name(self.ptr(), index, &mut s) })?;
        let name = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        let t = create(|p| unsafe { sys::kiln_model_parameter(self.ptr(), index, p) })?;
        Ok((View::new(Tensor(t)), name))
    }

    /// Logits [batch, outputs] for x [batch, inputs] on the model's device.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        create(|p| unsafe { sys::kiln_model_forward(self.ptr(), x.ptr(), p) }).map(Tensor)
    }

    /// Evaluation-mode forward pass on x from any device.
    pub fn predict(&self, x: &Tensor, kind: PredictKind) -> Result<Tensor> {
        create(|p| unsafe { sys::kiln_model_predict(self.ptr(), x.ptr(), kind as u32, p) }).map(Tensor)
    }
}
