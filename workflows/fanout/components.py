"""Components of workflows/fanout.xml (Storm's acker's worked example, with arithmetic)."""
from __future__ import annotations

from recovery import BasicBolt, Bolt, Tuple


class Fork(BasicBolt):
    """Bolt1: a line holding an integer -> one tuple on `left` and one on `right` (T3, T4),
    both anchored to the input. A line that is not an integer raises ValueError."""

    def process(self, tup: Tuple) -> None:
        n = int(tup["line"].strip())
        self.emit([n], stream="left")
        self.emit([n], stream="right")


class Square(BasicBolt):
    """Bolt3: n -> [n, n²]."""

    def process(self, tup: Tuple) -> None:
        n = tup["n"]
        self.emit([n, n * n])


class Cube(BasicBolt):
    """Bolt4: n -> [n, n³]."""

    def process(self, tup: Tuple) -> None:
        n = tup["n"]
        self.emit([n, n * n * n])


class Join(Bolt):
    """Bolt5: joins the square and the cube of each n (both inputs are grouped on n, so they
    meet at the same task). The half that arrives first is kept in keyed state and acked;
    the second completes the pair and emits [n, square, cube] anchored to itself. Because
    the half-pairs live in state, a recovery that replays only one side (say `cube` failed)
    still finds the other side the original run stored."""

    def process(self, tup: Tuple) -> None:
        n = tup["n"]
        side = "square" if "square" in tup.fields else "cube"
        pair = dict(self.state.get(n) or {})
        pair[side] = tup[side]
        self.state.put(n, pair)
        if "square" in pair and "cube" in pair:
            self.emit([n, pair["square"], pair["cube"]], anchors=[tup])
        self.ack(tup)
