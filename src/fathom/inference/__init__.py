"""Inference: providers, routing, the compatibility gate and the cloud budget."""
