"""ddpjob's in-job runtime: container contract, torchrun bootstrap, DDP library, checkpoints."""

__version__ = "0.1.0"
