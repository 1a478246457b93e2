"""Project > Accelerators > Accelerator Requests."""
