"""The conductor: owner of every database write."""
