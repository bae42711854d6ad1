"""Budget controls for Loop Engineering Framework."""

from .budget_manager import BudgetManager, TokenBudget, StepBudget, TimeBudget, CostBudget

__all__ = [
    "BudgetManager",
    "TokenBudget",
    "StepBudget",
    "TimeBudget",
    "CostBudget",
]