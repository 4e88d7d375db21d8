//! Trains the tutorial MLP (784-32-10) on Fashion-MNIST and prints the test
//! accuracy. Usage: cargo run --release [DATA_DIR]
use std::ops::ControlFlow;

use kiln::{Context, ContextOptions, Dataset, Model, Optimizer, Trainer, TrainerOptions};

fn main() -> Result<(), kiln::Error> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/usr/share/datasets/fashion-mnist".into());
    let ctx = Context::with_options(&ContextOptions::default().seed(0))?;
    let device = ctx.default_device()?;
    println!("device: {device}");

    let train = Dataset::load_mnist(&ctx, &dir, "train")?;
    let test = Dataset::load_mnist(&ctx, &dir, "test")?;
    println!("train: {train}");
    let mut model = Model::from_text(&ctx, "784-32-10", device)?;
    println!("{model}");
    let options = TrainerOptions::default().optimizer(Optimizer::Adam).lr(1e-3).batch_size(64).progress_interval(300);
    let mut trainer = Trainer::new(&mut model, &options)?;

    trainer.fit_with(&train, None, 3, |progress| {
        println!("{progress}");
        ControlFlow::Continue(())
    })?;
    let (loss, accuracy) = trainer.evaluate(&test)?;
    println!("test: loss {loss:.4}, accuracy {accuracy:.4}");
    Ok(())
}
