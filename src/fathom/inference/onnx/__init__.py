"""The default model on ONNX Runtime, with no torch: the graph built from the model folder's
own weights (`graph`), the built and quantized files kept on disk (`cache`), and the encoder
that runs them (`encoder`)."""

from fathom.inference.onnx.encoder import OnnxEncoder, variant_provider_id
from fathom.inference.onnx.graph import UnsupportedModel

__all__ = ["OnnxEncoder", "UnsupportedModel", "variant_provider_id"]
