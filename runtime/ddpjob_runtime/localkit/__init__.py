"""The template of a local job's hosts (torch imported once): never shipped to SageMaker."""
