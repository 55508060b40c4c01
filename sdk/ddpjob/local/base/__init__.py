"""The ground floor every room of the local backend stands on: the job record on disk and its
states, the process tree, the template client, the spot rules, failure causes and ARNs."""
