"""Accelerator Capacity: accelerators per resource class, host, trait."""
