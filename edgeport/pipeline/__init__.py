"""Stages of a run that are not about models: where its output goes and how it gets there safely."""
