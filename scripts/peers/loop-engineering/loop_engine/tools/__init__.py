"""Permissioned external tool adapters."""

from .github import GitHubAdapter
from .permissions import (
    PermissionDenied,
    PermissionPolicy,
    RiskLevel,
    ToolRequest,
    ToolResult,
    ToolScope,
)

__all__ = [
    "GitHubAdapter",
    "PermissionDenied",
    "PermissionPolicy",
    "RiskLevel",
    "ToolRequest",
    "ToolResult",
    "ToolScope",
]
