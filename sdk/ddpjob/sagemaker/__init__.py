"""The SageMaker backend: `Session` (jobs through boto3), its error translation and its logs."""
