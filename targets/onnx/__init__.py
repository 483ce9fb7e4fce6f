"""The onnx target: its runner, inspector, latency opener, per-layer tracer (named in edgekit.targets.TARGETS)."""
