"""The in-job runtime: the bootstrap (`ddpjob-train`), launcher, torchrun's agent, the workers."""
