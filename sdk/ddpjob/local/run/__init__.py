"""Running one local job: the supervisor, its hosts and template, what it decides, its data."""
