"""No silent broad `except` in recovery/. An `except Exception`,
`except BaseException` or bare `except` (alone or in a tuple) must, in its body, re-raise or
log through a logger (`log.*`, `logger.*`, `logging.*`), or carry on its `except` line a
`# broad-except: <why>` comment (user code that can raise anything, a record that fails
whatever its decoder raised)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "recovery"
BROAD = {"Exception", "BaseException"}
LOGGERS = {"log", "logger", "logging"}
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
JUSTIFIED = re.compile(r"#\s*broad-except:\s*\S")


def _is_broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in BROAD for t in types)


def _reraises_or_logs(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOG_METHODS and isinstance(node.func.value, ast.Name)
                and node.func.value.id in LOGGERS):
            return True
    return False


def silent_broad_excepts(source: str, name: str) -> list[str]:
    lines = source.splitlines()
    return [f"{name}:{h.lineno}: {lines[h.lineno - 1].strip()}"
            for h in ast.walk(ast.parse(source)) if isinstance(h, ast.ExceptHandler)
            and _is_broad(h) and not _reraises_or_logs(h) and not JUSTIFIED.search(lines[h.lineno - 1])]


def test_no_broad_except_in_recovery_swallows_silently():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += silent_broad_excepts(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert found == []


def test_the_rule_flags_what_it_should_and_only_that():
    flagged = silent_broad_excepts('''
try: f()
except Exception: pass
try: f()
except: pass
try: f()
except (OSError, BaseException) as err: print(err)
try: f()
except Exception as err: log.debug("x %s", err)
try: f()
except Exception:
    if g(): raise
try: f()
except Exception:   # broad-except: user code can raise anything
    fail()
try: f()
except Exception:   # broad-except:
    pass
try: f()
except ValueError: pass
''', "m.py")
    assert [f.split(":")[1] for f in flagged] == ["3", "5", "7", "17"]
