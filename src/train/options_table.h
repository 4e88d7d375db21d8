/* The trainer options, declared once (DESIGN.md, "Settings"). Every place
 * that needs to know about an option reads this table:
 *
 *   - the C setters (src/api/trainer.cpp: each row with KILN_OPTION is a
 *     generated setter; KILN_OPTION_CUSTOM rows go through a hand-written one
 *     taking several values, which still checks each against its row),
 *   - the trainer's checks of options built in C++ (train/options.cpp),
 *   - the fingerprint that data-parallel ranks compare when they attach
 *     (the rows with KILN_OPTION_RANKS_AGREE),
 *   - the checkpoint's metadata (the rows with KILN_OPTION_CHECKPOINT),
 *   - the kiln program's flags, their help and defaults (tools/kiln/train.c,
 *     the rows with a flag), which hand each value to the setter so that the
 *     library's range is the only one,
 *   - the bindings' option lists, which tests/options_table_test.py checks
 *     against this table.
 *
 * C and C++: a list of X-macro rows, nothing else, so it can be included
 * inside a declaration. Its values need kiln/kiln.h and math.h (INFINITY)
 * included before. A user of the table defines KILN_OPTION and
 * KILN_OPTION_CUSTOM (or KILN_OPTION alone: the custom rows then expand as
 * plain rows), includes this file, and it undefines both again. Columns:
 *
 *   id       the option's name: the key in checkpoints and fingerprints,
 *            the name in messages
 *   setter   the C setter, kiln_trainer_options_set_<setter>: <id> itself for
 *            KILN_OPTION rows (generated), the shared one of KILN_OPTION_CUSTOM
 *            rows (betas, schedule, devices)
 *   kind     DOUBLE (finite), INT (int64_t), UINT (uint64_t), BOOL (int, any
 *            value: non-zero is on), ENUM (an enumerator in [lo, hi], named
 *            by `names`), BITS (uint32_t, a mask within hi), DEVICES (a list,
 *            the setter's own)
 *   ctype    the setter's parameter type (TrainerOptions keeps the value as
 *            a member named id: ENUM as ctype, DOUBLE as double, INT as
 *            int64_t, UINT as uint64_t, BOOL as bool, BITS as uint32_t,
 *            DEVICES as a vector of devices)
 *   dflt     the default (a number; ENUM: the enumerator)
 *   lo, hi   the range; each bound is closed unless KILN_OPTION_LO_OPEN /
 *            KILN_OPTION_HI_OPEN; +-INFINITY for none
 *   flags    KILN_OPTION_* below
 *   names    ENUM: the enumerators' names in value order, '|'-separated
 *            (also the CLI's and the checkpoint's spelling); else ""
 *   flag     the kiln train flag, without "--", or "" for none
 *   meta     the flag's value in --help ("X", "N", "NAME")
 *   unit     what one unit of the flag's value is in the option's units (1,
 *            or 1048576 for a flag in MiB of an option in bytes)
 *   help     one line for --help, without the default
 */
#ifndef KILN_OPTION_CUSTOM
#define KILN_OPTION_CUSTOM KILN_OPTION
#endif

/* Flags (an int, or-ed). */
#ifndef KILN_OPTION_FLAGS_DEFINED
#define KILN_OPTION_FLAGS_DEFINED
#define KILN_OPTION_LO_OPEN 1      /* lo itself is outside the range */
#define KILN_OPTION_HI_OPEN 2      /* hi itself is outside the range */
#define KILN_OPTION_RANKS_AGREE 4  /* data-parallel ranks must use the same value (compared at attach) */
#define KILN_OPTION_CHECKPOINT 8   /* written to a checkpoint's metadata */
#define KILN_OPTION_DEFAULT_VARIES 16 /* unset, the value comes from elsewhere (see its setter in kiln.h) */
#define KILN_OPTION_STEP_SCHEDULE 32  /* the range holds only with the step schedule (ignored otherwise) */
#endif

/* id, setter, kind, ctype, dflt, lo, hi, flags, names, flag, meta, unit, help */
KILN_OPTION(loss, loss, ENUM, kiln_loss_kind, KILN_LOSS_CROSS_ENTROPY, 0, 2,
            KILN_OPTION_RANKS_AGREE, "cross_entropy|mse|bce_with_logits", "", "", 1,
            "the loss")
KILN_OPTION(optimizer, optimizer, ENUM, kiln_optimizer_kind, KILN_OPTIM_SGD, 0, 2,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "sgd|adam|adamw", "optimizer", "NAME", 1,
            "sgd, adam or adamw")
KILN_OPTION(lr, lr, DOUBLE, double, 0.01, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "lr", "X", 1,
            "learning rate")
KILN_OPTION(momentum, momentum, DOUBLE, double, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "momentum", "X", 1,
            "SGD momentum")
KILN_OPTION(nesterov, nesterov, BOOL, int, 0, -INFINITY, INFINITY,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "", "", 1,
            "SGD's Nesterov momentum")
KILN_OPTION(weight_decay, weight_decay, DOUBLE, double, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT | KILN_OPTION_DEFAULT_VARIES, "", "weight-decay", "X", 1,
            "weight decay (unset: 0, and 0.01 for adamw)")
KILN_OPTION_CUSTOM(beta1, betas, DOUBLE, double, 0.9, 0, 1,
                   KILN_OPTION_HI_OPEN | KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "", "", 1,
                   "Adam's first moment decay")
KILN_OPTION_CUSTOM(beta2, betas, DOUBLE, double, 0.999, 0, 1,
                   KILN_OPTION_HI_OPEN | KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "", "", 1,
                   "Adam's second moment decay")
KILN_OPTION(eps, eps, DOUBLE, double, 1e-8, 0, INFINITY,
            KILN_OPTION_LO_OPEN | KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "", "", 1,
            "Adam's denominator term")
KILN_OPTION(batch_size, batch_size, INT, int64_t, 64, 1, INFINITY,
            KILN_OPTION_RANKS_AGREE, "", "batch", "N", 1,
            "samples per step on each device (per rank with --distributed, per GPU with several)")
KILN_OPTION(label_smoothing, label_smoothing, DOUBLE, double, 0, 0, 1,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_CHECKPOINT, "", "label-smoothing", "X", 1,
            "cross-entropy's label smoothing: the target mixes the label with the uniform distribution")
KILN_OPTION(grad_clip, grad_clip, DOUBLE, double, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE, "", "", "", 1,
            "the global gradient norm's limit (0: off)")
KILN_OPTION_CUSTOM(schedule, schedule, ENUM, kiln_lr_schedule, KILN_LR_CONSTANT, 0, 2,
                   KILN_OPTION_RANKS_AGREE, "constant|step|cosine", "", "", 1,
                   "the learning-rate schedule")
KILN_OPTION_CUSTOM(step_size, schedule, INT, int64_t, 1, 1, INFINITY,
                   KILN_OPTION_RANKS_AGREE | KILN_OPTION_STEP_SCHEDULE, "", "", "", 1,
                   "the step schedule's period in steps")
KILN_OPTION_CUSTOM(gamma, schedule, DOUBLE, double, 0.1, 0, INFINITY,
                   KILN_OPTION_LO_OPEN | KILN_OPTION_RANKS_AGREE | KILN_OPTION_STEP_SCHEDULE, "", "", "", 1,
                   "the step schedule's factor")
KILN_OPTION_CUSTOM(total_steps, schedule, INT, int64_t, 0, 0, INFINITY,
                   KILN_OPTION_RANKS_AGREE, "", "", "", 1,
                   "the cosine schedule's length in steps (0: the fit's)")
KILN_OPTION_CUSTOM(min_lr, schedule, DOUBLE, double, 0, 0, INFINITY,
                   KILN_OPTION_RANKS_AGREE, "", "", "", 1,
                   "the cosine schedule's floor")
KILN_OPTION(warmup, warmup, INT, int64_t, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE, "", "", "", 1,
            "linear warmup steps")
KILN_OPTION(shuffle_seed, shuffle_seed, UINT, uint64_t, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE | KILN_OPTION_DEFAULT_VARIES, "", "", "", 1,
            "the seed of each epoch's order (unset: drawn from the context)")
KILN_OPTION(progress_interval, progress_interval, INT, int64_t, 0, 0, INFINITY,
            0, "", "", "", 1,
            "batches between progress reports (0: once per epoch)")
KILN_OPTION(precision, precision, ENUM, kiln_precision, KILN_PRECISION_FP32, 0, 2,
            KILN_OPTION_RANKS_AGREE, "fp32|tf32|bf16", "precision", "P", 1,
            "fp32, tf32 (CUDA only: TF32 tensor cores) or bf16 (mixed precision)")
KILN_OPTION(fast_path, fast_path, BITS, uint32_t, KILN_FAST_PATH_EPILOGUES | KILN_FAST_PATH_GRAPHS, 0,
            KILN_FAST_PATH_ALL,
            0, "", "", "", 1,
            "the kiln_fast_path parts a trainer may use")
KILN_OPTION_CUSTOM(devices, devices, DEVICES, const kiln_device *, 0, 0, KILN_MAX_DATA_PARALLEL_DEVICES,
                   0, "", "", "", 1,
                   "DataParallel's devices (none: the model's)")
KILN_OPTION(bucket_bytes, bucket_bytes, INT, int64_t, 0, 0, INFINITY,
            KILN_OPTION_RANKS_AGREE, "", "bucket-mb", "X", 1048576,
            "data parallel: average gradients in buckets of X MiB during the backward, overlapped with it on GPUs "
            "(0: one allreduce after the backward; PyTorch DDP uses 25)")

#undef KILN_OPTION
#undef KILN_OPTION_CUSTOM
