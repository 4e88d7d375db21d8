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
  "    OPTION    relu (the default), gelu, tanh, sigmoid or leaky_relu[=SLOPE]: the activation\n"     \
  "              after each hidden Linear; dropout=P: a Dropout(P) after each hidden activation;\n"   \
  "              flatten: an nn.Flatten() first\n"                                                    \
  "  layer list  LAYER[;LAYER]...         e.g. 'flatten;linear(784,32);relu;linear(32,10)'\n"         \
  "    LAYER     linear(IN,OUT), linear(IN,OUT,nobias), relu, gelu, tanh, sigmoid,\n"                \
  "              leaky_relu[(SLOPE)] (default 0.01), dropout[(P)] (default 0.5), flatten\n"           \
  "  Every layer takes the next index of PyTorch's nn.Sequential, whose state_dict names the\n"       \
  "  tensors: 784-32-10 holds 0.weight [32, 784], 0.bias, 2.weight, 2.bias; with :flatten (or\n"      \
  "  nn.Sequential(nn.Flatten(), ...)) the Linears are 1.* and 3.*. A Flatten computes nothing:\n"    \
  "  every model takes [N, ...] inputs with IN values per sample, such as [N, 1, 28, 28] images."

#endif
