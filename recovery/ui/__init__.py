"""`recovery ui`: a web view of runs, failures and recovery (Starlette, Jinja2, vendored htmx).

`command` defines the click command without importing the web stack; `app` builds the
Starlette app; `security` is what every request goes through first (Host allow-list, the
server's token, the Origin check of actions, security headers); `svg` draws topologies and
charts; `actions` runs `recovery recover` processes; `server` serves the app in a thread for
the browser tests and scripts/screenshot.py.
"""
