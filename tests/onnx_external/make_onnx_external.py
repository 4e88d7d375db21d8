"""Writes the ONNX fixture of tests/onnx_external/: a model exported by
PyTorch's default torch.onnx.export (PyTorch 2.5 and later: torch.export and
onnxscript), which writes its large weights to a data file beside the model,
so that CI tests kiln's external data reader (src/onnx/external_data.cpp) and
PyTorch's graph forms without PyTorch.

    /work/venv/bin/python tests/onnx_external/make_onnx_external.py

Run with PyTorch 2.15, onnxscript 0.7; run it again after changing it and
commit the files:

  torch_default.onnx       nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Softplus(beta=2,
                           threshold=5), nn.Linear(32, 10), nn.LogSoftmax(dim=1)) with seed 0,
                           exported from an input [1, 1, 8, 8], batch dynamic
  torch_default.onnx.data  its weights (the exporter's choice of which: the large ones)
  input.f32                5 inputs [5, 1, 8, 8], little-endian float32
  output.f32               PyTorch's outputs for them [5, 10], little-endian float32

tests/test_onnx.c imports it and compares kiln's outputs with output.f32.
"""
import os

import numpy as np
import onnx
import torch
from torch import nn

here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Softplus(beta=2, threshold=5), nn.Linear(32, 10),
                      nn.LogSoftmax(dim=1)).eval()
path = os.path.join(here, "torch_default.onnx")
torch.onnx.export(model, torch.zeros(1, 1, 8, 8), path, input_names=["image"],
                  dynamic_axes={"image": {0: "batch"}})
m = onnx.load(path, load_external_data=False)
external = [t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
assert external and os.path.exists(path + ".data"), "the exporter wrote no external data"
x = torch.randn(5, 1, 8, 8) * 2
with torch.no_grad():
    y = model(x)
x.numpy().astype("<f4").tofile(os.path.join(here, "input.f32"))
y.numpy().astype("<f4").tofile(os.path.join(here, "output.f32"))
print("torch %s: %s (%s external), opset %s" % (torch.__version__, path, ", ".join(external),
                                                 [o.version for o in m.opset_import]))
