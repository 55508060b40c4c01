"""`smdistributed.dataparallel`: its PyTorch API, `.torch` (see the package's docstring)."""
