/* The model spec language, as `kiln --help`, `kiln eval --help` and `kiln
 * predict --help` print it: the grammar kiln_model_spec_parse reads (kiln.h
 * and the README say the same). One string literal without a final newline,
 * so that a command's summary can end with it. */
#ifndef KILN_TOOLS_SPEC_HELP_H
#define KILN_TOOLS_SPEC_HELP_H

#define KILN_SPEC_GRAMMAR_HELP                                                                       \
  "model specs (--spec), in one of two forms:\n"                                                     \
  "  compact     SIZES[:OPTION]...        e.g. 784-32-10   784-256-256-10:gelu:dropout=0.2\n"         \
  "    SIZES     IN-HIDDEN-...-OUT: a Linear (with bias) between each two sizes\n"                    \
  "    OPTION    relu (the default), gelu, tanh, sigmoid, selu, leaky_relu[=SLOPE], elu[=ALPHA]\n"    \
  "              or softplus[=BETA[,THRESHOLD]]: the activation after each hidden Linear;\n"         \
  "              dropout=P: a Dropout(P) after each hidden activation; flatten: an nn.Flatten()\n"   \
  "              first; softmax or log_softmax: the output transform after the last Linear\n"        \
  "  layer list  LAYER[;LAYER]...         e.g. 'flatten;linear(784,32);relu;linear(32,10)'\n"         \
  "    LAYER     linear(IN,OUT), linear(IN,OUT,nobias), relu, gelu, tanh, sigmoid, selu,\n"          \
  "              leaky_relu[(SLOPE)] (default 0.01), elu[(ALPHA)] (default 1),\n"                    \
  "              softplus[(BETA[,THRESHOLD])] (defaults 1, 20), dropout[(P)] (default 0.5),\n"       \
  "              flatten, softmax or log_softmax (last only), input(N) (first only)\n"               \
  "  Every layer takes the next index of PyTorch's nn.Sequential, whose state_dict names the\n"       \
  "  tensors: 784-32-10 holds 0.weight [32, 784], 0.bias, 2.weight, 2.bias; with :flatten (or\n"      \
  "  nn.Sequential(nn.Flatten(), ...)) the Linears are 1.* and 3.*. A Flatten computes nothing:\n"    \
  "  every model takes [N, ...] inputs with IN values per sample, such as [N, 1, 28, 28] images.\n"   \
  "  softmax/log_softmax (nn.Softmax(dim=1)) end a classifier: predict returns their output,\n"       \
  "  training takes the logits under them. input(N) gives the width of a model without a\n"          \
  "  Linear (e.g. 'input(10);elu(2)'), which holds no parameters and does not train."

#endif
