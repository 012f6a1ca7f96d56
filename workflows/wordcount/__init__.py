"""The word-count example workflow (workflows/wordcount.xml)."""
