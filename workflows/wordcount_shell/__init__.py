"""wordcount with pystorm multilang components (see wordcount_shell.xml)."""
