"""The API served over real HTTP to the real client libraries."""
