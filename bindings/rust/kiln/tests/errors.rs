//! Error paths of the public functions: bad input gives its specific status
//! and a message, and leaves the library usable. (NULL and released handles
//! cannot be written in safe Rust: every handle is owned or borrowed.)
mod common;
use common::*;

use kiln::{Context, ContextOptions, DType, Dataset, Device, LayerKind, Model, ModelSpec, PredictKind, ReduceOp, Status,
           Tensor, Trainer, TrainerOptions, UnaryOp};

/// Asserts a failure's status and that it says something.
#[track_caller]
fn fails<T: std::fmt::Debug>(result: kiln::Result<T>, status: Status) {
    let err = result.expect_err("a failure");
    assert_eq!(err.status, status, "{err}");
    assert!(!err.message.is_empty(), "{err:?}");
}

#[test]
fn context_and_device_errors() {
    fails(Context::with_options(&ContextOptions { threads: Some(-1), ..Default::default() }), Status::InvalidArgument);
    let ctx = Context::with_options(&ContextOptions { enable_cuda: Some(false), threads: Some(2), ..Default::default() })
        .unwrap();
    assert!(ctx.cuda_status().unwrap().unwrap_err().contains("disabled"), "{:?}", ctx.cuda_status());
    assert_eq!(ctx.default_device().unwrap(), Device::Cpu);
    assert_eq!(ctx.device_info(Device::Cpu).unwrap().threads, 2);
    fails(ctx.device_info(Device::Cuda(0)), Status::DeviceUnavailable);
    fails(ctx.synchronize(Device::Cuda(0)), Status::DeviceUnavailable);
    fails(ctx.parse_device("cuda:x"), Status::InvalidArgument);
    fails(ctx.parse_device("cpu\0"), Status::InvalidArgument);
    assert_eq!(ctx.parse_device("auto").unwrap(), Device::Cpu);
    ctx.synchronize(Device::Cpu).unwrap();
    // A device kiln cannot format still prints.
    assert_eq!(Device::Cuda(-3).to_string(), "Cuda(-3)");
}

#[test]
fn tensor_errors() {
    let ctx = context();
    let cpu = Device::Cpu;
    fails(Tensor::zeros(&ctx, &[2, -1], DType::F32, cpu), Status::InvalidArgument);
    fails(Tensor::zeros(&ctx, &[1; 9], DType::F32, cpu), Status::InvalidArgument);
    fails(Tensor::full(&ctx, &[2], DType::U8, cpu, 300.0), Status::InvalidArgument);
    fails(Tensor::rand(&ctx, &[2], DType::I32, cpu), Status::DTypeMismatch);
    fails(Tensor::randn(&ctx, &[2], DType::U8, cpu), Status::DTypeMismatch);
    fails(Tensor::arange(&ctx, 0.0, 1.0, 0.0, DType::F32, cpu), Status::InvalidArgument);
    fails(Tensor::from_slice(&ctx, &[1u8, 2, 3], &[4], cpu), Status::InvalidArgument);
    fails(Tensor::ones(&ctx, &[2], DType::F32, Device::Cuda(0)), Status::DeviceUnavailable);
    let mut t = Tensor::arange(&ctx, 0.0, 6.0, 1.0, DType::F32, cpu).unwrap();
    fails(t.to_vec::<f64>(), Status::DTypeMismatch);
    fails(t.copy_from(&[1i32; 6]), Status::DTypeMismatch);
    fails(t.copy_from(&[1.0f32; 5]), Status::InvalidArgument);
    fails(t.item(), Status::ShapeMismatch);
    fails(t.reshape(&[4, 2]), Status::ShapeMismatch);
    fails(t.rows(4, 9), Status::InvalidArgument);
    fails(t.rows_mut(3, 2), Status::InvalidArgument);
    fails(t.reshape_mut(&[-1, -1]), Status::ShapeMismatch);
    fails(t.to(Device::Cuda(0)), Status::DeviceUnavailable);
    fails(t.softmax(3), Status::InvalidArgument);
    fails(t.reduce(ReduceOp::Sum, 1, false), Status::InvalidArgument);
    let ints = t.cast(DType::I64).unwrap();
    assert_eq!(ints.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    fails(ints.unary(UnaryOp::Exp, 0.0), Status::DTypeMismatch);
    fails(ints.reduce(ReduceOp::Mean, 0, false), Status::DTypeMismatch);
    fails(ints.log_softmax(0), Status::DTypeMismatch);
    fails(t.matmul(&ints), Status::DTypeMismatch);
    fails(&ints * 1e300, Status::InvalidArgument);
    let empty = Tensor::zeros(&ctx, &[0, 3], DType::F32, cpu).unwrap();
    fails(empty.reduce(ReduceOp::Max, 0, false), Status::InvalidArgument);
    // Still usable, and the failed write left the tensor as it was.
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(t.reshape(&[2, -1]).unwrap().softmax(1).unwrap().shape().unwrap(), vec![2, 3]);
}

#[test]
fn model_and_file_errors() {
    let ctx = context();
    let dir = temp_dir("errors");
    fails(ModelSpec::parse("784-"), Status::InvalidArgument);
    fails(ModelSpec::parse("8-4\0"), Status::InvalidArgument);
    let mut spec = ModelSpec::new().unwrap();
    fails(Model::new(&ctx, &spec, Device::Cpu), Status::InvalidArgument);
    spec.add_linear(8, 4, true).unwrap();
    fails(spec.add_linear(5, 2, true), Status::ShapeMismatch);
    fails(spec.add(LayerKind::Dropout, 1.5), Status::InvalidArgument);
    fails(spec.add_mlp(&[4], LayerKind::Relu), Status::InvalidArgument);
    fails(spec.append("9-2"), Status::ShapeMismatch);
    fails(Model::new(&ctx, &spec, Device::Cuda(0)), Status::DeviceUnavailable);
    let mut model = Model::new(&ctx, &spec, Device::Cpu).unwrap();
    assert_eq!(spec.to_string(), "linear(8, 4)");
    fails(model.parameter(2), Status::InvalidArgument);
    fails(model.parameter_mut(-1), Status::InvalidArgument);
    fails(model.to(Device::Cuda(0)), Status::DeviceUnavailable);
    let x = Tensor::ones(&ctx, &[3, 5], DType::F32, Device::Cpu).unwrap();
    fails(model.forward(&x), Status::ShapeMismatch);
    fails(model.predict(&x, PredictKind::Classes), Status::ShapeMismatch);

    // Hostile and mismatched files.
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"\xff\xff\xff\xff\xff\xff\xff\x7f{not json").unwrap();
    fails(Model::load(&ctx, &garbage, Device::Cpu), Status::Format);
    fails(model.load_weights(&garbage), Status::Format);
    fails(Model::load_with_spec(&ctx, &garbage, &spec, Device::Cpu), Status::Format);
    fails(Model::load(&ctx, &dir, Device::Cpu), Status::Io);
    let other = dir.join("other.safetensors");
    Model::from_text(&ctx, "8-3", Device::Cpu).unwrap().save(&other).unwrap();
    fails(model.load_weights(&other), Status::ShapeMismatch);
    fails(Model::load_with_spec(&ctx, &other, &spec, Device::Cpu), Status::ShapeMismatch);
    fails(model.save(dir.join("no/such/dir/m.safetensors")), Status::Io);
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    fails(trainer.load_checkpoint(&garbage), Status::Format);
    fails(trainer.load_checkpoint(&other), Status::Format);
    drop(trainer);
    let idx = dir.join("images.idx");
    std::fs::write(&idx, [0u8, 0, 8, 3, 0, 0, 0, 9]).unwrap();
    fails(Dataset::load_idx(&ctx, &idx, &idx), Status::Format);
    fails(Dataset::load_mnist(&ctx, &dir, "validation"), Status::InvalidArgument);
    std::fs::remove_dir_all(&dir).unwrap();
    // Still usable.
    assert_eq!(model.forward(&Tensor::ones(&ctx, &[3, 8], DType::F32, Device::Cpu).unwrap()).unwrap().shape().unwrap(), vec![3, 4]);
}

#[test]
fn dataset_and_training_errors() {
    let ctx = context();
    let (x, y) = tensors(&ctx, 64);
    let short = Tensor::zeros(&ctx, &[10], DType::I64, Device::Cpu).unwrap();
    fails(Dataset::from_tensors(&ctx, &x, &short), Status::ShapeMismatch);
    let negative = Tensor::full(&ctx, &[64], DType::I64, Device::Cpu, -1.0).unwrap();
    fails(Dataset::from_tensors(&ctx, &x, &negative), Status::InvalidArgument);
    let mut data = Dataset::from_tensors(&ctx, &x, &y).unwrap();
    assert_eq!(data.to_string(), "dataset (64 samples, 16 features, 4 classes)");
    fails(data.set_normalization(1.0, 0.0, 0.0), Status::InvalidArgument);
    fails(data.split(1.0, 0), Status::InvalidArgument);
    fails(data.batch(60, 10, Device::Cpu), Status::InvalidArgument);
    fails(data.batch(0, 10, Device::Cuda(0)), Status::DeviceUnavailable);
    fails(data.batches(-1, Device::Cpu), Status::InvalidArgument);

    let mut model = Model::from_text(&ctx, "16-8-4", Device::Cpu).unwrap();
    let mut trainer = Trainer::new(&mut model, &TrainerOptions::default()).unwrap();
    fails(trainer.fit(&data, None, 0), Status::InvalidArgument);
    fails(trainer.step(&x, &short), Status::ShapeMismatch);
    let wide = Tensor::zeros(&ctx, &[64, 5], DType::F32, Device::Cpu).unwrap();
    fails(trainer.step(&wide, &y), Status::ShapeMismatch);
    let other = Tensor::zeros(&ctx, &[64, 5], DType::F32, Device::Cpu).unwrap();
    let wrong_width = Dataset::from_tensors(&ctx, &other, &y).unwrap();
    fails(trainer.evaluate(&wrong_width), Status::ShapeMismatch);
    fails(trainer.epochs(&wrong_width, 3).next().unwrap(), Status::ShapeMismatch);
    assert_eq!(trainer.epochs(&wrong_width, 3).count(), 1, "the iterator ends after an error");
    fails(kiln::loss(kiln::LossKind::CrossEntropy, &x, &short), Status::ShapeMismatch);
    // Still usable.
    assert_eq!(trainer.epoch(&data).unwrap().epoch, 1);
}
