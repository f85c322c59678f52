"""Emit: the files of a compile directory (plan.json, trace.json, the ONNX files), written atomically."""
