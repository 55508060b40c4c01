"""Hyperparameter tuning jobs on this machine: their state on disk, the controller process that
runs their trials (each a local training job), and the API that answers them."""
