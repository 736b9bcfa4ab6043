"""Independent numpy references, written from the papers' formulas.

Nothing here imports keras_posenc: a layer's test copies the layer's weights
into the matching reference and compares outputs (1e-5 in float32).
"""
