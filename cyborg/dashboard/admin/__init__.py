"""Cyborg's panels in Horizon's Admin dashboard: hosts, devices and
capacity of accelerators."""
