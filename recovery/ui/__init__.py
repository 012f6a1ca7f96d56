"""`recovery ui`: a web view of runs, failures and recovery (Starlette, Jinja2, vendored htmx).

`command` defines the click command without importing the web stack; `app` builds the
Starlette app; `svg` draws topologies and charts; `actions` runs `recovery recover` processes.
"""
