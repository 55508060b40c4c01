"""Hyperparameter tuning jobs: the official SDK v2's `HyperparameterTuner` vocabulary, the
CreateHyperParameterTuningJob request built from an estimator's plan, and the search strategies.

Pure pieces: `parameters` (ranges and their checks), `rules` (AWS's rules on a tuning job),
`request` (the request, checked against botocore's model), `strategies` (Random and Grid, and
the `Search` interface), `optuna_search` (Bayesian and Hyperband, with the `tune` extra).
The front end is `tuner.HyperparameterTuner`; `job.TuningJob` follows a started job.
"""
