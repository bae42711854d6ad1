"""Safety mechanisms for Loop Engineering Framework."""

from .safety_monitor import SafetyMonitor, Sandbox, CircuitBreaker, AnomalyDetector

__all__ = [
    "SafetyMonitor",
    "Sandbox",
    "CircuitBreaker",
    "AnomalyDetector",
]