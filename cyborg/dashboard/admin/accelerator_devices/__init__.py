"""Accelerator Devices: devices, their health, layout and handles."""
