"""
Recovery system for the Loop Engineering Framework.

Provides executable recovery strategy handlers that perform actual state changes.
"""

from .handlers import (
    RecoveryHandler,
    RecoveryRegistry,
    RecoveryResult,
    RetryHandler,
    ReplanStepHandler,
    RequestHumanHandler,
    TerminateHandler,
)

__all__ = [
    'RecoveryHandler',
    'RecoveryRegistry',
    'RecoveryResult',
    'RetryHandler',
    'ReplanStepHandler',
    'RequestHumanHandler',
    'TerminateHandler',
]
