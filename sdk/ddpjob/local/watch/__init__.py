"""Watching running jobs: following logs, matching metrics, the ranks' stacks."""
