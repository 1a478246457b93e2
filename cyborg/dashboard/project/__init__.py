"""The panels of Horizon's Project dashboard: what a project may use."""
