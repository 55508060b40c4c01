"""What SageMaker itself does around a training script: inputs, restore, syncs, results."""
