"""The agent: discovers the accelerators of one compute host."""
