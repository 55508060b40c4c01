"""The boto3 and official-SDK face of the local backend: SageMaker, S3 and CloudWatch Logs."""
