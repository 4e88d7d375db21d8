//! Helpers shared by the test binaries.
#![allow(dead_code)]
use kiln::{Context, ContextOptions, Dataset, Device, Model, Optimizer, PredictKind, Tensor, Trainer, TrainerOptions};

pub fn context() -> Context {
    Context::with_options(&ContextOptions::default().seed(42)).unwrap()
}

/// Gaussian clusters: n samples of `classes` classes in `features` dims.
pub fn blobs(n: usize, features: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
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

pub fn tensors(ctx: &Context, n: usize) -> (Tensor, Tensor) {
    let (x, y) = blobs(n, 16, 4, 7);
    (Tensor::from_slice(ctx, &x, &[n as i64, 16], Device::Cpu).unwrap(),
     Tensor::from_slice(ctx, &y, &[n as i64], Device::Cpu).unwrap())
}

pub fn trained(ctx: &Context) -> (Model, Tensor) {
    let dev = ctx.default_device().unwrap();
    let (x, y) = tensors(ctx, 1024);
    let mut model = Model::from_text(ctx, "16-32-4", dev).unwrap();
    {
        // The datasets borrow x and y, so they end before x is returned.
        let data = Dataset::from_tensors(ctx, &x, &y).unwrap();
        let (train, test) = data.split(0.25, 1).unwrap();
        let options = TrainerOptions::default().optimizer(Optimizer::Adam).lr(0.01).batch_size(32);
        let mut trainer = Trainer::new(&mut model, &options).unwrap();
        let history = trainer.fit(&train, Some(&test), 5).unwrap();
        let last = history.last().unwrap();
        assert_eq!(history.len(), 5);
        assert!(last.train_accuracy > 0.9, "{last:?}");
        let val_acc = last.validation.expect("validation stats").accuracy;
        assert!(val_acc > 0.9, "{last:?}");
        let (_, acc) = trainer.evaluate(&test).unwrap();
        assert!(acc > 0.9, "accuracy {acc}, chance is 0.25");
        assert_eq!(trainer.epochs_done().unwrap(), 5);
    }
    (model, x)
}

pub fn logits(model: &Model, x: &Tensor) -> Vec<f32> {
    model.predict(x, PredictKind::Logits).unwrap().to(Device::Cpu).unwrap().to_vec::<f32>().unwrap()
}


/// The process's resident set and its peak, in bytes (VmRSS and VmHWM of
/// /proc/self/status).
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in /proc/self/status"));
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A fresh temporary directory for one test, removed by the caller.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-rust-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
