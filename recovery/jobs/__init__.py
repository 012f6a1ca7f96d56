"""What the commands do: submit, summary, recover, clear, follow, and the reports the CLI and the
web view share. Each function takes a Redis client and, where it runs Spark, a session."""
