"""`smdistributed.dataparallel.torch`: `.distributed`, `.parallel` and `.torch_smddp`."""
