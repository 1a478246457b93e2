"""Project > Accelerators > Device Profiles."""
