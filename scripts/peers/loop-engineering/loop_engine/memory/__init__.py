"""Memory systems for Loop Engineering Framework."""

from .memory import WorkingMemory, EpisodicMemory, ConsolidatedMemory, MultiTierMemory, MemoryEntry

__all__ = [
    "WorkingMemory",
    "EpisodicMemory",
    "ConsolidatedMemory",
    "MultiTierMemory",
    "MemoryEntry",
]
