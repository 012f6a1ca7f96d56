"""Where Redis comes from: URLs and clients (connection.py), the embedded server (embedded.py)."""
