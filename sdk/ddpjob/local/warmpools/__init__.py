"""Warm pools (`KeepAlivePeriodInSeconds`): their records, keepers and caches."""
