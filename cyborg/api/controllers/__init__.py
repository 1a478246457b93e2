"""pecan controllers of the API, one module per resource."""
