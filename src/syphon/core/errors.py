"""The errors syphon raises. Entry points turn them into one line and an exit code."""

from __future__ import annotations


class SyphonError(Exception):
    """Base of every error syphon raises on purpose."""

    exit_code = 1


class ConfigError(SyphonError):
    """A configuration file or override is missing, malformed or invalid."""

    exit_code = 2


class SecretError(SyphonError):
    """A secret reference cannot be resolved (unset variable, no secret scope)."""

    exit_code = 2


class BacklogPathError(SyphonError, ValueError):
    """A string is not a backlog queue path, or a backlog path cannot be built from the parts."""


class SparkSetupError(SyphonError):
    """A Spark session cannot be built here (no Java, bad master)."""

    exit_code = 4
