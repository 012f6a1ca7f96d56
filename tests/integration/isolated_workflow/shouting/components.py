"""word -> [word, WORD!]: a BasicBolt whose module the executors import from the shipped copy."""
from __future__ import annotations

from recovery import BasicBolt, Tuple
from shouting.style import loud


class Shout(BasicBolt):
    def process(self, tup: Tuple) -> None:
        self.emit([tup["word"], loud(tup["word"])])
