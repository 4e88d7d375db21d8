// Trains the tutorial MLP (784-32-10) on Fashion-MNIST and prints the test
// accuracy. Usage: mono FashionMnist.exe [DATA_DIR]
using System;
using Kiln;

static class FashionMnist
{
    static void Main(string[] args)
    {
        string dir = args.Length > 0 ? args[0] : "/usr/share/datasets/fashion-mnist";
        using (var ctx = new Context(seed: 0))
        {
            var device = ctx.DefaultDevice;
            Console.WriteLine("device: " + device);
            using (var train = Dataset.LoadMnist(ctx, dir, "train"))
            using (var test = Dataset.LoadMnist(ctx, dir, "test"))
            using (var model = new Model(ctx, "784-32-10", device))
            using (var trainer = new Trainer(model, new TrainerOptions { Optimizer = OptimizerKind.Adam, Lr = 1e-3, BatchSize = 64 }))
            {
                for (int epoch = 1; epoch <= 3; epoch++)
                {
                    var s = trainer.Epoch(train);
                    Console.WriteLine($"epoch {s.Epoch}: loss {s.TrainLoss:F4}, train accuracy {s.TrainAccuracy:F4}, {s.SamplesPerSecond:F0} samples/s");
                }
                var (loss, accuracy) = trainer.Evaluate(test);
                Console.WriteLine($"test: loss {loss:F4}, accuracy {accuracy:F4}");
            }
        }
    }
}
