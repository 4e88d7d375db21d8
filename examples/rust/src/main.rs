//! Trains the tutorial MLP (784-32-10) on Fashion-MNIST and prints the test
//! accuracy. Usage: cargo run --release [DATA_DIR]
use kiln::{Context, ContextOptions, Dataset, Model, Optimizer, Trainer, TrainerOptions};

fn main() -> Result<(), kiln::Error> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/usr/share/datasets/fashion-mnist".into());
    let ctx = Context::with_options(&ContextOptions { seed: Some(0), ..Default::default() })?;
    let device = ctx.default_device()?;
    println!("device: {device}");

    let train = Dataset::load_mnist(&ctx, &dir, "train")?;
    let test = Dataset::load_mnist(&ctx, &dir, "test")?;
    let mut model = Model::from_text(&ctx, "784-32-10", device)?;
    let options = TrainerOptions { optimizer: Optimizer::adam(), lr: 1e-3, batch_size: 64, ..Default::default() };
    let mut trainer = Trainer::new(&mut model, &options)?;

    for _ in 0..3 {
        let s = trainer.epoch(&train)?;
        println!("epoch {}: loss {:.4}, train accuracy {:.4}, {:.0} samples/s",
                 s.epoch, s.train_loss, s.train_accuracy, s.samples_per_second);
    }
    let (loss, accuracy) = trainer.evaluate(&test)?;
    println!("test: loss {loss:.4}, accuracy {accuracy:.4}");
    Ok(())
}
