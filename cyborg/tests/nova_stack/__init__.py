"""Real OpenStack services around cyborg's, for the Nova and tempest gates."""
