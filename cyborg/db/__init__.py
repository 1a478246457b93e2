"""Database layer: models, migrations and enginefacade access functions."""
