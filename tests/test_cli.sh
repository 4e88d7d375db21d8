#!/usr/bin/env bash
# The kiln program end to end, as a user runs it: help and version, usage
# errors (exit 2, one line on stderr), runtime errors (exit 1, with the
# reason), `kiln devices`, and a tiny train -> eval -> predict -> ONNX -> resume run
# on a small generated MNIST-layout dataset (so no download is needed);
# predict's CSV and JSON against a forward pass computed here, and the
# torch.save files of tests/torch_fixtures read with --spec.
#
#   test_cli.sh PATH/TO/kiln        (CTest passes the built program)
set -euo pipefail

kiln="${1:?usage: test_cli.sh PATH/TO/kiln}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0

fail() {
  echo "FAIL: $*" >&2
  echo "--- stdout:" >&2; cat "$work/out" >&2
  echo "--- stderr:" >&2; cat "$work/err" >&2
  exit 1
}

# expect RC PATTERN CMD...: CMD exits with RC and prints PATTERN (an extended
# regular expression) on stdout or stderr. Leaves the output in $work/out|err.
expect() {
  local want=$1 pattern=$2 rc=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  [[ $rc -eq $want ]] || fail "'$*' exited $rc, expected $want"
  grep -qE -- "$pattern" "$work/out" "$work/err" || fail "'$*' printed nothing matching '$pattern'"
  passed=$((passed + 1))
}

# usage_error PATTERN ARGS...: kiln ARGS is a usage error told in one line.
usage_error() {
  local pattern=$1
  shift
  expect 2 "$pattern" "$kiln" "$@"
  [[ $(wc -l <"$work/err") -eq 1 ]] || fail "'kiln $*' wrote more than one line on stderr"
}

# make_split DIR PREFIX COUNT SEED (a small MNIST-layout dataset)
source "$(dirname "$0")/idx_split.sh"

data="$work/data"
mkdir -p "$data"
make_split "$data" train 1000 1
make_split "$data" t10k 300 2
gzip -n "$data"/t10k-*    # kiln reads .gz as well as raw files

# ---- help, version, usage errors -------------------------------------------
expect 0 "train" "$kiln" --help
expect 0 "^kiln [0-9]+\.[0-9]+\.[0-9]+" "$kiln" --version
expect 0 "--epochs N" "$kiln" train --help
expect 0 "--count N" "$kiln" help predict
expect 2 "usage: kiln COMMAND" "$kiln"
usage_error "unknown command 'frobnicate'" frobnicate
usage_error "unknown option '--bogus'" train --bogus
usage_error "--lr needs a number, got 'abc'" train --lr abc
# The trainer options' flags come from the library's table and their values
# go through its setters: one range, the library's.
usage_error "--lr: lr must be >= 0, got -1" train --lr -1
usage_error "--batch: batch_size must be >= 1, got 0" train --batch 0
usage_error "--batch needs a whole number, got 1.5" train --batch 1.5
usage_error "--weight-decay: weight_decay must be >= 0, got -0.5" train --weight-decay -0.5
usage_error "unknown --optimizer 'rmsprop' \(sgd/adam/adamw\)" train --optimizer rmsprop
usage_error "unknown --precision 'fp16' \(fp32/tf32/bf16\)" train --precision fp16
usage_error "--momentum applies to --optimizer sgd only" train --optimizer adam --momentum 0.9
usage_error "--label-smoothing: label_smoothing must be in \[0, 1\], got 1.5" train --label-smoothing 1.5
expect 0 "--lr X +learning rate \(default 0.1\)" "$kiln" train --help
usage_error "--epochs needs a value" train --epochs
usage_error "--epochs must be at least 1" train --epochs 0
usage_error "--save needs a value" train --save --epochs 1
usage_error "unknown --activation 'swish'" train --activation swish
usage_error "--hidden wants" train --hidden 32,x
usage_error "bad --device 'gpu'" train --device gpu
usage_error "'cpu' is not a GPU" train --device cuda:0,cpu
usage_error "cuda:1 is listed twice" train --device cuda:1,cuda:1
usage_error "distributed runs one device per rank" train --device cuda:0,cuda:1 --distributed
usage_error "--bucket-mb: bucket_bytes must be >= 0, got -1048576" train --distributed --bucket-mb -1
usage_error "--bucket-mb applies to data parallel training" train --bucket-mb 25
usage_error "bad --threads 5000: .*1024" train --threads 5000
usage_error "--count must be at least 1" predict model --count -1
usage_error "--count must be at least 1" predict model --count 0
usage_error "missing argument MODEL" eval
usage_error "unexpected argument 'extra'" eval model extra

# ---- devices and runtime errors --------------------------------------------
expect 0 "CUDA available: (yes|no \(.+\))" "$kiln" devices
grep -q "^cpu: " "$work/out" || fail "kiln devices listed no CPU"
expect 1 "device cuda:99 is not usable: .+" "$kiln" train --device cuda:99 --data "$data"
expect 1 "looked for train-images-idx3-ubyte\[\.gz\].*apt-get install dataset-fashion-mnist" \
  "$kiln" train --data "$work/nowhere"
expect 1 "cannot load model '$work/missing.safetensors'" "$kiln" eval "$work/missing.safetensors" --data "$data"

CUDA_VISIBLE_DEVICES= expect 0 "^no GPU: .+" "$kiln" train --device auto --data "$data" \
  --hidden 8 --epochs 1
grep -q "^device: cpu " "$work/out" || fail "--device auto with no GPU visible did not train on the CPU"

# ---- train, eval, predict ----------------------------------------------------
common=(--data "$data" --device cpu --hidden 16 --batch 20 --lr 0.2 --seed 7)
model="$work/model.safetensors"
expect 0 "test accuracy: [0-9.]+%" "$kiln" train "${common[@]}" --epochs 1 --save "$model" \
  --checkpoint "$work/epoch1.ckpt"
grep -qE "^epoch 1/1 .*val accuracy" "$work/out" || fail "no plain per-epoch line when stdout is not a terminal"
grep -qE "^training: sgd, lr 0.2, batch 20, epochs 1, precision fp32$" "$work/out" ||
  fail "the header names the default optimizer and precision wrongly: $(grep '^training:' "$work/out")"
[[ -s "$model" && -s "$work/epoch1.ckpt" ]] || fail "--save or --checkpoint wrote no file"
trained="$(grep '^test accuracy:' "$work/out")"

# A flag of the options table that no code of the program names.
expect 0 "test loss: [0-9.]+" "$kiln" train "${common[@]}" --epochs 1 --label-smoothing 0.1 --quiet
# ELU, SELU and Softplus as the hidden activation: the saved spec says which.
for act in elu selu softplus; do
  expect 0 "test accuracy: [0-9.]+%" "$kiln" train "${common[@]}" --epochs 1 --quiet --activation $act \
    --save "$work/$act.safetensors"
  grep -qa "\"kiln.spec\":\"64-16-10:$act\"" "$work/$act.safetensors" || fail "--activation $act saved another spec"
  expect 0 "^test accuracy:" "$kiln" eval "$work/$act.safetensors" --data "$data" --device cpu
done

expect 0 "^test accuracy:" "$kiln" eval "$model" --data "$data" --device cpu
[[ "$(grep '^test accuracy:' "$work/out")" == "$trained" ]] ||
  fail "kiln eval printed '$(grep '^test accuracy:' "$work/out")', training printed '$trained'"

# --spec reads the file as a plain state_dict (as PyTorch saves it): a kiln
# file loads that way too and evaluates the same; a spec that does not fit
# names the offending tensor; a malformed spec is a usage error.
expect 0 "^test accuracy:" "$kiln" eval "$model" --data "$data" --device cpu --spec 64-16-10
[[ "$(grep '^test accuracy:' "$work/out")" == "$trained" ]] ||
  fail "kiln eval --spec printed '$(grep '^test accuracy:' "$work/out")', training printed '$trained'"
expect 1 '"0.weight" has shape \[16, 64\]' "$kiln" eval "$model" --data "$data" --device cpu --spec 64-8-10
expect 1 'no parameter for: "2.weight", "2.bias"' "$kiln" predict "$model" --data "$data" --device cpu --spec 64-16
usage_error "bad --spec '64-x'" predict "$model" --data "$data" --device cpu --spec 64-x
expect 0 "^correct: [0-9]+ of 5$" "$kiln" predict "$model" --data "$data" --count 5 --device cpu --spec 64-16-10

expect 0 "^correct: [0-9]+ of 5$" "$kiln" predict "$model" --data "$data" --count 5 --device cpu
[[ $(grep -cE '^ +[0-9]+ +[0-9]' "$work/out") -eq 5 ]] || fail "kiln predict --count 5 did not print 5 predictions"
expect 0 "^ +299 " "$kiln" predict "$model" --input "$data/t10k-images-idx3-ubyte.gz" --device cpu
expect 1 "not an IDX file" "$kiln" predict "$model" --input "$model" --device cpu

# ---- predict for scripts: --output logits|probabilities|classes, --format csv|json --
usage_error "unknown --format 'xml'" predict "$model" --format xml
usage_error "unknown --output 'scores'" predict "$model" --format csv --output scores
usage_error "--output needs --format csv or json" predict "$model" --output logits
for what in logits probabilities classes; do
  for fmt in csv json; do
    expect 0 "" "$kiln" predict "$model" --data "$data" --device cpu --count 7 --format "$fmt" --output "$what"
    cp "$work/out" "$work/$what.$fmt"
  done
done
expect 0 '^index,class$' "$kiln" predict "$model" --input "$data/t10k-images-idx3-ubyte.gz" --device cpu \
  --count 3 --format csv
[[ $(wc -l <"$work/out") -eq 4 ]] || fail "--format csv of 3 unlabelled images is not a header and 3 rows"
expect 0 '"output": "classes", "count": 2, "width": 10, "values": \[[0-9], [0-9]\]}$' "$kiln" predict "$model" \
  --input "$data/t10k-images-idx3-ubyte.gz" --device cpu --count 2 --format json
# The same numbers computed another way: the model file's weights and the
# test images read here (python3's standard library, which the GPU image and
# its rehearsal have; perl's JSON module is not in a minimal perl), the
# forward pass in double precision.
python3 - "$model" "$data/t10k-images-idx3-ubyte.gz" "$data/t10k-labels-idx1-ubyte.gz" "$work" >"$work/out" 2>"$work/err" <<'PYTHON' || fail "kiln predict --format csv|json disagrees with the reference"
import gzip, json, math, struct, sys
model, images, labels, work = sys.argv[1:5]
n = 7
raw = open(model, "rb").read()
(length,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + length])
def tensor(name):
    b, e = header[name]["data_offsets"]
    return struct.unpack("<%df" % ((e - b) // 4), raw[8 + length + b:8 + length + e])
w0, b0, w2, b2 = (tensor(k) for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
img, lab = gzip.open(images).read(), gzip.open(labels).read()
logits, probs, classes = [], [], []
for i in range(n):
    x = [v / 255 for v in img[16 + 64 * i:16 + 64 * (i + 1)]]
    h = [max(0.0, b0[o] + sum(w0[o * 64 + k] * x[k] for k in range(64))) for o in range(16)]
    z = [b2[o] + sum(w2[o * 16 + k] * h[k] for k in range(16)) for o in range(10)]
    top = max(z)
    total = sum(math.exp(v - top) for v in z)
    logits.append(z)
    probs.append([math.exp(v - top) / total for v in z])
    classes.append(max(range(10), key=lambda c: (z[c], -c)))
truth = list(lab[8:8 + n])
def fail(message):
    sys.exit(message)
def close_to(got, want, what):
    if abs(got - want) > 1e-5 + 1e-5 * abs(want):
        fail("%s: kiln %r, reference %r" % (what, got, want))
for what in ("logits", "probabilities", "classes"):
    rows = open("%s/%s.csv" % (work, what)).read().splitlines()
    doc = json.load(open("%s/%s.json" % (work, what)))
    head = rows.pop(0)
    prefix = "logit_" if what == "logits" else "probability_"
    want_head = "index,class,label" if what == "classes" else ",".join(
        ["index"] + [prefix + str(c) for c in range(10)] + ["label"])
    if head != want_head:
        fail("%s.csv header: %s" % (what, head))
    if not (len(rows) == n and len(doc["values"]) == n and doc["count"] == n and doc["width"] == 10
            and doc["output"] == what):
        fail("%s: not %d rows of 10 classes" % (what, n))
    for i in range(n):
        row = rows[i].split(",")
        if not (int(row[0]) == i and int(row[-1]) == truth[i] and doc["labels"][i] == truth[i]):
            fail("%s row %d: index or label" % (what, i))
        if what == "classes":
            # kiln's class has the largest logit (within rounding) of the reference's
            if abs(logits[i][int(row[1])] - logits[i][classes[i]]) > 1e-5:
                fail("classes row %d: kiln %s, reference %d" % (i, row[1], classes[i]))
            if doc["values"][i] != int(row[1]):
                fail("classes row %d: json differs from csv" % i)
            continue
        ref = logits[i] if what == "logits" else probs[i]
        for c in range(10):
            close_to(float(row[c + 1]), ref[c], "%s.csv [%d][%d]" % (what, i, c))
            if doc["values"][i][c] != float(row[c + 1]):
                fail("%s [%d][%d]: json %r, csv %s" % (what, i, c, doc["values"][i][c], row[c + 1]))
print("ok")
PYTHON
passed=$((passed + 1))

# ---- torch.save files: PyTorch's state_dicts, read with --spec ------------------
# tests/torch_fixtures/mlp.pt is PyTorch's nn.Sequential(Linear(4, 3), ReLU(),
# Linear(3, 2)) whose tensor k holds (k + 1) * 0.1 * ((i % 7) - 3) at flat
# index i (make_torch_fixtures.py): its logits for 2x2 images, by hand here.
fixtures="$(cd "$(dirname "$0")" && pwd)/torch_fixtures"
perl -e 'print pack("N4", 0x803, 3, 2, 2), pack("C*", 0, 64, 128, 255, 255, 0, 32, 16, 7, 200, 99, 1)' \
  >"$work/small.idx"
expect 0 '^index,logit_0,logit_1$' "$kiln" predict "$fixtures/mlp.pt" --spec 4-3-2 --input "$work/small.idx" \
  --device cpu --format csv --output logits
perl - "$work/out" >"$work/ref" 2>&1 <<'PERL' || { cat "$work/ref" >"$work/err"; fail "logits of mlp.pt differ from the closed form"; }
use strict; use warnings;
sub value { my ($k, $i) = @_; return unpack("f", pack("f", ($k + 1) * 0.1 * (($i % 7) - 3))); }
my @px = (0, 64, 128, 255, 255, 0, 32, 16, 7, 200, 99, 1);
open(my $f, "<", $ARGV[0]) or die $!; my @rows = <$f>; shift @rows;
@rows == 3 or die "not 3 rows\n";
for my $n (0 .. 2) {
  my @x = map { $px[4 * $n + $_] / 255 } 0 .. 3;
  my @h = map { my $o = $_; my $s = value(1, $o); $s += value(0, 4 * $o + $_) * $x[$_] for 0 .. 3; $s > 0 ? $s : 0 } 0 .. 2;
  my @z = map { my $o = $_; my $s = value(3, $o); $s += value(2, 3 * $o + $_) * $h[$_] for 0 .. 2; $s } 0 .. 1;
  chomp(my $line = $rows[$n]); my @got = split /,/, $line;
  abs($got[$_ + 1] - $z[$_]) <= 1e-6 or die "row $n logit $_: kiln $got[$_ + 1], closed form $z[$_]\n" for 0 .. 1;
}
PERL
passed=$((passed + 1))
# The same model in every layout PyTorch writes gives the same logits.
cp "$work/out" "$work/mlp_logits"
for file in mlp_shared.pt mlp_big_endian.pt mlp_deflated.pt mlp_zip64.pt mlp_parameters_p5.pt; do
  expect 0 '^index,logit_0' "$kiln" predict "$fixtures/$file" --spec 4-3-2 --input "$work/small.idx" \
    --device cpu --format csv --output logits
  cmp -s "$work/out" "$work/mlp_logits" || fail "$file gives other logits than mlp.pt"
done
expect 0 '^index,logit_0' "$kiln" predict "$fixtures/mlp_flatten.pt" --spec 4-3-2:dropout=0.5:flatten \
  --input "$work/small.idx" --device cpu --format csv --output logits
cmp -s "$work/out" "$work/mlp_logits" || fail "mlp_flatten.pt gives other logits than mlp.pt"
# What the messages say: the spec that fits, a torch.save file without a
# spec, layers kiln lacks, hostile pickles, legacy files, empty files.
expect 1 'It holds Linear\(4, 3\) at 1; Linear\(3, 2\) at 4. The spec that fits it is "4-3-2:dropout=0.5:flatten"' \
  "$kiln" predict "$fixtures/mlp_flatten.pt" --spec 4-3-2 --input "$work/small.idx" --device cpu
expect 1 "is a torch.save file: a state_dict .*--spec SPEC.*The spec that fits it is \"4-3-2\"" \
  "$kiln" eval "$fixtures/mlp.pt" --data "$data" --device cpu
expect 1 "BatchNorm1d running statistics at 1.\*: kiln has no BatchNorm" \
  "$kiln" eval "$fixtures/batchnorm.pt" --spec 4-3-2 --data "$data" --device cpu
expect 1 "refused: its pickle calls posix.system" \
  "$kiln" eval "$fixtures/hostile_posix_system.pt" --spec 4-3-2 --data "$data" --device cpu
expect 1 "_use_new_zipfile_serialization=False" "$kiln" eval "$fixtures/legacy.pt" --spec 4-3-2 --data "$data" --device cpu
: >"$work/empty.safetensors"
expect 1 "is empty \(0 bytes\)" "$kiln" eval "$work/empty.safetensors" --data "$data" --device cpu
expect 0 "layer list  LAYER\[;LAYER\]" "$kiln" --help
expect 0 "flatten: an nn.Flatten\(\)" "$kiln" eval --help
expect 0 "softplus\[=BETA\[,THRESHOLD\]\]" "$kiln" eval --help

# ---- ONNX: export, import back, the same evaluation ----------------------------
usage_error "--onnx OUT is required" export "$model"
usage_error "--save MODEL is required" import "$work/model.onnx"
# Only where libkiln_onnx.so was built (CTest sets KILN_HAVE_ONNX).
if [[ -n "${KILN_HAVE_ONNX:-}" ]]; then
  expect 0 "^wrote $work/model.onnx$" "$kiln" export "$model" --onnx "$work/model.onnx"
  expect 0 "^imported $work/model.onnx: 64-16-10$" "$kiln" import "$work/model.onnx" --save "$work/onnx.safetensors"
  expect 0 "^test accuracy:" "$kiln" eval "$model" --data "$data" --device cpu
  original="$(cat "$work/out")"
  expect 0 "^test accuracy:" "$kiln" eval "$work/onnx.safetensors" --data "$data" --device cpu
  [[ "$(cat "$work/out")" == "$original" ]] || fail "the model through ONNX evaluates to '$(cat "$work/out")', the original to '$original'"
  expect 1 "^kiln import: cannot import '$model': " "$kiln" import "$model" --save "$work/not.safetensors"
  [[ ! -e "$work/not.safetensors" ]] || fail "a failed import wrote --save"
  [[ $(grep -o "cannot import" "$work/err" | wc -l) -eq 1 ]] || fail "'cannot import' is not said once"
  # The weights beside the model, on request: OUT.data, read back the same.
  expect 0 "^wrote $work/ext.onnx$" "$kiln" export "$model" --onnx "$work/ext.onnx" --external-data
  [[ -s "$work/ext.onnx.data" && $(stat -c %s "$work/ext.onnx") -lt 4096 ]] || fail "--external-data kept the weights inline"
  expect 0 "^imported $work/ext.onnx: 64-16-10$" "$kiln" import "$work/ext.onnx" --save "$work/ext.safetensors"
  expect 0 "^test accuracy:" "$kiln" eval "$work/ext.safetensors" --data "$data" --device cpu
  [[ "$(cat "$work/out")" == "$original" ]] || fail "the model through external data evaluates differently"
  expect 1 "^kiln export: cannot export '$work/no/dir/x.onnx' as ONNX: " "$kiln" export "$model" --onnx "$work/no/dir/x.onnx"
  [[ $(grep -o "cannot export" "$work/err" | wc -l) -eq 1 ]] || fail "'cannot export' is not said once"
else
  expect 1 "built without ONNX support" "$kiln" export "$model" --onnx "$work/model.onnx"
fi

expect 0 "--quiet" "$kiln" train --help
expect 0 "^test accuracy:" "$kiln" train "${common[@]}" --epochs 1 --quiet
! grep -q "^epoch" "$work/out" || fail "--quiet still printed per-epoch lines"

# ---- resume: 1 epoch + 1 resumed epoch = 2 epochs in one go -----------------
expect 0 "^test accuracy:" "$kiln" train "${common[@]}" --epochs 2
straight="$(grep '^test (loss|accuracy):' -E "$work/out")"
expect 0 "^epoch 2/2 " "$kiln" train "${common[@]}" --epochs 2 --resume "$work/epoch1.ckpt"
! grep -q "^epoch 1/2" "$work/out" || fail "--resume trained epoch 1 again"
resumed="$(grep '^test (loss|accuracy):' -E "$work/out")"
[[ "$resumed" == "$straight" ]] || fail "resumed run gave '$resumed', the straight run '$straight'"
expect 1 "cannot resume from" "$kiln" train "${common[@]}" --hidden 8 --epochs 2 --resume "$work/epoch1.ckpt"

# ---- --distributed: 2 ranks x batch 10 = 1 process x batch 20 ---------------
# Only where CTest found mpirun (KILN_MPIRUN) and libkiln_dist.so was built.
if [[ -n "${KILN_MPIRUN:-}" ]]; then
  mpi=("$KILN_MPIRUN" -np 2 --oversubscribe --allow-run-as-root)
  dist=(--data "$data" --device cpu --hidden 16 --batch 10 --lr 0.2 --seed 7 --epochs 2)
  expect 0 "^distributed: 2 ranks, batch 10 per rank \(20 per step in all\)" \
    "${mpi[@]}" "$kiln" train --distributed "${dist[@]}" --save "$work/dist.safetensors"
  [[ $(grep -c '^test accuracy:' "$work/out") -eq 1 ]] || fail "a rank other than 0 printed results"
  [[ -s "$work/dist.safetensors" ]] || fail "--distributed --save wrote no file"
  distributed="$(grep '^test (loss|accuracy):' -E "$work/out")"
  [[ "$distributed" == "$straight" ]] || fail "2 ranks x batch 10 gave '$distributed', 1 x batch 20 '$straight'"
  # A bucket per layer (1 KiB): the same numbers.
  expect 0 "^distributed: 2 ranks" "${mpi[@]}" "$kiln" train --distributed "${dist[@]}" --bucket-mb 0.001
  bucketed="$(grep '^test (loss|accuracy):' -E "$work/out")"
  [[ "$bucketed" == "$straight" ]] || fail "--bucket-mb 0.001 gave '$bucketed', 1 x batch 20 '$straight'"
fi

echo "test_cli: $passed passed, 0 failed"
