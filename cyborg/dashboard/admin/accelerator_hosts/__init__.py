"""Accelerator Hosts: per compute host capacity, devices, drivers."""
