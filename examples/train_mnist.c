/* The PyTorch GPU tutorial's training run, step by step, with kiln:
 *
 *   1. load Fashion-MNIST               (torchvision.datasets.FashionMNIST)
 *   2. hold out 10% for validation      (random_split)
 *   3. build 784-32-10 with ReLU on the default device
 *                                       (nn.Sequential(Linear, ReLU, Linear).to(device))
 *   4. cross-entropy, SGD lr 0.1, batches of 128, shuffled each epoch
 *   5. train 5 epochs, validating after each
 *   6. score the test set
 *   7. save the weights (safetensors, loadable by kiln_model_load)
 *
 * usage: train_mnist [DATA_DIR [MODEL_FILE]]
 */
#include <stdio.h>
#include <stdlib.h>

#include <kiln/kiln.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != KILN_OK) {                                                          \
      fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error());                   \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Called by kiln_trainer_fit on this thread after each epoch; returning
 * non-zero would stop training. */
static int on_progress(void *user, const kiln_progress *p) {
  (void)user;
  if (p->phase == KILN_PROGRESS_EPOCH)
    printf("epoch %lld/%lld  loss %.4f  val accuracy %.2f%%  (%.0f samples/s)\n", (long long)p->epoch,
           (long long)p->epochs, p->stats->train_loss, 100.0 * p->stats->val_accuracy, p->samples_per_second);
  return 0;
}

int main(int argc, char **argv) {
  const char *data_dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const char *model_file = argc > 2 ? argv[2] : "fashion_mnist_mlp.safetensors";

  kiln_context *ctx = NULL;
  kiln_device device;
  CHECK(kiln_context_create(NULL, &ctx));
  CHECK(kiln_context_set_seed(ctx, 42)); /* torch.manual_seed(42) */
  CHECK(kiln_default_device(ctx, &device));

  /* 1-2. Data: 60,000 training images, 10% held out; 10,000 test images. */
  kiln_dataset *full = NULL, *train = NULL, *val = NULL, *test = NULL;
  CHECK(kiln_dataset_load_mnist(ctx, data_dir, "train", &full));
  CHECK(kiln_dataset_load_mnist(ctx, data_dir, "test", &test));
  CHECK(kiln_dataset_split(full, 0.1, 42, &train, &val));

  /* 3. The model. */
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  CHECK(kiln_model_spec_create(&spec));
  CHECK(kiln_model_spec_parse(spec, "784-32-10")); /* ReLU between layers */
  CHECK(kiln_model_create(ctx, spec, device, &model));

  /* 4. Loss and optimizer. */
  kiln_trainer_options *options = NULL;
  kiln_trainer *trainer = NULL;
  CHECK(kiln_trainer_options_create(&options));
  CHECK(kiln_trainer_options_set_loss(options, KILN_LOSS_CROSS_ENTROPY));
  CHECK(kiln_trainer_options_set_optimizer(options, KILN_OPTIM_SGD));
  CHECK(kiln_trainer_options_set_lr(options, 0.1));
  CHECK(kiln_trainer_options_set_batch_size(options, 128));
  CHECK(kiln_trainer_create(model, options, &trainer));

  /* 5. Train. */
  kiln_history *history = NULL;
  CHECK(kiln_trainer_fit(trainer, train, val, 5, on_progress, NULL, &history));

  /* 6. Test. */
  double loss = 0, accuracy = 0;
  CHECK(kiln_trainer_evaluate(trainer, test, &loss, &accuracy));
  printf("test loss %.4f, test accuracy %.2f%%\n", loss, 100.0 * accuracy);

  /* 7. Save. */
  CHECK(kiln_model_save(model, model_file));
  printf("saved %s\n", model_file);

  kiln_history_release(history);
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(options);
  kiln_model_release(model);
  kiln_model_spec_release(spec);
  kiln_dataset_release(test);
  kiln_dataset_release(val);
  kiln_dataset_release(train);
  kiln_dataset_release(full);
  kiln_context_release(ctx);
  return 0;
}
