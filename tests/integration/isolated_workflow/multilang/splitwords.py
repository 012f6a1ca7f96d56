"""A multilang bolt written as for Storm: storm.BasicBolt from the storm.py beside it; one
tuple per word of a line, anchored to the line, which is acked when process returns."""
import storm


class SplitWords(storm.BasicBolt):
    def process(self, tup):
        for word in tup.values[0].split():
            storm.emit([word])


SplitWords().run()
