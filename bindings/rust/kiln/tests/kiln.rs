//! Integration tests of the safe bindings against the real libkiln.
use std::sync::Arc;
use std::thread;

use kiln::{Context, ContextOptions, DType, Dataset, Device, FastPath, LayerKind, Model, ModelSpec, Optimizer, Precision,
           PredictKind, Status, Tensor, Trainer, TrainerOptions};

mod common;
pub use common::*;

#[test]
fn version_matches() {
    assert_eq!(kiln::abi_version(), kiln::ABI_VERSION);
    assert!(!kiln::version().is_empty());
}

#[test]
fn devices() {
    let ctx = context();
    let devices = ctx.devices().unwrap();
    assert_eq!(devices[0].device, Device::Cpu);
    assert!(!devices[0].name.is_empty() && devices[0].multiprocessor_count >= 1, "{:?}", devices[0]);
    let gpus = ctx.cuda_device_count().unwrap();
    assert_eq!(devices.len() as i64, gpus + 1);
    match ctx.cuda_status().unwrap() {
        Ok(()) => assert_eq!(ctx.default_device().unwrap(), Device::Cuda(0)),
        Err(reason) => {
            assert!(!reason.is_empty());
            assert_eq!(ctx.default_device().unwrap(), Device::Cpu);
        }
    }
    assert_eq!(ctx.parse_device("cpu").unwrap().to_string(), "cpu");
}

#[test]
fn tensor_round_trip() {
    let ctx = context();
    let dev = ctx.default_device().unwrap();
    let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let host = Tensor::from_slice(&ctx, &data, &[2, 3], Device::Cpu).unwrap();
    let moved = host.to(dev).unwrap();
    assert_eq!(moved.device().unwrap(), dev);
    assert_eq!(moved.shape().unwrap(), vec![2, 3]);
    assert_eq!(moved.dtype().unwrap(), DType::F32);
    let doubled = (&moved + &moved).unwrap().to(Device::Cpu).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(doubled, data.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    let ones = Tensor::ones(&ctx, &[3, 1], DType::F32, dev).unwrap();
    let sums = moved.matmul(&ones).unwrap().to(Device::Cpu).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(sums, vec![6.0, 15.0]);
    // A view borrows its source; a mutable view writes through.
    assert_eq!(host.rows(1, 2).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 5.0, 6.0]);
    let mut host = host;
    host.rows_mut(0, 1).unwrap().copy_from(&[9.0f32, 9.0, 9.0]).unwrap();
    assert_eq!(host.to_vec::<f32>().unwrap()[..4], [9.0, 9.0, 9.0, 4.0]);
    assert_eq!(host.to_vec::<i64>().unwrap_err().status, Status::DTypeMismatch);
}

#[test]
fn errors_come_back_as_results() {
    let ctx = context();
    let err = Tensor::from_slice(&ctx, &[1.0f32; 5], &[2, 3], Device::Cpu).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(!err.message.is_empty());
    let a = Tensor::zeros(&ctx, &[2, 3], DType::F32, Device::Cpu).unwrap();
    let err = a.matmul(&a).err().unwrap();
    assert_eq!(err.status, Status::ShapeMismatch);
    assert!(!err.message.is_empty());
    let err = ctx.parse_device("gpu:0").unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(!err.message.is_empty());
    if ctx.cuda_device_count().unwrap() == 0 {
        assert_eq!(ctx.parse_device("cuda:0").unwrap_err().status, Status::DeviceUnavailable);
    }
    let err = Model::load(&ctx, "/nonexistent/model.safetensors", Device::Cpu).err().unwrap();
    assert_eq!(err.status, Status::Io);
    // Still usable afterwards.
    assert_eq!(Tensor::ones(&ctx, &[4], DType::F32, Device::Cpu).unwrap().numel().unwrap(), 4);
}

#[test]
fn train_save_load() {
    let ctx = context();
    let (model, x) = trained(&ctx);
    assert_eq!(model.num_parameters().unwrap(), 16 * 32 + 32 + 32 * 4 + 4);
    let (weight, name) = model.parameter(0).unwrap();
    assert_eq!((name.as_str(), weight.shape().unwrap()), ("0.weight", vec![32, 16]));
    let path = std::env::temp_dir().join(format!("kiln-rust-test-{}.safetensors", std::process::id()));
    model.save(&path).unwrap();
    let loaded = Model::load(&ctx, &path, ctx.default_device().unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(loaded.describe().unwrap(), model.describe().unwrap());
    assert_eq!(logits(&loaded, &x), logits(&model, &x));
}

#[test]
fn onnx_round_trip() {
    let ctx = context();
    let model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let x = Tensor::randn(&ctx, &[3, 16], DType::F32, Device::Cpu).unwrap();
    let path = std::env::temp_dir().join(format!("kiln-rust-test-{}.onnx", std::process::id()));
    match model.export_onnx(&path) {
        Err(e) if e.status == Status::NotSupported => return eprintln!("skipped: kiln was built without ONNX: {e}"),
        other => other.unwrap(),
    }
    let imported = Model::import_onnx(&ctx, &path).unwrap();
    for (a, b) in logits(&model, &x).iter().zip(logits(&imported, &x)) {
        assert!((a - b).abs() <= 1e-6, "logit {a} before the round trip, {b} after");
    }
    std::fs::write(&path, b"not a protobuf at all").unwrap();
    assert_eq!(Model::import_onnx(&ctx, &path).expect_err("a garbage file").status, Status::Format);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(Model::import_onnx(&ctx, &path).expect_err("a missing file").status, Status::Io);
}

/// ELU, SELU and Softplus through `add` and `add_with`, a Softmax output
/// transform, and the weights exported to a data file beside the model.
#[test]
fn new_layers_and_external_data() {
    let ctx = context();
    let mut spec = ModelSpec::new().unwrap();
    spec.add_linear(16, 8, true).unwrap();
    spec.add(LayerKind::Elu, 0.5).unwrap();
    spec.add_linear(8, 8, true).unwrap();
    spec.add(LayerKind::Selu, 0.0).unwrap();
    spec.add_linear(8, 6, true).unwrap();
    spec.add_with(LayerKind::Softplus, 2.0, 5.0).unwrap();
    spec.add_linear(6, 4, true).unwrap();
    spec.add(LayerKind::Softmax, 0.0).unwrap();
    assert_eq!(spec.add(LayerKind::Relu, 0.0).expect_err("a layer after softmax").status, Status::InvalidArgument);
    let model = Model::new(&ctx, &spec, Device::Cpu).unwrap();
    assert_eq!(
        model.describe().unwrap(),
        "linear(16,8);elu(0.5);linear(8,8);selu;linear(8,6);softplus(2,5);linear(6,4);softmax"
    );
    let x = Tensor::randn(&ctx, &[3, 16], DType::F32, Device::Cpu).unwrap();
    let probs = logits(&model, &x);
    for row in probs.chunks(4) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() <= 1e-5, "a softmax row sums to {row:?}");
    }
    let path = std::env::temp_dir().join(format!("kiln-rust-external-{}.onnx", std::process::id()));
    match model.export_onnx_with(&path, true) {
        Err(e) if e.status == Status::NotSupported => return eprintln!("skipped: kiln was built without ONNX: {e}"),
        other => other.unwrap(),
    }
    let data = path.with_extension("onnx.data");
    assert!(data.exists(), "no data file beside the model");
    let imported = Model::import_onnx(&ctx, &path).unwrap();
    for (a, b) in probs.iter().zip(logits(&imported, &x)) {
        assert!((a - b).abs() <= 1e-6, "output {a} before the round trip, {b} after");
    }
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&data).unwrap();
}

#[test]
fn concurrent_inference_matches_single_thread() {
    let ctx = context();
    let (model, x) = trained(&ctx);
    let want = logits(&model, &x);
    let (model, x) = (Arc::new(model), Arc::new(x));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (model, x) = (Arc::clone(&model), Arc::clone(&x));
            thread::spawn(move || (0..10).map(|_| logits(&model, &x)).collect::<Vec<_>>())
        })
        .collect();
    for t in threads {
        for got in t.join().unwrap() {
            assert_eq!(got, want);
        }
    }
}

#[test]
fn release_on_other_threads() {
    let ctx = Arc::new(context());
    let tensors: Vec<Tensor> =
        (0..16).map(|_| Tensor::randn(&ctx, &[64, 64], DType::F32, Device::Cpu).unwrap()).collect();
    let model = Model::from_text(&ctx, "8-4-2", Device::Cpu).unwrap();
    let handles: Vec<_> = tensors.into_iter().map(|t| thread::spawn(move || drop(t))).collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    thread::spawn(move || drop(model)).join().unwrap();
    // The last reference to the context goes on another thread too.
    let c2 = Arc::clone(&ctx);
    thread::spawn(move || assert_eq!(Tensor::ones(&c2, &[3], DType::F32, Device::Cpu).unwrap().numel().unwrap(), 3))
        .join()
        .unwrap();
    drop(ctx);
}

/// Trains a fresh 16-32-4 model for 5 epochs (SGD, lr 0.003, batch 32, a
/// fixed shuffle seed) at `precision`, from the same seed each time; the last
/// epoch's training loss and validation accuracy. The slow lr leaves the loss
/// well above zero, so losses of two precisions compare meaningfully.
fn fit_blobs(precision: Precision) -> (f64, f64) {
    let ctx = context();
    let (x, y) = tensors(&ctx, 1024);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let (train, val) = data.split(0.25, 1).unwrap();
    let mut model = Model::from_text(&ctx, "16-32-4", ctx.default_device().unwrap()).unwrap();
    let options = TrainerOptions::default().lr(0.003).batch_size(32).shuffle_seed(3).precision(precision);
    let mut trainer = Trainer::new(&mut model, &options).unwrap();
    let history = trainer.fit(&train, Some(&val), 5).unwrap();
    let last = history.last().unwrap();
    (last.train_loss, last.validation.expect("validation stats").accuracy)
}

#[test]
fn bf16_learns_like_fp32() {
    let (fp32_loss, fp32_acc) = fit_blobs(Precision::Fp32);
    let (bf16_loss, bf16_acc) = fit_blobs(Precision::Bf16);
    eprintln!("fp32: loss {fp32_loss:.6} accuracy {fp32_acc:.3}; bf16: loss {bf16_loss:.6} accuracy {bf16_acc:.3}");
    assert!(bf16_acc > 0.9, "bf16 accuracy {bf16_acc}, chance is 0.25");
    assert!(fp32_loss > 0.05 && (bf16_loss - fp32_loss).abs() <= 0.05 * fp32_loss,
            "final loss bf16 {bf16_loss}, fp32 {fp32_loss}: want fp32 above 0.05 and bf16 within 5% of it");
}

#[test]
fn tf32_is_not_supported_on_cpu() {
    let ctx = context();
    let mut model = Model::from_text(&ctx, "8-4-2", Device::Cpu).unwrap();
    let options = TrainerOptions { precision: Some(Precision::Tf32), ..Default::default() };
    let err = Trainer::new(&mut model, &options).expect_err("a tf32 trainer on the CPU");
    assert_eq!(err.status, Status::NotSupported);
    assert!(err.message.contains("tf32"), "{err}");
}

#[test]
fn data_parallel_device_list() {
    let ctx = context();
    let mut model = Model::from_text(&ctx, "8-4-2", Device::Cpu).unwrap();
    let options = TrainerOptions::default().devices(vec![Device::Cuda(0), Device::Cuda(1)]);
    let err = Trainer::new(&mut model, &options).expect_err("DataParallel with the model on the CPU");
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("first listed device"), "{err}");
    let options = TrainerOptions::default().devices(vec![Device::Cpu, Device::Cuda(0)]);
    assert_eq!(Trainer::new(&mut model, &options).expect_err("the CPU with a GPU").status, Status::InvalidArgument);
    Trainer::new(&mut model, &TrainerOptions::default().devices(vec![Device::Cpu])).unwrap();
}

#[test]
fn fast_path_bits_outside_all_are_refused() {
    let ctx = context();
    let mut model = Model::from_text(&ctx, "8-4-2", Device::Cpu).unwrap();
    // Any subset is accepted (the CPU has no fast path to switch off).
    for fast_path in [FastPath::NONE, FastPath::ALL, FastPath::ALL - FastPath::GRAPHS, FastPath::EPILOGUES | FastPath::CUDNN] {
        let options = TrainerOptions { fast_path: Some(fast_path), ..Default::default() };
        Trainer::new(&mut model, &options).unwrap();
    }
    assert!(FastPath::ALL.contains(FastPath::CUDNN) && !(FastPath::ALL - FastPath::CUDNN).contains(FastPath::CUDNN));
    for bits in [FastPath::ALL.bits() + 1, 1 << 31] {
        let options = TrainerOptions { fast_path: Some(FastPath::from_bits_retain(bits)), ..Default::default() };
        let err = Trainer::new(&mut model, &options).expect_err("bits outside ALL");
        assert_eq!(err.status, Status::InvalidArgument, "{bits:#x}: {err}");
    }
}

#[test]
fn every_status_code_maps_to_a_status() {
    assert_eq!(Status::from_code(9), Status::NotSupported);
    assert_eq!(Status::from_code(13), Status::Busy);
    assert_eq!(Status::from_code(14), Status::Numeric);
    assert_eq!(Status::from_code(15), Status::Communication);
    for code in 1..=15 {
        let status = Status::from_code(code);
        assert_eq!(status.code(), code);
        assert!(status.to_string().starts_with("KILN_ERROR_") && status.to_string() != "KILN_ERROR_UNKNOWN", "{status}");
    }
    assert_eq!(Status::ShapeMismatch.to_string(), "KILN_ERROR_SHAPE_MISMATCH");
    // Codes newer than the bindings (and 0, which is no failure) are kept.
    for code in [0, 16, 99, u32::MAX] {
        assert_eq!(Status::from_code(code), Status::Unknown(code));
        assert_eq!(Status::from_code(code).code(), code);
    }
    let err = kiln::Error { status: Status::from_code(99), message: "from the future".into() };
    assert_eq!(err.to_string(), "KILN_ERROR_UNKNOWN (99): from the future");
}

#[test]
fn divergence_is_a_numeric_error() {
    let ctx = context();
    let (x, y) = tensors(&ctx, 256);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default().lr(1e30)).unwrap();
    let err = (0..5).find_map(|_| trainer.epoch(&data).err()).expect("lr 1e30 diverges");
    assert_eq!(err.status, Status::Numeric, "{err}");
}

// ---- Soundness: nothing reachable from & writes shared storage ----

#[test]
fn to_the_same_device_copies_instead_of_aliasing() {
    let ctx = context();
    let t = Tensor::from_slice(&ctx, &[1.0f32, 2.0, 3.0], &[3], Device::Cpu).unwrap();
    let mut copy = t.to(Device::Cpu).unwrap();
    copy.copy_from(&[7.0f32, 8.0, 9.0]).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    assert_eq!(copy.to_vec::<f32>().unwrap(), vec![7.0, 8.0, 9.0]);
    // into_device owns its tensor, so it may keep the storage.
    let moved = copy.into_device(Device::Cpu).unwrap();
    assert_eq!(moved.to_vec::<f32>().unwrap(), vec![7.0, 8.0, 9.0]);
}

/// The example: writing through `model.parameter(i)?.to(Cpu)?` while
/// other threads run `predict(&model)` must not change the model.
#[test]
fn writing_a_parameter_copy_leaves_the_shared_model_alone() {
    let ctx = context();
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let (x, _) = tensors(&ctx, 64);
    let want = logits(&model, &x);
    let (model_ref, x_ref) = (&model, &x);
    thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|_| s.spawn(move || (0..20).map(|_| logits(model_ref, x_ref)).collect::<Vec<_>>()))
            .collect();
        for _ in 0..20 {
            let (weight, _) = model_ref.parameter(0).unwrap();
            let mut copy = weight.to(Device::Cpu).unwrap();
            copy.copy_from(&vec![0.5f32; 32 * 16]).unwrap();
        }
        for r in readers {
            for got in r.join().unwrap() {
                assert_eq!(got, want);
            }
        }
    });
    assert_eq!(logits(&model, &x), want);
    // Writing the model itself takes &mut, through parameter_mut.
    let (mut bias, name) = model.parameter_mut(1).unwrap();
    assert_eq!(name, "0.bias");
    bias.copy_from(&[0.25f32; 32]).unwrap();
    drop(bias);
    assert_eq!(model.parameter(1).unwrap().0.to_vec::<f32>().unwrap(), vec![0.25f32; 32]);
    assert_ne!(logits(&model, &x), want);
}

// ---- Idiom: Debug, Display, operators, paths, enums, defaults ----

fn printable<T: std::fmt::Debug + std::fmt::Display>(value: &T) -> (String, String) {
    (format!("{value:?}"), value.to_string())
}

#[test]
fn every_public_type_has_debug_and_display() {
    fn both<T: std::fmt::Debug + std::fmt::Display + ?Sized>() {}
    both::<kiln::Context>();
    both::<kiln::ContextOptions>();
    both::<kiln::Device>();
    both::<kiln::DeviceInfo>();
    both::<kiln::LogLevel>();
    both::<kiln::Communicator>();
    both::<kiln::Error>();
    both::<kiln::Status>();
    both::<kiln::LayerKind>();
    both::<kiln::Model>();
    both::<kiln::ModelSpec>();
    both::<kiln::PredictKind>();
    both::<kiln::BinaryOp>();
    both::<kiln::CompareOp>();
    both::<kiln::DType>();
    both::<kiln::ReduceOp>();
    both::<kiln::Tensor>();
    both::<kiln::UnaryOp>();
    both::<kiln::View<'static>>();
    both::<kiln::ViewMut<'static>>();
    both::<kiln::PinnedTensor<'static>>();
    both::<kiln::Batches<'static, 'static>>();
    both::<kiln::Dataset<'static>>();
    both::<kiln::EpochStats>();
    both::<kiln::Epochs<'static, 'static, 'static, 'static>>();
    both::<kiln::FastPath>();
    both::<kiln::LossKind>();
    both::<kiln::Optimizer>();
    both::<kiln::Precision>();
    both::<kiln::Progress>();
    both::<kiln::ProgressPhase>();
    both::<kiln::Schedule>();
    both::<kiln::Trainer<'static>>();
    both::<kiln::TrainerOptions>();

    let ctx = context();
    let t = Tensor::zeros(&ctx, &[2, 3], DType::BF16, Device::Cpu).unwrap();
    assert_eq!(t.to_string(), "tensor([2, 3], bf16, cpu)");
    assert_eq!(format!("{t:?}"), "Tensor { shape: Some([2, 3]), dtype: Some(BF16), device: Some(Cpu) }");
    assert_eq!(t.rows(0, 1).unwrap().to_string(), "tensor([1, 3], bf16, cpu)");
    let mut model = Model::from_text(&ctx, "8-4-2", Device::Cpu).unwrap();
    assert_eq!(model.to_string(), "model 8-4-2 (46 parameters, f32, cpu)");
    assert_eq!(ctx.to_string(), format!("kiln context (default device {})", ctx.default_device().unwrap()));
    assert_eq!(ModelSpec::parse("8-4-2").unwrap().to_string(), "8-4-2");
    let mut spec = ModelSpec::new().unwrap();
    spec.add_linear(8, 4, false).unwrap();
    spec.add(kiln::LayerKind::Dropout, 0.5).unwrap();
    assert_eq!(spec.to_string(), "linear(8, 4, no bias) + dropout(0.5)");
    assert_eq!((FastPath::ALL - FastPath::GRAPHS).to_string(), "epilogues|cudnn");
    assert_eq!(FastPath::NONE.to_string(), "none");
    assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
    assert_eq!(Status::Busy.to_string(), "KILN_ERROR_BUSY");
    assert_eq!(kiln::Optimizer::AdamW.to_string(), "adamw");
    let trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    assert_eq!(trainer.to_string(), "trainer (0 epochs, 0 steps done, lr 0.01)");
    let (debug, display) = printable(&TrainerOptions::default().lr(0.5));
    assert!(debug.contains("lr: Some(0.5)") && display == debug, "{display}");
    let cpu = ctx.device_info(Device::Cpu).unwrap();
    assert!(cpu.to_string().starts_with("cpu: ") && cpu.to_string().contains(" cores, "), "{cpu}");
}

#[test]
fn operators_compute_elementwise_and_chain_errors() {
    let ctx = context();
    let a = Tensor::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&ctx, &[5.0f32, 6.0, 7.0, 8.0], &[2, 2], Device::Cpu).unwrap();
    let values = |t: kiln::Result<Tensor>| t.unwrap().to_vec::<f32>().unwrap();
    let (av, bv) = ([1.0f32, 2.0, 3.0, 4.0], [5.0f32, 6.0, 7.0, 8.0]);
    let each = |f: &dyn Fn(f32, f32) -> f32| av.iter().zip(bv).map(|(x, y)| f(*x, y)).collect::<Vec<f32>>();
    assert_eq!(values(&a + &b), each(&|x, y| x + y));
    assert_eq!(values(&a - &b), each(&|x, y| x - y));
    assert_eq!(values(&a * &b), each(&|x, y| x * y));
    assert_eq!(values(&a / &b), each(&|x, y| x / y));
    assert_eq!(values(((&a + &b) * &a) - &b), each(&|x, y| (x + y) * x - y));
    assert_eq!(values(&a * 2.0), each(&|x, _| x * 2.0));
    assert_eq!(values(2.0 * &a), each(&|x, _| 2.0 * x));
    assert_eq!(values(1.0 + &a), each(&|x, _| 1.0 + x));
    assert_eq!(values(-&a), each(&|x, _| -x));
    assert_eq!(values(&a - (&b * 2.0)), each(&|x, y| x - y * 2.0));
    // Broadcasting a row.
    let row = Tensor::from_slice(&ctx, &[10.0f32, 20.0], &[2], Device::Cpu).unwrap();
    assert_eq!(values(&a + &row), vec![11.0, 22.0, 13.0, 24.0]);
    // The first failure travels through the rest of the chain.
    let wrong = Tensor::ones(&ctx, &[3], DType::F32, Device::Cpu).unwrap();
    let err = (((&a + &wrong) * &b) - &a).unwrap_err();
    assert_eq!(err.status, Status::ShapeMismatch, "{err}");
    let ints = Tensor::from_slice(&ctx, &[1i32, 2, 3, 4], &[2, 2], Device::Cpu).unwrap();
    assert_eq!((&a + &ints).unwrap_err().status, Status::DTypeMismatch);
    // Integer tensors take the operators too (division truncates).
    assert_eq!((&ints / 2.0).unwrap().to_vec::<i32>().unwrap(), vec![0, 1, 1, 2]);
}

#[test]
fn enums_round_trip_through_the_library() {
    let ctx = context();
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8];
    let names = ["f32", "f16", "bf16", "f64", "i32", "i64", "u8"];
    let sizes = [4, 2, 2, 8, 4, 8, 1];
    for ((dtype, name), size) in dtypes.into_iter().zip(names).zip(sizes) {
        let t = Tensor::zeros(&ctx, &[2], dtype, Device::Cpu).unwrap();
        assert_eq!(t.dtype().unwrap(), dtype);
        assert_eq!((dtype.to_string().as_str(), dtype.size()), (name, size));
    }
    let x = Tensor::from_slice(&ctx, &[-1.0f32, 0.5, 2.0], &[1, 3], Device::Cpu).unwrap();
    let y = Tensor::from_slice(&ctx, &[0.0f32, 0.5, 3.0], &[1, 3], Device::Cpu).unwrap();
    use kiln::{BinaryOp, CompareOp, ReduceOp, UnaryOp};
    assert_eq!(x.binary(BinaryOp::Maximum, &y).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 3.0]);
    assert_eq!(x.binary(BinaryOp::Pow, &y).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.5f32.powf(0.5), 8.0]);
    assert_eq!(x.compare(CompareOp::Lt, &y).unwrap().to_vec::<u8>().unwrap(), vec![1, 0, 1]);
    assert_eq!(x.compare(CompareOp::Ge, &y).unwrap().to_vec::<u8>().unwrap(), vec![0, 1, 0]);
    assert_eq!(x.unary(UnaryOp::Abs, 0.0).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.5, 2.0]);
    assert_eq!(x.unary(UnaryOp::LeakyRelu, 0.1).unwrap().to_vec::<f32>().unwrap(), vec![-0.1, 0.5, 2.0]);
    assert_eq!(x.reduce(ReduceOp::Argmax, 1, false).unwrap().to_vec::<i64>().unwrap(), vec![2]);
    assert_eq!(x.reduce(ReduceOp::Sum, 1, true).unwrap().shape().unwrap(), vec![1, 1]);
    assert_eq!(x.dim(-1).unwrap(), 3);
    assert_eq!(x.ndim().unwrap(), 2);
    assert_eq!(x.get_device().unwrap(), -1);
    assert_eq!(x.dim(2).unwrap_err().status, Status::InvalidArgument);
    assert!(!x.is_pinned().unwrap());
    let mut pinned = Tensor::empty_pinned(&ctx, &[2, 2], DType::F32).unwrap();
    assert!(pinned.is_pinned().unwrap() && pinned.rows(0, 1).unwrap().is_pinned().unwrap());
    assert_eq!(pinned.to_string(), "tensor([2, 2], f32, cpu)");
    // Refilled after a copy out of it: the copy keeps the old values.
    let dev = ctx.default_device().unwrap();
    pinned.copy_from(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let sent = pinned.to(dev).unwrap();
    pinned.copy_from(&[5.0f32, 6.0, 7.0, 8.0]).unwrap();
    assert_eq!(sent.to(Device::Cpu).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(pinned.to_vec::<f32>().unwrap(), vec![5.0, 6.0, 7.0, 8.0]);
    assert_eq!(pinned.copy_from(&[1i64; 4]).unwrap_err().status, Status::DTypeMismatch);
    assert_eq!(Tensor::empty(&ctx, &[5, 2], DType::I64, Device::Cpu).unwrap().shape().unwrap(), vec![5, 2]);
    assert_eq!(Tensor::empty(&ctx, &[-1], DType::I64, Device::Cpu).unwrap_err().status, Status::InvalidArgument);
    // f64 models (CPU).
    let spec = ModelSpec::parse("3-2").unwrap();
    let model = Model::with_dtype(&ctx, &spec, Device::Cpu, DType::F64).unwrap();
    assert_eq!(model.parameter(0).unwrap().0.dtype().unwrap(), DType::F64);
    let out = model.predict(&x, PredictKind::Logits).unwrap();
    assert_eq!((out.dtype().unwrap(), out.shape().unwrap()), (DType::F64, vec![1, 2]));
    assert_eq!(Model::with_dtype(&ctx, &spec, Device::Cpu, DType::I32).unwrap_err().status, Status::InvalidArgument);
    assert!(model.is_training().unwrap());
    // Device text, checked by syntax only or against the context.
    assert_eq!("cuda:2".parse::<Device>().unwrap(), Device::Cuda(2));
    assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
    assert_eq!("gpu".parse::<Device>().unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn trainer_defaults_come_from_the_library() {
    let ctx = context();
    let (x, y) = tensors(&ctx, 640);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    // kiln.h: lr 0.01, batch 64.
    assert_eq!(trainer.current_lr().unwrap(), 0.01);
    trainer.epoch(&data).unwrap();
    assert_eq!(trainer.steps_done().unwrap(), 640 / 64);
    // Every setter reaches the library: bad values come back as its errors.
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    for bad in [TrainerOptions::default().lr(-1.0), TrainerOptions::default().batch_size(0),
                TrainerOptions::default().momentum(-0.5), TrainerOptions::default().betas((1.5, 0.9)),
                TrainerOptions::default().eps(-1.0), TrainerOptions::default().grad_clip(-1.0),
                TrainerOptions::default().warmup_steps(-1), TrainerOptions::default().progress_interval(-1),
                TrainerOptions::default().bucket_bytes(-1),
                TrainerOptions::default().schedule(kiln::Schedule::Step { step_size: 0, gamma: 0.5 })] {
        let err = Trainer::new(&mut model, &bad).unwrap_err();
        assert_eq!(err.status, Status::InvalidArgument, "{bad}: {err}");
    }
    let options = TrainerOptions::default().optimizer(Optimizer::Sgd).momentum(0.9).nesterov(true).weight_decay(1e-4)
        .schedule(kiln::Schedule::Cosine { total_steps: 100, min_lr: 0.0 }).warmup_steps(10).grad_clip(1.0)
        .loss(kiln::LossKind::CrossEntropy).lr(0.1);
    let trainer = Trainer::new(&mut model, &options).unwrap();
    assert!((trainer.current_lr().unwrap() - 0.1 / 10.0).abs() < 1e-12, "warmup: step 1 of 10 at lr 0.1");
}

#[test]
fn paths_take_anything_path_like() {
    let ctx = context();
    let dir = temp_dir("paths");
    let mut model = Model::from_text(&ctx, "4-3-2", Device::Cpu).unwrap();
    let file = dir.join("model.safetensors");
    model.save(&file).unwrap(); // &PathBuf
    Model::load(&ctx, file.clone(), Device::Cpu).unwrap(); // PathBuf
    Model::load(&ctx, file.to_str().unwrap(), Device::Cpu).unwrap(); // &str
    let owned: String = file.to_str().unwrap().into();
    Model::load(&ctx, owned, Device::Cpu).unwrap(); // String
    model.load_weights(file.as_path()).unwrap(); // &Path
    let spec = ModelSpec::parse("4-3-2").unwrap();
    let loaded = Model::load_with_spec(&ctx, &file, &spec, Device::Cpu).unwrap();
    assert_eq!(loaded.describe().unwrap(), "4-3-2");
    #[cfg(unix)]
    {
        // A name that is not UTF-8 reaches the file system unchanged.
        use std::os::unix::ffi::OsStrExt;
        let odd = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9.safetensors"));
        model.save(&odd).unwrap();
        assert!(odd.exists());
        Model::load(&ctx, &odd, Device::Cpu).unwrap();
    }
    let err = model.save(dir.join("a\0b")).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    let checkpoint = dir.join("run.ckpt");
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    trainer.save_checkpoint(&checkpoint).unwrap();
    trainer.load_checkpoint(checkpoint.as_path()).unwrap();
    assert_eq!(trainer.load_checkpoint(dir.join("missing")).unwrap_err().status, Status::Io);
    drop(trainer);
    let err = Dataset::load_idx(&ctx, dir.join("images.idx"), dir.join("labels.idx")).unwrap_err();
    assert_eq!(err.status, Status::Io);
    assert_eq!(Dataset::load_mnist(&ctx, &dir, "train").unwrap_err().status, Status::Io);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Callbacks and the pull forms ----

#[test]
fn progress_callback_sees_batches_and_epochs_and_can_stop() {
    use kiln::ProgressPhase;
    use std::ops::ControlFlow;
    let ctx = context();
    let (x, y) = tensors(&ctx, 512);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let options = TrainerOptions::default().batch_size(32).progress_interval(4).optimizer(Optimizer::Adam).lr(0.01);
    let mut trainer = Trainer::new(&mut model, &options).unwrap();
    let mut seen = Vec::new();
    let history = trainer.fit_with(&data, None, 2, |p| {
        seen.push(p.clone());
        ControlFlow::Continue(())
    }).unwrap();
    // 16 batches per epoch: progress after batches 4, 8 and 12; the epoch's
    // own report covers the last.
    let batches: Vec<(i64, i64)> = seen.iter().filter(|p| p.phase == ProgressPhase::Batch).map(|p| (p.epoch, p.batch)).collect();
    assert_eq!(batches, vec![(1, 4), (1, 8), (1, 12), (2, 4), (2, 8), (2, 12)]);
    let epochs: Vec<&kiln::Progress> = seen.iter().filter(|p| p.phase == ProgressPhase::Epoch).collect();
    assert_eq!(epochs.len(), 2);
    for (p, h) in epochs.iter().zip(&history) {
        assert_eq!((p.epochs, p.batches), (2, 16));
        assert_eq!(p.stats.as_ref(), Some(h));
    }
    assert!(seen.iter().all(|p| p.loss.is_finite() && p.loss > 0.0), "{seen:?}");

    // Break stops after the current batch: Cancelled, with the updates kept.
    let err = trainer.fit_with(&data, None, 5, |p| {
        if p.phase == ProgressPhase::Batch && p.batch == 8 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    }).unwrap_err();
    assert_eq!(err.status, Status::Cancelled, "{err}");
    assert_eq!(trainer.steps_done().unwrap(), 2 * 16 + 8);

    // A panic stops training, does not cross into C, and comes back here.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = trainer.fit_with(&data, None, 3, |_| panic!("boom from the callback"));
    }));
    let payload = caught.expect_err("the panic is resumed after fit");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom from the callback"));
    // The trainer is usable afterwards.
    let steps = trainer.steps_done().unwrap();
    trainer.epoch(&data).unwrap();
    assert_eq!(trainer.steps_done().unwrap(), steps + 16);
}

#[test]
fn log_callback_receives_records_at_the_level_set() {
    use std::sync::Mutex;
    let records: Arc<Mutex<Vec<(kiln::LogLevel, String)>>> = Arc::default();
    let sink = Arc::clone(&records);
    let options = ContextOptions::default()
        .log_level(kiln::LogLevel::Debug)
        .log(move |level, message| sink.lock().unwrap().push((level, message.to_owned())));
    let ctx = Context::with_options(&options).unwrap();
    let (x, y) = tensors(&ctx, 64);
    let mut model = Model::from_text(&ctx, "16-8-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    trainer.step(&x, &y).unwrap();
    let got = records.lock().unwrap().clone();
    assert!(got.iter().any(|(level, m)| *level == kiln::LogLevel::Debug && m.contains("compiled")), "{got:?}");
    assert!(got.iter().all(|(_, m)| !m.is_empty() && !m.ends_with('\n')));

    // At the default level (warnings) the same work logs nothing, and a
    // panicking callback cannot unwind into C.
    let quiet = Context::with_options(&ContextOptions {
        log: Some(Arc::new(|_, m: &str| panic!("unexpected record {m}"))),
        ..Default::default()
    }).unwrap();
    let mut model = Model::from_text(&quiet, "16-8-4", Device::Cpu).unwrap();
    let (x, y) = tensors(&quiet, 64);
    Trainer::new(&mut model, &TrainerOptions::default()).unwrap().step(&x, &y).unwrap();
    let panicking = Context::with_options(&ContextOptions {
        log_level: Some(kiln::LogLevel::Debug),
        log: Some(Arc::new(|_, _: &str| panic!("a panicking logger"))),
        ..Default::default()
    }).unwrap();
    let mut model = Model::from_text(&panicking, "16-8-4", Device::Cpu).unwrap();
    Trainer::new(&mut model, &TrainerOptions::default()).unwrap().step(&x, &y).unwrap();

    // The C context outlives the Rust one while a model holds it; its records
    // then go to stderr, never to the dropped closure.
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    let loud = Context::with_options(&ContextOptions {
        log_level: Some(kiln::LogLevel::Debug),
        log: Some(Arc::new(move |_, _: &str| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })),
        ..Default::default()
    }).unwrap();
    let mut model = Model::from_text(&loud, "16-8-4", Device::Cpu).unwrap();
    let (x, y) = tensors(&loud, 64);
    Trainer::new(&mut model, &TrainerOptions::default()).unwrap().step(&x, &y).unwrap();
    let before = count.load(std::sync::atomic::Ordering::SeqCst);
    assert!(before > 0);
    drop(loud);
    Trainer::new(&mut model, &TrainerOptions::default().batch_size(16)).unwrap().step(&x, &y).unwrap();
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), before);
}

#[test]
fn batches_cover_the_dataset_in_order_for_step_wise_training() {
    let ctx = context();
    let (xs, ys) = blobs(100, 16, 4, 7);
    let x = Tensor::from_slice(&ctx, &xs, &[100, 16], Device::Cpu).unwrap();
    let y = Tensor::from_slice(&ctx, &ys, &[100], Device::Cpu).unwrap();
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let batches = data.batches(32, Device::Cpu).unwrap();
    assert_eq!(batches.len(), 4);
    let (mut got_x, mut got_y, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    for batch in batches {
        let (bx, by) = batch.unwrap();
        sizes.push(bx.shape().unwrap()[0]);
        got_x.extend(bx.to_vec::<f32>().unwrap());
        got_y.extend(by.to_vec::<i64>().unwrap());
    }
    assert_eq!(sizes, vec![32, 32, 32, 4]);
    assert_eq!((got_x, got_y), (xs, ys));
    assert_eq!(data.batches(0, Device::Cpu).unwrap_err().status, Status::InvalidArgument);
    // The largest batch size is one batch of all 100, in len() as in the items.
    let whole = data.batches(i64::MAX, Device::Cpu).unwrap();
    assert_eq!(whole.len(), 1);
    let sizes: Vec<i64> = whole.map(|b| b.unwrap().0.shape().unwrap()[0]).collect();
    assert_eq!(sizes, vec![100]);

    // Step-wise training with the pull forms: the loss falls.
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default().optimizer(Optimizer::Adam).lr(0.01)).unwrap();
    let mut epoch_losses = Vec::new();
    for _ in 0..5 {
        let mut total = 0.0;
        for batch in data.batches(25, Device::Cpu).unwrap() {
            let (bx, by) = batch.unwrap();
            total += trainer.step(&bx, &by).unwrap();
        }
        epoch_losses.push(total / 4.0);
    }
    assert!(epoch_losses[4] < 0.5 * epoch_losses[0], "{epoch_losses:?}");
    assert_eq!(trainer.steps_done().unwrap(), 20);
    // Epochs as an iterator, stopped early by the caller.
    let stats: Vec<kiln::EpochStats> =
        trainer.epochs(&data, 10).map(Result::unwrap).take_while(|s| s.epoch < 3).collect();
    assert_eq!(stats.iter().map(|s| s.epoch).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(trainer.epochs_done().unwrap(), 3);
}

/// The model stays reachable through its trainer, so that saving and
/// predicting between epochs compiles; what was saved then is the model of
/// that moment, and training goes on afterwards.
#[test]
fn trainer_lends_its_model_between_epochs() {
    let ctx = common::context();
    let dir = common::temp_dir("lend");
    let (x, y) = common::tensors(&ctx, 256);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let mut model = Model::from_text(&ctx, "16-8-4", Device::Cpu).unwrap();
    let options = TrainerOptions::default().optimizer(Optimizer::Adam).lr(0.01).batch_size(32);
    let mut trainer = Trainer::new(&mut model, &options).unwrap();
    let mut saved = Vec::new();
    for epoch in 1..=2 {
        let stats = trainer.epoch(&data).unwrap();
        assert_eq!(stats.epoch, epoch);
        assert_eq!(stats.validation, None);
        let path = dir.join(format!("epoch{epoch}.safetensors"));
        trainer.model().save(&path).unwrap();
        saved.push((path, common::logits(trainer.model(), &x)));
    }
    assert_eq!(trainer.steps_done().unwrap(), 16); // 2 epochs of 256 / 32 batches
    drop(trainer);
    assert_ne!(saved[0].1, saved[1].1, "the second epoch changed nothing");
    for (path, logits) in &saved {
        let loaded = Model::load(&ctx, path, Device::Cpu).unwrap();
        assert_eq!(&common::logits(&loaded, &x), logits);
    }
    assert_eq!(common::logits(&model, &x), saved[1].1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Validation figures are named fields.
#[test]
fn epoch_validation_has_named_fields() {
    let ctx = common::context();
    let (x, y) = common::tensors(&ctx, 256);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let (train, test) = data.split(0.25, 3).unwrap();
    let mut model = Model::from_text(&ctx, "16-8-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default().batch_size(32)).unwrap();
    let history = trainer.fit(&train, Some(&test), 1).unwrap();
    let kiln::Validation { loss, accuracy } = history[0].validation.expect("validation figures");
    let (eval_loss, eval_accuracy) = trainer.evaluate(&test).unwrap();
    assert!((loss - eval_loss).abs() < 1e-9 && (accuracy - eval_accuracy).abs() < 1e-12,
            "fit's validation {loss} {accuracy}, evaluate's {eval_loss} {eval_accuracy}");
    assert!(history[0].to_string().contains(&format!("validation loss {loss:.4} accuracy {accuracy:.4}")));
}
