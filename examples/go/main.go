// Trains the tutorial MLP (784-32-10) on Fashion-MNIST and prints the test
// accuracy. Usage: go run . [DATA_DIR]
package main

import (
	"fmt"
	"log"
	"os"

	"kiln"
)

func main() {
	dir := "/usr/share/datasets/fashion-mnist"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	ctx, err := kiln.NewContext(kiln.WithSeed(0))
	check(err)
	defer ctx.Close()
	dev, err := ctx.DefaultDevice()
	check(err)
	fmt.Println("device:", dev)

	train, err := ctx.LoadMNIST(dir, "train")
	check(err)
	defer train.Close()
	test, err := ctx.LoadMNIST(dir, "test")
	check(err)
	defer test.Close()

	model, err := ctx.NewModelFromText("784-32-10", dev)
	check(err)
	defer model.Close()
	trainer, err := kiln.NewTrainer(model, kiln.WithOptimizer(kiln.Adam), kiln.WithLR(1e-3), kiln.WithBatchSize(64))
	check(err)
	defer trainer.Close()

	for epoch := 1; epoch <= 3; epoch++ {
		s, err := trainer.Epoch(train)
		check(err)
		fmt.Printf("epoch %d: loss %.4f, train accuracy %.4f, %.0f samples/s\n",
			s.Epoch, s.TrainLoss, s.TrainAccuracy, s.SamplesPerSecond)
	}
	loss, acc, err := trainer.Evaluate(test)
	check(err)
	fmt.Printf("test: loss %.4f, accuracy %.4f\n", loss, acc)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
