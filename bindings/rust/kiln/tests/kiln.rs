//! Integration tests of the safe bindings against the real libkiln.
use std::sync::Arc;
use std::thread;

use kiln::{Context, ContextOptions, DType, Dataset, Device, Model, Optimizer, PredictKind, Status, Tensor, Trainer,
           TrainerOptions};

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
