"""Importers: foreign model formats turned into HLO modules (ONNX)."""
