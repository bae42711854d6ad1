"""
Loop Engineering CLI Toolkit

Command-line interface for the Loop Engineering framework.

Commands:
    init     - Scaffold a new loop project
    audit    - Audit loop readiness (0-100 score)
    run      - Execute a loop from configuration
    cost     - Estimate token/cost for patterns
    validate - Validate loop configurations
"""

__version__ = "0.4.1"
