"""A second module of the package: its import must resolve in the shipped copy as well."""


def loud(word: str) -> str:
    return word.upper() + "!"
