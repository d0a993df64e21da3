"""One small declarative module per op. ``op_builder.ALL_OPS`` collects them."""
