"""Accelerator drivers and what they share."""
