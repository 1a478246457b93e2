"""cyborg: accelerator management for OpenStack clouds."""
