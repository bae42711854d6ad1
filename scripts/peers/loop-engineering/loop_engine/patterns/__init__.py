"""Executable pattern handlers."""

from .daily_triage import DailyTriageConfig, DailyTriageHandler
from .pr_babysitter import PRBabysitterConfig, PRBabysitterHandler

__all__ = [
    "DailyTriageConfig",
    "DailyTriageHandler",
    "PRBabysitterConfig",
    "PRBabysitterHandler",
]
