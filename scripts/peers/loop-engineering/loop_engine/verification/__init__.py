"""Verification mechanisms for Loop Engineering Framework."""

from .verifier import Verifier, CrossVerifier, SemanticVerifier, SyntaxVerifier

__all__ = [
    "Verifier",
    "CrossVerifier",
    "SemanticVerifier",
    "SyntaxVerifier",
]