"""Command-line jobs: `python -m launch.<job>`."""
