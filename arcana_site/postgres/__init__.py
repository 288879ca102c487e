"""Arcana Console's PostgreSQL backend: Django's, with a health check that skips a connection known alive
(see `base.DatabaseWrapper`)."""
