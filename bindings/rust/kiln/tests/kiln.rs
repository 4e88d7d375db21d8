//! Integration tests of the safe bindings against the real libkiln.
use std::sync::Arc;
use std::thread;

use kiln::{Context, ContextOptions, DType, Dataset, Device, FastPath, Model, Optimizer, Precision, PredictKind, Status,
           Tensor, Trainer, TrainerOptions};

fn context() -> Context {
    Context::with_options(&ContextOptions { seed: Some(42), ..Default::default() }).unwrap()
}

/// Gaussian clusters: n samples of `classes` classes in `features` dims.
fn blobs(n: usize, features: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    // A small xorshift generator with Box-Muller, so the test needs no crates.
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut normal = move || {
        let (u, v) = (uniform().max(1e-12), uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    };
    let centers: Vec<f64> = (0..classes * features).map(|_| normal() * 3.0).collect();
    let (mut x, mut y) = (Vec::with_capacity(n * features), Vec::with_capacity(n));
    for i in 0..n {
        let c = i % classes;
        y.push(c as i64);
        x.extend((0..features).map(|j| (centers[c * features + j] + normal()) as f32));
    }
    (x, y)
}

fn tensors(ctx: &Context, n: usize) -> (Tensor, Tensor) {
    let (x, y) = blobs(n, 16, 4, 7);
    (Tensor::from_slice(ctx, &x, &[n as i64, 16], Device::Cpu).unwrap(),
     Tensor::from_slice(ctx, &y, &[n as i64], Device::Cpu).unwrap())
}

fn trained(ctx: &Context) -> (Model, Tensor) {
    let dev = ctx.default_device().unwrap();
    let (x, y) = tensors(ctx, 1024);
    let mut model = Model::from_text(ctx, "16-32-4", dev).unwrap();
    {
        // The datasets borrow x and y, so they end before x is returned.
        let data = Dataset::from_tensors(ctx, &x, &y).unwrap();
        let (train, test) = data.split(0.25, 1).unwrap();
        let options = TrainerOptions { optimizer: Optimizer::adam(), lr: 0.01, batch_size: 32, ..Default::default() };
        let mut trainer = Trainer::new(&mut model, &options).unwrap();
        let history = trainer.fit(&train, Some(&test), 5).unwrap();
        let last = history.last().unwrap();
        assert_eq!(history.len(), 5);
        assert!(last.train_accuracy > 0.9, "{last:?}");
        let (_, val_acc) = last.validation.expect("validation stats");
        assert!(val_acc > 0.9, "{last:?}");
        let (_, acc) = trainer.evaluate(&test).unwrap();
        assert!(acc > 0.9, "accuracy {acc}, chance is 0.25");
        assert_eq!(trainer.epochs_done().unwrap(), 5);
    }
    (model, x)
}

fn logits(model: &Model, x: &Tensor) -> Vec<f32> {
    model.predict(x, PredictKind::Logits).unwrap().to(Device::Cpu).unwrap().to_vec::<f32>().unwrap()
}

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
    let doubled = moved.add(&moved).unwrap().to(Device::Cpu).unwrap().to_vec::<f32>().unwrap();
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
    let options = TrainerOptions {
        lr: 0.003,
        batch_size: 32,
        shuffle_seed: Some(3),
        precision: Some(precision),
        ..Default::default()
    };
    let mut trainer = Trainer::new(&mut model, &options).unwrap();
    let history = trainer.fit(&train, Some(&val), 5).unwrap();
    let last = history.last().unwrap();
    (last.train_loss, last.validation.expect("validation stats").1)
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
    let err = Trainer::new(&mut model, &options).err().expect("a tf32 trainer on the CPU");
    assert_eq!(err.status, Status::NotSupported);
    assert!(err.message.contains("tf32"), "{err}");
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
        let err = Trainer::new(&mut model, &options).err().expect("bits outside ALL");
        assert_eq!(err.status, Status::InvalidArgument, "{bits:#x}: {err}");
    }
}

#[test]
fn every_status_code_maps_to_a_status() {
    assert_eq!(Status::from_code(9), Status::NotSupported);
    assert_eq!(Status::from_code(13), Status::Busy);
    assert_eq!(Status::from_code(14), Status::Numeric);
    // Codes newer than the bindings (and 0, which is no failure) are kept.
    for code in [0, 15, 99, u32::MAX] {
        assert_eq!(Status::from_code(code), Status::Unknown(code));
    }
    let err = kiln::Error { status: Status::from_code(99), message: "from the future".into() };
    assert_eq!(err.to_string(), "Unknown(99): from the future");
}

#[test]
fn divergence_is_a_numeric_error() {
    let ctx = context();
    let (x, y) = tensors(&ctx, 256);
    let data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    let mut model = Model::from_text(&ctx, "16-32-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions { lr: 1e30, ..Default::default() }).unwrap();
    let err = (0..5).find_map(|_| trainer.epoch(&data).err()).expect("lr 1e30 diverges");
    assert_eq!(err.status, Status::Numeric, "{err}");
}
