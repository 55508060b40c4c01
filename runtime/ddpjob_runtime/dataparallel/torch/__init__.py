"""PyTorch flavour of the library: ``.distributed`` (collectives) and ``.parallel`` (DDP)."""
