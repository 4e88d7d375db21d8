// Trains the tutorial MLP (784-32-10) on Fashion-MNIST and prints the test
// accuracy. Usage: go run . [DATA_DIR]
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/signal"

	kiln "github.com/kiln-ml/kiln/bindings/go"
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
	if errors.Is(err, fs.ErrNotExist) {
		log.Fatalf("no Fashion-MNIST in %s (give its directory as the argument): %v", dir, err)
	}
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

	// Ctrl-C stops training at the end of the epoch; the model keeps what it learnt.
	sigctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err = trainer.Fit(sigctx, train, nil, 3, kiln.OnProgress(func(p kiln.Progress) error {
		s := p.Stats
		fmt.Printf("epoch %d: loss %.4f, train accuracy %.4f, %.0f samples/s\n",
			s.Epoch, s.TrainLoss, s.TrainAccuracy, s.SamplesPerSecond)
		return nil
	}))
	if errors.Is(err, context.Canceled) {
		fmt.Println("interrupted")
	} else {
		check(err)
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
