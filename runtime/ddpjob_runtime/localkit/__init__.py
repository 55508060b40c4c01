"""The template of a local job's hosts (torch imported once) and, in `standins/` (a folder on
the workers' path, not a package of ours), stand-ins for libraries only SageMaker's containers
have: never shipped to SageMaker."""
