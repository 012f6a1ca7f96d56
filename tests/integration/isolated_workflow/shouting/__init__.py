"""The Python components of isolated.xml (shipped with the job: the executors cannot read
the folder this package is in)."""
