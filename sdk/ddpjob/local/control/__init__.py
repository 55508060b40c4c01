"""The control plane: the training-job API on this machine, its checks, the jobs on disk."""
